"""The mask stages (grpo_core/algo/loss_masks.py): which rows enter the loss and which still count in
the per-sequence normalizers, by hand."""

import torch

from conftest import make_cfg
from grpo_core.algo.loss_masks import MASK_STAGES, MaskInputs, loss_rows

G = 4
# three groups: group 0 all right (zero std), group 1 one right, group 2 mixed
TRAINED = torch.tensor([1.0, 1.0, 1.0, 1.0, 0.0, 0.0, 1.0, 0.0, 1.0, 0.0, 0.0, 1.0])
ENDED = torch.tensor([True, True, False, True, True, True, True, False, True, True, True, True])


def _rows(sampled=3.0, k=1, **cfg):  # k: the optimizer steps the batch feeds (steps_per_generation ÷ 1)
    config = make_cfg(num_generations=G, prompts_per_step=3, steps_per_generation=k, **cfg)
    assert config.steps_per_batch == k
    return loss_rows(config, MaskInputs(TRAINED, ENDED, sampled))


def test_both_stages_off_take_nothing_out():
    assert _rows() == (None, None, {})


def test_truncated_rows_leave_the_loss_but_stay_in_the_normalizer():
    in_loss, counted, metrics = _rows(mask_truncated_completions=True)
    assert in_loss.tolist() == ENDED.tolist() and counted is None and metrics == {}


def test_dropped_groups_leave_the_loss_and_the_normalizer_and_are_counted():
    in_loss, counted, metrics = _rows(sampled=3.0, zero_variance_groups="drop")
    assert in_loss.tolist() == [False] * 4 + [True] * 8
    assert counted.tolist() == in_loss.tolist()
    assert metrics == {"groups/sampled": 3.0, "groups/dropped": 1.0, "completions/generated": 12.0}


def test_the_stages_combine_in_order_and_counts_are_per_step():
    # dynamic sampling drew 6 groups for a batch feeding k = 2 steps: per step, half of each count
    in_loss, counted, metrics = _rows(
        sampled=6.0, k=2, zero_variance_groups="resample", mask_truncated_completions=True
    )
    assert in_loss.tolist() == [False] * 4 + [True, True, True, False] + [True] * 4
    assert counted.tolist() == [False] * 4 + [True] * 8  # the truncated row of group 1 still counts
    assert metrics == {"groups/sampled": 3.0, "groups/dropped": 2.0, "completions/generated": 12.0}


def test_each_stage_is_a_config_key_on_the_axes_table():
    from grpo_core.algo.axes import AXES

    keys = {key: a.stage for a in AXES for key in a.keys}
    assert [(s.key, s.stage) for s in MASK_STAGES] == [(s.key, keys[s.key]) for s in MASK_STAGES]
