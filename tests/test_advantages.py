"""Tier (a): advantages by hand, for every scale_rewards mode, the noise and the scale."""

import pytest
import torch

from grpo_core.algo.advantages import (
    STD_EPS,
    advantage_metrics,
    noise_active,
    normalize_rewards,
    perturb_advantages,
    scale_advantages,
)


def test_group_mode_by_hand():
    # group [1, 0, 0, 0]: mean 0.25; unbiased std = sqrt((0.75² + 3·0.25²) / 3) = sqrt(0.25) = 0.5
    # A = (r − 0.25) / (0.5 + 1e-4) → [0.75/0.5001, −0.25/0.5001 ×3]
    adv, m = normalize_rewards(torch.tensor([1.0, 0.0, 0.0, 0.0]), 4, "group")
    expected = torch.tensor([0.75, -0.25, -0.25, -0.25]) / (0.5 + STD_EPS)
    torch.testing.assert_close(adv, expected)
    assert float(m["reward"]) == pytest.approx(0.25)
    assert float(m["reward_std"]) == pytest.approx(0.5)
    assert float(m["frac_reward_zero_std"]) == 0.0


def test_batch_mode_by_hand():
    # groups [1, 0] and [1, 1]; centered by group mean: [0.5, −0.5, 0, 0]
    # batch std of [1, 0, 1, 1]: mean 0.75, squares 0.0625+0.5625+0.0625+0.0625 = 0.75, /3 → std 0.5
    adv, m = normalize_rewards(torch.tensor([1.0, 0.0, 1.0, 1.0]), 2, "batch")
    torch.testing.assert_close(adv, torch.tensor([0.5, -0.5, 0.0, 0.0]) / (0.5 + STD_EPS))
    # TRL 1.16's logging: reward_std is the batch std; frac_reward_zero_std looks at the std the
    # mode divides by (here the batch's, 0.5, so 0); the group stds √0.5 and 0 average to √0.5 / 2
    assert float(m["reward_std"]) == pytest.approx(0.5)
    assert float(m["reward_std_within_group"]) == pytest.approx(0.5**0.5 / 2)
    assert float(m["frac_reward_zero_std"]) == 0.0


def test_group_mode_logs_the_batch_std_and_the_mean_group_std_apart():
    _, m = normalize_rewards(torch.tensor([1.0, 0.0, 1.0, 1.0]), 2, "group")
    assert float(m["reward_std"]) == pytest.approx(0.5)  # std of [1, 0, 1, 1]
    assert float(m["reward_std_within_group"]) == pytest.approx(0.5**0.5 / 2)  # (std[1, 0] + std[1, 1]) / 2
    assert float(m["frac_reward_zero_std"]) == 0.5  # one group of two has std 0


def test_none_mode_is_centered_rewards_dr_grpo():
    # Dr. GRPO: no division. groups [3, 1] and [2, 2, ...]: A = r − group mean
    adv, _ = normalize_rewards(torch.tensor([3.0, 1.0, 2.0, 2.0]), 2, "none")
    torch.testing.assert_close(adv, torch.tensor([1.0, -1.0, 0.0, 0.0]))


@pytest.mark.parametrize("mode", ["group", "batch", "none"])
def test_zero_variance_groups_give_zero_not_nan(mode):
    # every group constant (TRL issue #3857): all advantages exactly 0 in every mode, never NaN
    adv, m = normalize_rewards(torch.tensor([1.0, 1.0, 0.0, 0.0, 0.5, 0.5]), 2, mode)
    assert torch.equal(adv, torch.zeros(6))
    assert float(m["reward_std_within_group"]) == 0.0
    assert float(m["frac_reward_zero_std"]) == (0.0 if mode == "batch" else 1.0)  # batch: the batch std is not 0


@pytest.mark.parametrize("mode", ["group", "batch"])
def test_standardized_groups_sum_to_zero(mode):
    # claim C1's reason: Σ_i A_i over a group is 0 (to rounding) after centering
    rewards = torch.tensor([1.0, 0.0, 0.0, 1.0, 1.0, 0.0, 0.0, 0.0])
    adv, _ = normalize_rewards(rewards, 4, mode)
    assert float(advantage_metrics(adv, 4)["advantages/group_sum_max_abs"]) < 1e-6


def test_advantage_metrics_by_hand():
    # groups [1, −1] and [0.5, 0.25]: |sums| = 0 and 0.75; mean |A| = (1+1+0.5+0.25)/4 = 0.6875
    m = advantage_metrics(torch.tensor([1.0, -1.0, 0.5, 0.25]), 2)
    assert float(m["advantages/group_sum_max_abs"]) == pytest.approx(0.75)
    assert float(m["advantages/abs_mean"]) == pytest.approx(0.6875)


