"""Tier (a): the warmup schedule and the run metrics on hand-made series."""

import pytest

from grpo_core.record.run_metrics import (
    final_reward,
    first_crossing_step,
    loss_departure_step,
    moving_average,
    reward_auc,
    steps_to_learn,
    summarize,
    trailing_average,
)
from grpo_core.algo.schedule import lr_multiplier


@pytest.mark.parametrize(
    "step,sched,expected",
    [
        (0, "constant", 0.0),  # warmup 4: 0/4 — the first update uses lr 0 (as transformers does)
        (2, "constant", 0.5),  # 2/4
        (4, "constant", 1.0),  # warmup over
        (9, "constant", 1.0),
        (4, "linear", 1.0),  # decay over the 8 steps after warmup (total 12)
        (8, "linear", 0.5),  # 4 of 8 → 0.5
        (8, "cosine", 0.5),  # 0.5·(1 + cos(π/2)) = 0.5
        (12, "cosine", 0.0),
    ],
)
def test_lr_multiplier_by_hand(step, sched, expected):
    assert lr_multiplier(step, 4, 12, sched) == pytest.approx(expected, abs=1e-12)


def test_no_warmup_starts_at_full_rate():
    assert lr_multiplier(0, 0, 10, "constant") == 1.0


def test_moving_average_full_windows():
    assert moving_average([1, 2, 3, 4], 2) == [1.5, 2.5, 3.5]
    assert trailing_average([1, 2, 3, 4], 2) == [1.0, 1.5, 2.5, 3.5]  # figures: partial windows at the start


def test_steps_to_learn_reached():
    # baseline 0.2, δ 0.05 → threshold 0.25, sustain floor 0.225, window 3. Windows ending at steps 3..9:
    # 0.2, (0.2+0.2+0.3)/3 = 0.233, (0.2+0.3+0.3)/3 = 0.267 ≥ 0.25 → step 5; every later window is
    # 0.3 ≥ 0.225, and steps 6-8 follow it (≥ w = 3 steps to confirm) → 5
    rewards = [0.2, 0.2, 0.2, 0.3, 0.3, 0.3, 0.3, 0.3, 0.3]
    assert steps_to_learn(rewards, 0.2, window=3, delta=0.05) == 5


def test_steps_to_learn_never_reached():
    assert steps_to_learn([0.2] * 50, 0.2, window=20, delta=0.05) is None


def test_steps_to_learn_floor_is_the_window():
    # already above the threshold: the earliest possible answer is the first full window, step w
    assert steps_to_learn([0.9] * 40, 0.2, window=20, delta=0.05) == 20


def test_steps_to_learn_needs_w_steps_after_the_crossing():
    assert steps_to_learn([0.9] * 39, 0.2, window=20, delta=0.05) is None  # step 20 has only 19 after it
    assert steps_to_learn([0.9] * 5, 0.2, window=20, delta=0.05) is None


def test_a_crossing_that_falls_back_is_not_learning():
    # window 2, baseline 0.2: a noise spike (MA(2) = (0.2 + 0.3)/2 = 0.25 ≥ 0.25) then back to 0.2
    # (MA(5) = 0.2 < the floor 0.225)
    spike = [0.2, 0.3, 0.3, 0.2, 0.2, 0.2, 0.2, 0.2]
    assert first_crossing_step(spike, 0.2, window=2, delta=0.05) == 2  # the first version counted it
    assert steps_to_learn(spike, 0.2, window=2, delta=0.05) is None
    # a collapse after learning (C2 at a large learning rate): the rise did not last
    collapse = [0.2] * 4 + [0.6] * 10 + [0.1] * 10
    assert steps_to_learn(collapse, 0.2, window=2, delta=0.05) is None
    # a dip to MA(8) = 0.23 stays above the floor 0.225: still learned, at the first crossing,
    # MA(5) = (0.2 + 0.3)/2 = 0.25 → step 5
    dip = [0.2] * 4 + [0.3, 0.3, 0.23, 0.23, 0.3, 0.3, 0.3, 0.3]
    assert steps_to_learn(dip, 0.2, window=2, delta=0.05) == 5
    # a dip below the floor (MA(8) = MA(9) = 0.2) restarts the count: MA(10) = 0.25 → step 10
    deep = [0.2] * 4 + [0.3, 0.3, 0.2, 0.2, 0.2, 0.3, 0.3, 0.3, 0.3, 0.3]
    assert steps_to_learn(deep, 0.2, window=2, delta=0.05) == 10


def test_loss_departure_step():
    assert loss_departure_step([0.0, 1e-4, -2e-3, 0.5], eps=1e-3) == 3
    assert loss_departure_step([0.0, 1e-4], eps=1e-3) is None


def test_final_reward_and_auc():
    assert final_reward([0.0, 0.0, 1.0, 0.5], window=2) == pytest.approx(0.75)
    assert reward_auc([0.0, 0.0, 1.0, 0.5]) == pytest.approx(0.375)


def test_summarize_learned_flag():
    s = summarize([0.9] * 45, [0.0] * 45, 0.2, 20, 0.05, 1e-3)
    assert s["learned"] == 1 and s["steps_to_learn"] == 20 and s["loss_departure_step"] is None
    s = summarize([0.1] * 25, [0.1] * 25, 0.2, 20, 0.05, 1e-3)
    assert s["learned"] == 0 and s["steps_to_learn"] is None and s["loss_departure_step"] == 1


@pytest.mark.parametrize("sched", ["constant", "linear", "cosine"])
def test_scheduler_follows_the_hand_written_shape(sched):
    """make_scheduler is transformers' get_scheduler; lr_multiplier writes the shape out by hand."""
    import torch

    from grpo_core.algo.schedule import make_scheduler

    optimizer = torch.optim.SGD([torch.nn.Parameter(torch.zeros(1))], lr=1.0)
    scheduler = make_scheduler(optimizer, 4, 12, sched)
    for step in range(14):
        assert scheduler.get_last_lr()[0] == pytest.approx(lr_multiplier(step, 4, 12, sched), abs=1e-12)
        optimizer.step()
        scheduler.step()


def test_config_and_the_axes_names_load_without_torch():
    """Bad input is answered before torch loads: config reads each axis's allowed names from the
    module that implements it (loss.py, advantages.py, schedule.py), which import torch lazily."""
    import subprocess
    import sys

    code = "import sys, grpo_core.config.schema as c; print('torch' in sys.modules, c.LOSS_TYPES, c.SCALE_REWARDS)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "False ('grpo', 'bnpo', 'dapo', 'dr_grpo', 'cispo', 'sapo') ('group', 'batch', 'none')"
