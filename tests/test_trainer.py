"""The trainer on the tiny model: claim C1 at step 1, μ > 1, micro-batches, warmup, determinism."""

import json

import pytest
import torch

from conftest import make_cfg
from grpo_core.tasks.models import committed_bases
from grpo_core.run import read_metrics, run_training
from grpo_core.trainer import GRPOTrainer

TIMING = {"step_time", "tokens_per_second"}


def first_step(**overrides):
    trainer = GRPOTrainer(make_cfg(**overrides))
    batch = trainer.generate_batch()
    return trainer, batch, trainer.optimize(batch)


def _has_signal(batch, G=8):
    """Some group has both advantage spread and completions of different lengths: the case
    where per-sequence and global token normalization give different step-1 losses."""
    adv = batch.advantages.view(-1, G)
    lengths = batch.completion_mask.sum(1).view(-1, G)
    spread = adv.abs().amax(1) > 0
    uneven = lengths.amax(1) > lengths.amin(1)
    return bool((spread & uneven).any())


@pytest.mark.parametrize("beta", [0.0, 0.04])
def test_c1_grpo_loss_zero_at_step_one_but_gradient_is_not(beta):
    _, batch, m = first_step(loss_type="grpo", beta=beta, seed=4)
    assert _has_signal(batch)  # non-trivial: some groups have reward spread, lengths differ
    assert abs(m["loss"]) <= 1e-6
    assert m["grad_norm"] > 0
    assert m["kl"] == 0.0  # policy equals reference at step 1


@pytest.mark.parametrize("loss_type", ["bnpo", "dapo"])
def test_c1_global_token_normalization_loss_not_zero_at_step_one(loss_type):
    _, batch, m = first_step(loss_type=loss_type, beta=0.0, seed=4)
    assert _has_signal(batch)
    assert abs(m["loss"]) > 1e-4


def test_c1_constant_rewards_give_zero_loss_and_zero_gradient():
    # TRL issue #3857: every group has zero variance → all advantages 0 → loss and gradient 0
    _, batch, m = first_step(reward_funcs=["reward_helpers:constant"], beta=0.0)
    assert batch.metrics["frac_reward_zero_std"] == 1.0
    assert torch.count_nonzero(batch.advantages) == 0
    assert m["loss"] == 0.0 and m["grad_norm"] == 0.0


def test_c1_constant_rewards_with_kl_leave_only_rounding():
    # β > 0: the k3 gradient 1 − exp(ref − logp) is 0 only up to float rounding between the
    # reference forward and the policy forward (measured ~2e-7)
    _, _, m = first_step(reward_funcs=["reward_helpers:constant"], beta=0.04)
    assert abs(m["loss"]) <= 1e-8 and m["grad_norm"] < 1e-5


def test_noise_makes_the_loss_leave_zero_at_step_one_and_keeps_sampling_stream():
    _, b0, m0 = first_step(seed=1)
    _, b1, m1 = first_step(seed=1, advantage_noise_std=0.01)
    assert torch.equal(b0.completion_ids, b1.completion_ids)  # noise has its own generator
    assert abs(m0["loss"]) <= 1e-6 < abs(m1["loss"])
    assert b1.metrics["advantages/group_sum_max_abs"] > 1e-3 > b0.metrics["advantages/group_sum_max_abs"]


def test_advantage_scale_reaches_the_loss_gradient():
    _, _, m1 = first_step(seed=1, advantage_scale=1.0, max_grad_norm=0.0)
    _, _, m2 = first_step(seed=1, advantage_scale=2.0, max_grad_norm=0.0)
    assert m2["grad_norm"] == pytest.approx(2 * m1["grad_norm"], rel=1e-4)


@pytest.mark.parametrize("loss_type", ["grpo", "dapo", "dr_grpo"])
def test_micro_batches_give_the_same_gradient(loss_type):
    # grpo, dapo and dr_grpo are defined over the generation batch: splitting it in 4 must not
    # change loss or gradient (bnpo is per micro-batch by definition, so it is left out)
    _, _, whole = first_step(seed=2, loss_type=loss_type, max_grad_norm=0.0)
    _, _, split = first_step(seed=2, loss_type=loss_type, max_grad_norm=0.0, gradient_accumulation_steps=4)
    assert split["grad_norm"] == pytest.approx(whole["grad_norm"], rel=1e-4)
    assert split["loss"] == pytest.approx(whole["loss"], abs=1e-6)