def test_noise_statistics_over_many_draws():
    # N(0, 0.01²) over 200k draws: mean within 5 standard errors (5·0.01/√2e5 ≈ 1.1e-4), std ±2%
    gen = torch.Generator().manual_seed(0)
    base = torch.zeros(200_000)
    noise = perturb_advantages(base, 0.01, gen) - base
    assert abs(noise.mean().item()) < 1.2e-4
    assert noise.std().item() == pytest.approx(0.01, rel=0.02)


def test_noise_off_when_std_zero_returns_input_unchanged():
    adv = torch.tensor([1.0, -1.0])
    assert perturb_advantages(adv, 0.0, torch.Generator()) is adv


def test_noise_uses_its_own_generator_not_the_global_stream():
    torch.manual_seed(123)
    expected_next = torch.rand(3)
    torch.manual_seed(123)
    perturb_advantages(torch.zeros(1000), 0.01, torch.Generator().manual_seed(5))
    torch.testing.assert_close(torch.rand(3), expected_next)


@pytest.mark.parametrize(
    "step,std,steps,active",
    [
        (1, 0.01, 0, True),
        (500, 0.01, 0, True),  # 0 = every step
        (1, 0.01, 15, True),
        (15, 0.01, 15, True),
        (16, 0.01, 15, False),  # only the first 15
        (1, 0.0, 0, False),  # std 0 = off
    ],
)
def test_noise_only_in_first_n_steps(step, std, steps, active):
    assert noise_active(step, std, steps) is active


def test_advantage_scale_multiplies_and_one_is_identity():
    adv = torch.tensor([0.5, -2.0])
    torch.testing.assert_close(scale_advantages(adv, 10.0), torch.tensor([5.0, -20.0]))
    assert scale_advantages(adv, 1.0) is adv


def test_signal_groups_by_hand():
    # groups of 3: [1, 1, 1] uniform, [0, 1, 0] has signal, [0.5, 0.5, 0.5] uniform
    from grpo_core.algo.advantages import signal_groups

    rewards = torch.tensor([1.0, 1.0, 1.0, 0.0, 1.0, 0.0, 0.5, 0.5, 0.5])
    assert signal_groups(rewards, 3).tolist() == [False, True, False]


# ---- advantage estimators (grpo_core/algo/advantages.py, ADVANTAGE_ESTIMATORS) ----------------------------


def test_rloo_by_hand_one_right_in_a_group():
    # RLOO (Ahmadian et al. 2024; TRL's RLOOTrainer; verl's rloo): A_i = r_i − mean of the other G − 1
    # rewards. One right of four: its baseline is 0 → A = 1; each wrong one's is 1/3 → A = −1/3.
    # A group whose rewards are all equal gets 0, as under grpo.
    r = torch.tensor([1.0, 0.0, 0.0, 0.0, 2.0, 2.0, 2.0, 2.0, 3.0, 1.0, 0.0, 2.0])
    adv, metrics = normalize_rewards(r, 4, "none", "rloo")
    third = 1 / 3
    want = [1.0, -third, -third, -third, 0, 0, 0, 0, 3 - 1.0, 1 - 5 / 3, 0 - 2.0, 2 - 4 / 3]
    torch.testing.assert_close(adv, torch.tensor(want), atol=1e-6, rtol=0)
    assert metrics["frac_reward_zero_std"].item() == pytest.approx(1 / 3)  # the reward statistics are the estimator's


@pytest.mark.parametrize("G", [2, 3, 8])
def test_rloo_is_the_group_mean_baseline_scaled_by_g_over_g_minus_1(G):
    # r_i − (Σ r − r_i)/(G − 1) = G/(G − 1) · (r_i − mean): the same direction as grpo, larger by G/(G−1);
    # with scale_rewards group the std division makes them the same up to that factor too
    r = torch.rand(5 * G, generator=torch.Generator().manual_seed(G))
    for scale in ("none", "group", "batch"):
        rloo, _ = normalize_rewards(r, G, scale, "rloo")
        grpo, _ = normalize_rewards(r, G, scale, "grpo")
        torch.testing.assert_close(rloo, grpo * G / (G - 1), atol=1e-6, rtol=1e-6)


# ---- reward aggregation (grpo_core/tasks/rewards.py, REWARD_AGGREGATIONS) ---------------------------------


