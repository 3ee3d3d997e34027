"""Rewards in worker processes: values in order, a per-completion timeout that a hanging reward
cannot get around, failures reported as in the training process, and the same training run."""

import pytest

import reward_helpers
from grpo_core.errors import RunFailure
from grpo_core.reward_pool import RewardPool
from grpo_core.rewards import compute_rewards, exact_match


def hang_on_seven(completions, **kwargs):
    """Never returns for a completion that contains a 7 (a reward server that hangs)."""
    import time

    if any("7" in c for c in completions):
        while True:
            time.sleep(60)
    return [1.0] * len(completions)


COMPLETIONS = [str(i) for i in range(40)]
COLUMNS = {"answer": [str(i % 3) for i in range(40)], "prompts": ["p"] * 40}


def test_values_come_back_in_order_and_equal_the_in_process_ones():
    funcs = {"exact_match": exact_match, "negative_length": reward_helpers.negative_length}
    pool = RewardPool(funcs, workers=3)
    try:
        first = pool.submit(COMPLETIONS, COLUMNS)
        second = pool.submit(COMPLETIONS[::-1], {k: v[::-1] for k, v in COLUMNS.items()})
        assert pool.collect(second) == (compute_rewards(funcs, COMPLETIONS[::-1], {k: v[::-1] for k, v in COLUMNS.items()}), 0)
        assert pool.collect(first) == (compute_rewards(funcs, COMPLETIONS, COLUMNS), 0)
    finally:
        pool.close()


def test_a_hanging_reward_times_out_and_the_rest_is_scored():
    pool = RewardPool({"hang": hang_on_seven}, workers=2, timeout=2.0, timeout_value=-1.0)
    try:
        values, timeouts = pool.collect(pool.submit(COMPLETIONS, COLUMNS))
    finally:
        pool.close()
    sevens = [i for i, c in enumerate(COMPLETIONS) if "7" in c]  # "7", "17", "27", "37"
    assert timeouts == len(sevens)
    assert [i for i, v in enumerate(values["hang"]) if v == -1.0] == sevens
    assert all(v == 1.0 for i, v in enumerate(values["hang"]) if i not in sevens)


def test_a_failing_reward_names_the_function_and_the_completion():
    pool = RewardPool({"explode_on_seven": reward_helpers.explode_on_seven}, workers=2)
    with pytest.raises(RunFailure, match=r"explode_on_seven raised ValueError: seven is not allowed on completion 7: '7'"):
        pool.collect(pool.submit(COMPLETIONS, COLUMNS))
    pool.close()
    pool = RewardPool({"strings": reward_helpers.string_reward}, workers=1)
    with pytest.raises(RunFailure, match="allowed: numbers"):  # the same checks as in the training process
        pool.collect(pool.submit(COMPLETIONS[:3], {k: v[:3] for k, v in COLUMNS.items()}))
    pool.close()


def test_training_with_reward_workers_matches_training_in_process(tmp_path):
    from conftest import make_cfg
    from grpo_core.run import TIMING_KEYS, read_metrics, run_training

    rows = {}
    for workers in (0, 2):
        cfg = make_cfg(max_steps=3, beta=0.04, reward_workers=workers, reward_funcs=["exact_match", "format_digits"])
        run_training(cfg, tmp_path / str(workers), progress=False)
        rows[workers] = [{k: v for k, v in r.items() if k not in TIMING_KEYS}
                         for r in read_metrics(tmp_path / str(workers) / "metrics.jsonl")]
    assert rows[2] == rows[0]


def test_reward_weights_by_hand():
    # TRL's reward_weights: Σ_f w_f · r_f per completion, the functions in reward_funcs order
    from grpo_core.rewards import combine_rewards

    per_func = {"exact_match": [1.0, 0.0, 1.0], "format_digits": [0.5, 0.5, 0.0]}
    assert combine_rewards(per_func, []) == [1.5, 0.5, 1.0]
    assert combine_rewards(per_func, [2.0, -1.0]) == [1.5, -0.5, 2.0]
