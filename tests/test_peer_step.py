"""Agreement with a reference, one whole step: grpo-lab's trainer and TRL 1.16's GRPOTrainer on the
same batch and LoRA weights (grpo_peer/one_step.py, `grpo peer --one-step`) compute the same rewards, advantages,
reference and policy log-probs, loss and LoRA gradient, for every loss type at β 0 and 0.04. The
comparison is shown to see a difference where one exists: TRL's use_bias_correction_kl (its
default, which the real peer runs first had) and another loss type each move the gradient past
its bound."""

import pytest
from conftest import make_cfg

from grpo_peer.one_step import BETAS, LOSS_TYPES, TOLERANCE, one_step


@pytest.fixture(scope="module")
def cfg():
    return make_cfg(num_threads=1)


@pytest.mark.parametrize("beta", BETAS)
@pytest.mark.parametrize("loss_type", LOSS_TYPES)
def test_one_step_agrees_with_trl(cfg, loss_type, beta):
    row = one_step(cfg, loss_type, beta)
    assert row["differing_keys"] == []
    for term, diff in row["diff"].items():
        if term == "ref_logps" and beta == 0:
            assert diff is None  # no reference forward on either side without the KL term
            continue
        assert diff <= TOLERANCE[term], (term, diff)
    assert row["agree"]
    # the step has content: completions of several lengths, a gradient on the adapters
    assert row["values"]["tokens"] > row["values"]["completions"]
    assert row["values"]["grad_norm_trl"] > 1e-3


def test_the_bias_corrected_kl_is_seen_as_a_difference(cfg):
    """TRL's default use_bias_correction_kl=True weights the KL by the ratio: equal to 1 on-policy,
    yet its gradient differs (the difference the review found in the first peer runs)."""
    row = one_step(cfg, "grpo", 0.04, trl_changes={"use_bias_correction_kl": True})
    assert row["diff"]["grad"] > 10 * TOLERANCE["grad"]
    assert row["diff"]["logps"] <= TOLERANCE["logps"]  # the same network: only the loss differs
    assert ["use_bias_correction_kl", "False", "True"] in row["differing_keys"]
    assert not row["agree"]


def test_another_normalizer_is_seen_as_a_difference(cfg):
    """grpo (per-sequence mean) against dapo (per-token over the batch) on completions of unequal
    lengths: the same rewards and advantages, another gradient."""
    row = one_step(cfg, "grpo", 0.0, trl_changes={"loss_type": "dapo"})
    assert row["diff"]["advantages"] <= TOLERANCE["advantages"]
    assert row["diff"]["grad"] > 10 * TOLERANCE["grad"]
    assert not row["agree"]