def test_mu_above_one_reuses_the_batch_and_clipping_acts():
    trainer = GRPOTrainer(make_cfg(num_iterations=3, learning_rate=3e-2, seed=1, max_steps=3))
    calls = []
    original = trainer.generate_batch
    trainer.generate_batch = lambda: calls.append(1) or original()
    steps = []
    trainer.train(on_step=steps.append)
    assert len(calls) == 1  # one generation batch for three optimizer steps
    assert steps[0]["clip_ratio"] == 0.0  # ratio is exactly 1 before any update
    assert max(s["clip_ratio"] for s in steps[1:]) > 0  # stored old log-probs: the ratio moved
    assert steps[1]["reward"] == steps[0]["reward"]  # same batch, same rewards


def test_warmup_first_step_has_zero_learning_rate_and_leaves_weights():
    trainer = GRPOTrainer(make_cfg(warmup_steps=2, seed=1, max_steps=3))
    before = [p.detach().clone() for p in trainer.model.parameters()]
    steps = [trainer.train_step()]  # the first of the three scheduled steps
    assert steps[0]["learning_rate"] == 0.0 and steps[0]["grad_norm"] > 0
    assert all(torch.equal(a, b) for a, b in zip(before, trainer.model.parameters()))


def test_reference_model_only_when_beta_positive():
    assert GRPOTrainer(make_cfg(beta=0.0)).ref_model is None
    assert GRPOTrainer(make_cfg(beta=0.1)).ref_model is not None


def test_every_spec_metric_is_logged(tmp_path):
    summary = run_training(make_cfg(max_steps=2, beta=0.04), tmp_path, progress=False)
    rows = read_metrics(tmp_path / "metrics.jsonl")
    spec = {
        "step",
        "loss",
        "policy_loss",
        "kl_loss",
        "kl",
        "grad_norm",
        "learning_rate",
        "reward",
        "reward_std",
        "reward_std_within_group",
        "rewards/exact_match",
        "frac_reward_zero_std",
        "advantages/abs_mean",
        "advantages/group_sum_max_abs",
        "completions/mean_length",
        "completions/clipped_ratio",
        "clip_ratio",
        "entropy",
        "step_time",
        "tokens_per_second",
    }
    assert [r["step"] for r in rows] == [1, 2]
    assert spec <= set(rows[0])
    for key in (
        "steps_to_learn",
        "learned",
        "loss_departure_step",
        "baseline_reward",
        "final_reward",
        "reward_auc",
        "wall_time_s",
        "baseline_reward_se",
        "baseline_prompts_used",
        "device_name",
        "versions",
        "num_processes",
    ):
        assert key in summary
    assert summary["status"] == "finished"
    if __import__("os").path.exists(
        "/proc/self/status"
    ):  # the run's own peak resident memory (Linux), at least what it holds now
        from grpo_core.util.memory import status_kib

        assert status_kib("VmRSS") / 1024 * 0.5 < summary["peak_rss_mib"] < 64 * 1024
    assert summary["base_model_sha256"] == committed_bases()["addition"]["sha256"]  # the committed base
    logged = json.loads(json.dumps(__import__("yaml").safe_load((tmp_path / "config.yaml").read_text())))
    assert logged == make_cfg(max_steps=2, beta=0.04).to_dict()


def test_same_seed_same_metrics(tmp_path):
    cfg = dict(max_steps=5, seed=3, beta=0.04, advantage_noise_std=0.01, num_iterations=2)
    run_training(make_cfg(**cfg), tmp_path / "a", progress=False)
    run_training(make_cfg(**cfg), tmp_path / "b", progress=False)
    strip = lambda rows: [{k: v for k, v in r.items() if k not in TIMING} for r in rows]
    a = strip(read_metrics(tmp_path / "a" / "metrics.jsonl"))
    b = strip(read_metrics(tmp_path / "b" / "metrics.jsonl"))
    assert a == b and len(a) == 5
    c = strip(
        read_metrics(
            run_training(make_cfg(**{**cfg, "seed": 4}), tmp_path / "c", progress=False)
            and tmp_path / "c" / "metrics.jsonl"
        )
    )
    assert c != a  # the seed matters


def test_reverse_task_trains():
    _, batch, m = first_step(task="reverse", seed=0)
    assert batch.metrics["reward"] > 0 and m["grad_norm"] > 0


@pytest.mark.slow
def test_learnability_heldout_accuracy_rises():
    # measured at commit time: greedy held-out accuracy 0.215 → 0.37 after 300 steps at lr 1e-4
    cfg = make_cfg(max_steps=300, learning_rate=1e-4, eval_every=300, eval_prompts=200, seed=0)
    trainer = GRPOTrainer(cfg)
    start = [p.detach().clone() for p in trainer.model.parameters()]
    summary = trainer.train()
    assert all(not torch.equal(a, b) for a, b in zip(start, trainer.model.parameters()))
    assert summary["eval_accuracy_after"] >= summary["eval_accuracy_before"] + 0.08
    assert summary["learned"] == 1
    assert summary["final_reward"] > summary["baseline_reward"] + 0.05


