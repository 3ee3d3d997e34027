"""One baseline per set-up (sweeps/deciding/baselines.py): hand-computed cases."""

import pytest

from sweeps.deciding.baselines import read_register, record_missing, setup_key, with_setup_baselines
from sweeps.deciding.runs import Run

CONFIG = {
    "model": "m",
    "dataset": "d.jsonl",
    "reward_funcs": ["last_number"],
    "num_generations": 8,
    "max_completion_length": 192,
    "temperature": 1.0,
    "baseline_prompts": 16,
    "stl_delta": 0.15,
    "stl_window": 4,
    "max_steps": 12,
    "loss_departure_eps": 1e-3,
}
# a reward that sits at 0.1 and rises to 0.3 from step 5: against 0.094 (threshold 0.244) the window
# ending at step 8 is the first full one at 0.3; against 0.15 (threshold 0.30) too; against 0.2 never
REWARDS = [0.1] * 4 + [0.3] * 8


def _run(seed: int, baseline: float, machine: str, rewards=REWARDS) -> Run:
    metrics = [{"step": s, "reward": r, "loss": 0.0, "completions/generated": 32} for s, r in enumerate(rewards, 1)]
    summary = {
        "baseline_reward": baseline,
        "baseline_reward_se": 0.03,
        "baseline_prompts_used": 16,
        "device_name": machine,
        "base_model_sha256": "abc",
        "steps_to_learn": None,
        "learned": 0,
        "completions_to_learn": None,
    }
    return Run({"seed": seed}, {**CONFIG, "seed": seed}, summary, metrics)


def test_runs_of_one_set_up_made_on_two_machines_are_measured_against_one_baseline(tmp_path):
    # the C5 case: Intel's runs measured 0.094 and AMD's 0.109, the same quantity twice; the register
    # pools the two (their mean) and every run of the set-up is measured against it
    runs = [_run(0, 0.09375, "Intel(R) Xeon(R) Processor"), _run(1, 0.10938, "AMD EPYC"), _run(2, 0.10938, "AMD EPYC")]
    path = tmp_path / "baselines.json"
    added = record_missing(path, runs, date="2026-12-07")
    assert len(added) == 1 and added[0]["baseline_reward"] == pytest.approx((0.09375 + 0.10938) / 2)
    assert [(e["runs"], e["machines"]) for e in added[0]["estimates"]] == [
        (1, ["Intel(R) Xeon(R) Processor"]),
        (2, ["AMD EPYC"]),
    ]
    fixed = with_setup_baselines(runs, read_register(path))
    assert [r.summary["baseline_reward"] for r in fixed] == [pytest.approx(0.101565)] * 3
    assert [r.summary["run_baseline_reward"] for r in fixed] == [0.09375, 0.10938, 0.10938]
    assert [r.summary["steps_to_learn"] for r in fixed] == [8, 8, 8]
    assert [r.summary["completions_to_learn"] for r in fixed] == [256] * 3
    # an entry, once written, stays: a later run of another machine does not move it
    assert record_missing(path, runs + [_run(3, 0.2, "Another CPU")]) == []
    late = with_setup_baselines([_run(3, 0.2, "Another CPU")], read_register(path))[0]
    assert late.summary["baseline_reward"] == pytest.approx(0.101565) and late.summary["steps_to_learn"] == 8
    assert with_setup_baselines([_run(4, 0.2, "x")], {})[0].summary["steps_to_learn"] is None  # no register: its own


def test_another_set_up_gets_its_own_entry(tmp_path):
    other = _run(0, 0.2, "AMD EPYC")
    other.config["max_completion_length"] = 16
    path = tmp_path / "baselines.json"
    record_missing(path, [_run(1, 0.1, "AMD EPYC"), other])
    register = read_register(path)
    assert len(register) == 2 and setup_key(other)["max_completion_length"] == 16
    assert with_setup_baselines([other], register)[0].summary["baseline_reward"] == 0.2
