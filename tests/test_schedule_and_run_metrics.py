"""Tier (a): the warmup schedule and the run metrics on hand-made series."""

import pytest

from grpo_core.run_metrics import final_reward, loss_departure_step, moving_average, reward_auc, steps_to_learn, summarize
from grpo_core.schedule import lr_multiplier


@pytest.mark.parametrize("step,sched,expected", [
    (0, "constant", 0.0),    # warmup 4: 0/4 — the first update uses lr 0 (as transformers does)
    (2, "constant", 0.5),    # 2/4
    (4, "constant", 1.0),    # warmup over
    (9, "constant", 1.0),
    (4, "linear", 1.0),      # decay over the 8 steps after warmup (total 12)
    (8, "linear", 0.5),      # 4 of 8 → 0.5
    (8, "cosine", 0.5),      # 0.5·(1 + cos(π/2)) = 0.5
    (12, "cosine", 0.0),
])
def test_lr_multiplier_by_hand(step, sched, expected):
    assert lr_multiplier(step, 4, 12, sched) == pytest.approx(expected, abs=1e-12)


def test_no_warmup_starts_at_full_rate():
    assert lr_multiplier(0, 0, 10, "constant") == 1.0


def test_moving_average_full_windows():
    assert moving_average([1, 2, 3, 4], 2) == [1.5, 2.5, 3.5]


def test_steps_to_learn_reached():
    # baseline 0.2, δ 0.05 → threshold 0.25, window 3. Windows ending at steps 3,4,5,6:
    # (0.2+0.2+0.2)/3 = 0.2, (0.2+0.2+0.3)/3 = 0.233, (0.2+0.3+0.3)/3 = 0.267 ≥ 0.25 → step 5
    rewards = [0.2, 0.2, 0.2, 0.3, 0.3, 0.3]
    assert steps_to_learn(rewards, 0.2, window=3, delta=0.05) == 5


def test_steps_to_learn_never_reached():
    assert steps_to_learn([0.2] * 50, 0.2, window=20, delta=0.05) is None


def test_steps_to_learn_reached_at_first_window():
    # already above the threshold: the earliest possible answer is the first full window, step w
    assert steps_to_learn([0.9] * 30, 0.2, window=20, delta=0.05) == 20


def test_steps_to_learn_needs_a_full_window():
    assert steps_to_learn([0.9] * 5, 0.2, window=20, delta=0.05) is None


def test_loss_departure_step():
    assert loss_departure_step([0.0, 1e-4, -2e-3, 0.5], eps=1e-3) == 3
    assert loss_departure_step([0.0, 1e-4], eps=1e-3) is None


def test_final_reward_and_auc():
    assert final_reward([0.0, 0.0, 1.0, 0.5], window=2) == pytest.approx(0.75)
    assert reward_auc([0.0, 0.0, 1.0, 0.5]) == pytest.approx(0.375)


def test_summarize_learned_flag():
    s = summarize([0.9] * 25, [0.0] * 25, 0.2, 20, 0.05, 1e-3)
    assert s["learned"] == 1 and s["steps_to_learn"] == 20 and s["loss_departure_step"] is None
    s = summarize([0.1] * 25, [0.1] * 25, 0.2, 20, 0.05, 1e-3)
    assert s["learned"] == 0 and s["steps_to_learn"] is None and s["loss_departure_step"] == 1