# ---- zero-variance groups, truncation masking, reward weights (claim C6; TRL's knobs) ----------------------
def test_dropped_groups_leave_the_loss_mask_and_are_counted():
    trainer, batch, m = first_step(seed=1, zero_variance_groups="drop")
    G = trainer.cfg.num_generations
    zero = batch.advantages.view(-1, G).abs().amax(dim=1) == 0  # zero-std groups (only those have A = 0 rows)
    assert 0 < int(zero.sum()) < zero.numel()  # the case worth testing: some dropped, some kept
    rows = zero.repeat_interleave(G)
    assert batch.loss_mask[rows].sum() == 0
    assert torch.equal(batch.loss_mask[~rows], batch.completion_mask[~rows])
    assert batch.metrics["groups/dropped"] == int(zero.sum())
    assert batch.metrics["groups/sampled"] == trainer.cfg.prompts_per_step
    assert batch.live_sequences == [float((~rows).sum())]  # one per optimizer step the batch feeds
    _, kept, m_keep = first_step(seed=1)
    assert torch.equal(kept.completion_ids, batch.completion_ids)  # the same samples; only the loss differs
    # grpo: the live sequences' mean instead of the mean over all (the dropped ones add 0): ratio B / live
    assert m["grad_norm"] == pytest.approx(m_keep["grad_norm"] * rows.numel() / float((~rows).sum()), rel=1e-4)


def test_resampling_fills_the_batch_with_groups_that_have_signal():
    trainer = GRPOTrainer(make_cfg(seed=1, zero_variance_groups="resample", max_num_gen_batches=6))
    batch = trainer.generate_batch()
    G, n = trainer.cfg.num_generations, trainer.cfg.prompts_per_step
    zero = batch.advantages.view(-1, G).abs().amax(dim=1) == 0
    sampled = batch.metrics["groups/sampled"]
    assert sampled > n and sampled % n == 0 and sampled <= 6 * n  # it had to sample more, by whole rounds
    assert batch.metrics["completions/generated"] == sampled * G
    # every kept group has signal unless the cap was reached
    assert int(zero.sum()) == 0 or sampled == 6 * n
    assert batch.metrics["groups/dropped"] == sampled - int((~zero).sum())
    # the logged reward is the first round's (as drawn), not the kept groups' (selected for signal)
    first = GRPOTrainer(make_cfg(seed=1)).generate_batch()
    assert batch.metrics["reward"] == first.metrics["reward"]
    assert batch.metrics["frac_reward_zero_std"] == first.metrics["frac_reward_zero_std"] > 0
    assert batch.completion_ids.shape[0] == n * G and batch.loss_mask.shape == batch.completion_ids.shape


def test_resampling_stops_at_the_cap_and_drops_what_is_left():
    trainer = GRPOTrainer(
        make_cfg(reward_funcs=["reward_helpers:constant"], zero_variance_groups="resample", max_num_gen_batches=3)
    )
    batch = trainer.generate_batch()
    assert batch.metrics["groups/sampled"] == 3 * trainer.cfg.prompts_per_step
    assert batch.metrics["groups/dropped"] == 3 * trainer.cfg.prompts_per_step
    assert batch.loss_mask.sum() == 0
    m = trainer.optimize(batch)
    assert m["loss"] == 0.0 and m["grad_norm"] == 0.0


def test_truncated_completions_leave_the_loss_mask():
    trainer, batch, _ = first_step(seed=0, task="repeat", max_completion_length=6, mask_truncated_completions=True)
    ended = (batch.completion_ids == trainer.eos_id).any(dim=1)
    assert 0 < int(ended.sum()) < ended.numel()
    assert batch.loss_mask[~ended].sum() == 0
    assert torch.equal(batch.loss_mask[ended], batch.completion_mask[ended])


def test_reward_weights_weigh_each_function():
    funcs = ["exact_match", "reward_helpers:constant"]
    plain = GRPOTrainer(make_cfg(seed=1, reward_funcs=funcs)).generate_batch().metrics
    weighted = GRPOTrainer(make_cfg(seed=1, reward_funcs=funcs, reward_weights=[2.0, 0.5])).generate_batch().metrics
    assert weighted["rewards/exact_match"] == plain["rewards/exact_match"]  # per-function metrics unweighted
    const = plain["rewards/constant"]
    assert weighted["reward"] == pytest.approx(2 * plain["rewards/exact_match"] + 0.5 * const, abs=1e-6)
    assert plain["reward"] == pytest.approx(plain["rewards/exact_match"] + const, abs=1e-6)


