"""Rewards in worker processes: values in order, a per-completion timeout that a hanging reward
cannot get around, failures reported as in the training process, and the same training run."""

import pytest

import reward_helpers
from grpo_core.util.errors import RunFailure
from grpo_core.tasks.reward_pool import RewardPool
from grpo_core.tasks.rewards import compute_rewards, exact_match


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
        assert pool.collect(second) == (
            compute_rewards(funcs, COMPLETIONS[::-1], {k: v[::-1] for k, v in COLUMNS.items()}),
            0,
        )
        assert pool.collect(first) == (compute_rewards(funcs, COMPLETIONS, COLUMNS), 0)
    finally:
        pool.close()


@pytest.mark.parametrize("sig", ["SIGKILL", "SIGTERM"])
def test_reward_workers_end_with_a_trainer_killed_without_cleanup(sig, tmp_path):
    """A trainer process killed by SIGKILL (or by a SIGTERM nothing handles) runs no cleanup: its
    reward workers must not stay behind waiting on their queues (nor hold the pipes of whoever reads
    the trainer's output)."""
    import os
    import signal
    import subprocess
    import sys
    import time
    from pathlib import Path

    code = (
        "import os, sys, time; from grpo_core.tasks.reward_pool import RewardPool; from grpo_core.tasks.rewards import exact_match\n"
        "pool = RewardPool({'exact_match': exact_match}, workers=3)\n"
        "print(' '.join(str(w.process.pid) for w in pool.workers), flush=True); time.sleep(600)"
    )
    root = Path(__file__).resolve().parents[1]
    proc = subprocess.Popen([sys.executable, "-c", code], cwd=root, stdout=subprocess.PIPE, text=True)
    pids = [int(p) for p in proc.stdout.readline().split()]
    assert len(pids) == 3 and all(os.path.exists(f"/proc/{p}") for p in pids)
    proc.send_signal(getattr(signal, sig))
    proc.wait(timeout=30)

    def alive(pid):  # a zombie has ended; it waits only for its new parent (init) to reap it
        try:
            return Path(f"/proc/{pid}/stat").read_text().split(")")[-1].split()[0] != "Z"
        except FileNotFoundError:
            return False

    deadline = time.monotonic() + 10
    while any(alive(p) for p in pids) and time.monotonic() < deadline:
        time.sleep(0.1)
    left = [p for p in pids if alive(p)]
    for p in left:
        os.kill(p, signal.SIGKILL)
    assert not left, f"reward workers {left} outlived their trainer"
    assert proc.stdout.read() == ""  # the pipe closed: no worker holds it


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
    with pytest.raises(
        RunFailure, match=r"explode_on_seven raised ValueError: seven is not allowed on completion 7: '7'"
    ):
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
        rows[workers] = [
            {k: v for k, v in r.items() if k not in TIMING_KEYS}
            for r in read_metrics(tmp_path / str(workers) / "metrics.jsonl")
        ]
    assert rows[2] == rows[0]


def test_reward_weights_by_hand():
    # TRL's reward_weights: Σ_f w_f · r_f per completion, the functions in reward_funcs order
    from grpo_core.tasks.rewards import combine_rewards

    per_func = {"exact_match": [1.0, 0.0, 1.0], "format_digits": [0.5, 0.5, 0.0]}
    assert combine_rewards(per_func, []) == [1.5, 0.5, 1.0]
    assert combine_rewards(per_func, [2.0, -1.0]) == [1.5, -0.5, 2.0]


def test_last_number_needs_the_number_where_math_answer_evaluates_an_echo():
    # the real model's completions (results/real/cpu/REPORT.md): math-verify scores a restated sum as correct
    from grpo_core.tasks.rewards import last_number, math_answer

    completions = [
        "A fun math puzzle! 15+13 =",
        "15 + 13 = 28",
        "The sum is 28.",
        "28",
        "15 + 13 = 26 is the",
        "<think>15 + 13</think><answer>28</answer>",
        "2 + 18 is an interesting combination",
    ]
    answers = ["28"] * 6 + ["20"]
    assert last_number(completions, answer=answers) == [0.0, 1.0, 1.0, 1.0, 0.0, 1.0, 0.0]
    assert math_answer(completions[:1] + completions[-1:], answer=["28", "20"]) == [1.0, 1.0]  # the echo, evaluated
    assert last_number(["x = 1.50"], answer=["1.5"]) == [1.0] and last_number(["5"], answer=["n/a"]) == [0.0]


def test_a_reward_that_changes_its_arguments_changes_nothing_the_next_one_sees():
    """In the training process (reward_workers 0) each function gets copies: a reward that cleared
    `completions` left the baseline dividing by zero (a traceback), and a sort would have scored the
    next function's completions against the wrong answers."""
    from grpo_core.tasks.rewards import compute_rewards

    def clears(completions, answer, **_):
        completions.clear()
        answer.sort()
        return [0.0, 0.0]

    def matches(completions, answer, **_):
        return [float(c == a) for c, a in zip(completions, answer)]

    completions, columns = ["2", "1"], {"answer": ["2", "1"]}
    out = compute_rewards({"clears": clears, "matches": matches}, completions, columns)
    assert out == {"clears": [0.0, 0.0], "matches": [1.0, 1.0]}
    assert completions == ["2", "1"] and columns == {"answer": ["2", "1"]}