def test_normalize_then_sum_by_hand():
    # TRL's multi_objective_aggregation normalize_then_sum: each function's values normalized within the
    # group with the unbiased std, (r − mean)/(std + 1e-4), then Σ weight × normalized value. G = 3.
    from grpo_core.tasks.rewards import REWARD_AGGREGATIONS

    per_func = {"a": [1.0, 0.0, 0.0, 5.0, 5.0, 5.0], "b": [0.0, 0.0, 10.0, 1.0, 2.0, 3.0]}
    weights = [1.0, 2.0]

    def normalized(xs):
        m = sum(xs) / len(xs)
        sd = (sum((x - m) ** 2 for x in xs) / (len(xs) - 1)) ** 0.5
        return [(x - m) / (sd + 1e-4) for x in xs]

    want = []
    for g in range(2):
        a, b = normalized(per_func["a"][3 * g : 3 * g + 3]), normalized(per_func["b"][3 * g : 3 * g + 3])
        want += [1.0 * x + 2.0 * y for x, y in zip(a, b)]
    got = REWARD_AGGREGATIONS.get("normalize_then_sum")(per_func, weights, 3)
    torch.testing.assert_close(got, torch.tensor(want), atol=1e-5, rtol=1e-6)
    assert abs(got[3:].tolist()[0] - 2.0 * (-1 / 1.0001)) < 1e-5  # function a is constant in group 2: it adds 0
    # a function that varies little weighs as much as one that varies a lot: scaling b by 100 changes nothing
    # but the 1e-4 guard's share
    scaled = REWARD_AGGREGATIONS.get("normalize_then_sum")(
        {"a": per_func["a"], "b": [100 * x for x in per_func["b"]]}, weights, 3
    )
    torch.testing.assert_close(scaled, got, atol=3e-4, rtol=0)  # values of order 1: the guard moves them ≤ 2e-4
    plain = REWARD_AGGREGATIONS.get("sum_then_normalize")(per_func, weights, 3)
    assert plain.tolist() == [1.0 * x + 2.0 * y for x, y in zip(per_func["a"], per_func["b"])]


def test_normalize_then_sum_needs_batch_scaling_as_trl_divides():
    from conftest import make_cfg
    from grpo_core.config.validation import validate
    from grpo_core.util.errors import ConfigError

    with pytest.raises(
        ConfigError,
        match="multi_objective_aggregation: got normalize_then_sum with scale_rewards "
        "'group'; allowed: normalize_then_sum with scale_rewards batch",
    ):
        validate(make_cfg(multi_objective_aggregation="normalize_then_sum"))
    validate(make_cfg(multi_objective_aggregation="normalize_then_sum", scale_rewards="batch"))


def test_reinforce_pp_and_passk_baselines_by_hand():
    r = torch.tensor([1.0, 0.0, 0.0, 0.0, 2.0, 2.0, 3.0, 0.5])
    batch, _ = normalize_rewards(r, 4, "none", "reinforce_pp")  # mean of the batch 8.5 / 8
    torch.testing.assert_close(batch, r - 8.5 / 8, atol=1e-6, rtol=0)
    passk, _ = normalize_rewards(r, 4, "none", "grpo_passk")  # group 1: best 1, second 0; group 2: 3 vs 2
    assert passk.tolist() == [1.0, 0.0, 0.0, 0.0, 0.0, 0.0, 1.0, 0.0]
    tied, _ = normalize_rewards(torch.tensor([1.0, 1.0, 0.0, 0.0]), 4, "none", "grpo_passk")
    assert tied.tolist() == [0.0, 0.0, 0.0, 0.0]  # two bests: no margin, no signal


def test_overlong_penalty_by_hand():
    # DAPO's soft overlong punishment: max 20 tokens, buffer 8 → 0 up to 12 tokens, −factor·(n − 12)/8 after
    from grpo_core.tasks.rewards import overlong_penalty

    assert overlong_penalty([5, 12, 13, 16, 20], 20, 8, 1.0) == [0.0, 0.0, -0.125, -0.5, -1.0]
    assert overlong_penalty([16, 20], 20, 8, 0.5) == [-0.25, -0.5]


def test_overlong_penalty_reaches_the_advantages_not_the_logged_reward(tmp_path):
    from conftest import make_cfg
    from grpo_core.run import read_metrics, run_training

    cfg = make_cfg(max_steps=3, stl_window=1, overlong_buffer_len=4, log_completions_per_step=0)
    run_training(cfg, tmp_path / "run", progress=False)
    rows = read_metrics(tmp_path / "run" / "metrics.jsonl")
    completions = [
        __import__("json").loads(line) for line in (tmp_path / "run" / "completions.jsonl").read_text().splitlines()
    ]
    assert all(r["rewards/overlong_penalty"] <= 0 for r in rows)
    assert all(r["reward"] == pytest.approx(r["rewards/exact_match"], abs=1e-6) for r in rows)  # the task's reward
    lengths = [c["length"] for c in completions if c["step"] == 1]
    penalties = [min(-(n - (cfg.max_completion_length - 4)) / 4, 0.0) for n in lengths]
    assert rows[0]["rewards/overlong_penalty"] == pytest.approx(sum(penalties) / len(penalties), abs=1e-6)