def test_completions_to_learn_counts_what_was_generated(tmp_path):
    from grpo_core.record.run_metrics import completion_counts

    assert completion_counts([64, 128, 64, 192], 3) == {"completions_generated": 448, "completions_to_learn": 256}
    assert completion_counts([64, 64], None) == {"completions_generated": 128, "completions_to_learn": None}
    summary = run_training(
        make_cfg(seed=0, max_steps=4, stl_window=1, zero_variance_groups="resample"), tmp_path / "run", progress=False
    )
    generated = [m["completions/generated"] for m in read_metrics(tmp_path / "run" / "metrics.jsonl")]
    assert len(set(generated)) > 1  # resampling: some steps sampled more than one round
    assert summary["completions_generated"] == sum(generated)
    assert (
        summary["completions_to_learn"]
        == completion_counts(generated, summary["steps_to_learn"])["completions_to_learn"]
    )


def test_the_baseline_uses_the_reward_weights():
    # weight 1 on exact_match keeps its standard error (so the same prompts); the constant's 1 → 0.5
    funcs = ["exact_match", "reward_helpers:constant"]
    plain = GRPOTrainer(make_cfg(seed=1, reward_funcs=funcs)).baseline_reward()["baseline_reward"]
    weighted = GRPOTrainer(make_cfg(seed=1, reward_funcs=funcs, reward_weights=[1.0, 0.5])).baseline_reward()
    assert weighted["baseline_reward"] == pytest.approx(plain - 0.5, abs=1e-9)


def test_update_norm_is_the_change_the_step_made_and_adam_leaves_a_scaled_gradient_at_its_size():
    # claim C4's mechanism, measured: ×10 advantages give a ×10 gradient (grad_norm, before any
    # clip) but Adam's first step is m/√v = g/|g| per weight, so the update is the same size (eps
    # aside); the update_norm logged is the norm of the weights' change, computed here independently
    steps = {}
    for scale in (1.0, 10.0):
        trainer = GRPOTrainer(make_cfg(seed=3, max_grad_norm=0.0, advantage_scale=scale, beta=0.0, max_steps=2))
        before = [p.detach().clone() for p in trainer.model.parameters() if p.requires_grad]
        steps[scale] = trainer.train_step()
        after = [p.detach() for p in trainer.model.parameters() if p.requires_grad]
        moved = torch.linalg.vector_norm(torch.stack([torch.linalg.vector_norm(a - b) for a, b in zip(after, before)]))
        assert steps[scale]["update_norm"] == pytest.approx(float(moved), rel=1e-6) and moved > 0
    assert steps[10.0]["grad_norm"] / steps[1.0]["grad_norm"] == pytest.approx(10.0, rel=1e-4)
    # (1.01 measured: eps 1e-8 weighs on the weights whose gradient is near it, less so at ×10)
    assert steps[10.0]["update_norm"] / steps[1.0]["update_norm"] == pytest.approx(1.0, rel=0.03)
    # a clip that binds leaves the ×10 gradient at the clip (after it), which the C4 check reads
    clipped = GRPOTrainer(
        make_cfg(seed=3, max_grad_norm=1e-3, advantage_scale=10.0, beta=0.0, max_steps=2)
    ).train_step()
    assert clipped["grad_norm"] == pytest.approx(steps[10.0]["grad_norm"], rel=1e-6) and clipped["grad_norm"] > 1e-3


def test_a_prompt_template_puts_the_prompt_where_it_says_and_a_bad_one_is_refused(tmp_path):
    # a base model's worked examples before the question: the template is the config's, applied to
    # every prompt (sampling, the baseline, the positions check), and written to the run's config
    from grpo_core.util.errors import ConfigError

    template = "1+1=2, 2+2=4, {prompt}"  # (the tiny tokenizer's characters)
    trainer = GRPOTrainer(make_cfg(prompt_template=template, max_steps=1))
    assert trainer._format("3+4=") == "1+1=2, 2+2=4, 3+4="
    ids, mask = trainer._encode(["3+4="])
    assert trainer.tokenizer.decode(ids[0][mask[0].bool()]).replace(" ", "") == "1+1=2,2+2=4,3+4="
    assert GRPOTrainer(make_cfg(max_steps=1))._format("3+4=") == "3+4="  # "" : the prompt alone
    summary = run_training(make_cfg(prompt_template=template, max_steps=2), tmp_path, progress=False)
    assert summary["status"] == "finished"
    import yaml

    assert yaml.safe_load((tmp_path / "config.yaml").read_text())["prompt_template"] == template
    for bad in ("no placeholder", "{prompt} and {prompt}"):
        with pytest.raises(ConfigError, match=r"prompt_template: .*allowed: text holding \{prompt\} once"):
            make_cfg(prompt_template=bad)
