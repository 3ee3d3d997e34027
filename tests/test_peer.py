"""The peer check: TRL's GRPOTrainer trains one arm of a claim spec (grpo_peer/check.py, `grpo peer`), and
the report compares it with grpo-lab's runs of that arm (sweeps/deciding/peer.py)."""

import json

import pytest
import yaml

from sweeps.deciding.peer import AGREE, DISAGREE, NO_DIFFERENCE, ONE_STEP, TRL_ARGS, peer_section
from sweeps.deciding.runs import Run
from sweeps.spec import SweepSpec

SPEC = SweepSpec(
    name="pc",
    base={},
    grid={"learning_rate": [5e-5, 1e-4]},
    seeds=list(range(8)),
    replication_seeds=list(range(8, 16)),
    report={"tests": []},
)


def _ours(steps):
    return [
        Run(
            {"learning_rate": 5e-5, "seed": s},
            {"max_steps": 40},
            {"steps_to_learn": v, "reward_auc": 0.4 - v / 100},
            [],
        )
        for s, v in enumerate(steps)
    ]


def _peers(folder, steps):
    for s, v in enumerate(steps):
        sub = folder / f"seed-{s}"
        sub.mkdir(parents=True)
        (sub / "config.yaml").write_text(yaml.safe_dump({"learning_rate": 5e-5, "seed": s, "max_steps": 40}))
        (sub / "metrics.jsonl").write_text(json.dumps({"step": 1, "reward": 0.1}) + "\n")
        (sub / "summary.json").write_text(
            json.dumps(
                {
                    "status": "finished",
                    "steps_to_learn": v,
                    "reward_auc": 0.4 - (40 if v is None else v) / 100,
                    "median_step_time_s": 40.0 + s,
                    "device_name": "CPU B",
                }
            )
        )
    (folder / "seed-99").mkdir()  # a killed run: no summary, left out


@pytest.mark.parametrize(
    "ours, theirs, outcome",
    [
        # the same spread around 18: no difference, and 12 + 12 runs bound it within ±2 steps
        ([16, 17, 18, 18, 19, 20, 17, 18, 19, 18, 16, 20], [17, 18, 16, 19, 18, 20, 18, 17, 19, 18, 20, 16], AGREE),
        ([16, 17, 18, 18, 19, 20], [27, 28, 26, 29, 30, None], DISAGREE),  # TRL learns ~10 steps later
        ([12, 25, 18, 30, 9, 22], [20, 11, 28, 15, 33, 19], NO_DIFFERENCE),  # not significant, but ±2 is not ruled out
    ],
)
def test_the_peer_check_reads_agree_disagree_or_no_difference(tmp_path, ours, theirs, outcome):
    _peers(tmp_path / "pc", theirs)
    text, found = peer_section(SPEC, _ours(ours), tmp_path / "pc")
    assert found == outcome
    assert f"**Peer check: {outcome}**" in text
    assert "| steps_to_learn (margin ±2) | " in text and "| reward_auc (margin ±0.03) | " in text
    assert text.count("\n| 0 | ") == 1 and "| 99 |" not in text  # one row per finished TRL seed
    if outcome == AGREE:  # the shift with its interval, written as every other interval in the report
        assert "| steps_to_learn (margin ±2) | 12 | 12 | +0 [−1, +1] | 1 | **agree** |" in text
    if outcome == DISAGREE:
        assert "not learned" in text  # TRL's censored run, counted at max_steps in the test
        assert "| reward_auc (margin ±0.03) | 6 | 6 | −0.105 [−0.200, −0.080] | 0.00216 | **disagree** |" in text
    assert "predate the key-by-key record" in text  # no trl_args.json beside these runs: said, not hidden
    # each trainer's step time beside the other's, with the CPUs its runs record (grpo-lab's here record none)
    assert (
        f"grpo-lab not recorded; TRL {40 + (len(theirs) - 1) / 2:.1f} s (median of {len(theirs)} runs; CPU B)" in text
    )


def test_fewer_than_six_peer_runs_are_shown_not_tested(tmp_path):
    # one TRL seed finished (a check trained seed by seed): its row is shown, and no test is read from it
    _peers(tmp_path / "pc", [16])
    text, found = peer_section(SPEC, _ours([16, 17, 18]), tmp_path / "pc")
    assert found == "in training (1 of 6 TRL runs finished)"
    assert "| 0 | 16 | 16 | " in text and "rank-sum p" not in text


def test_the_one_step_comparison_is_printed_per_loss_and_beta(tmp_path):
    """grpo_peer/one_step.py's record beside the peer runs: one row per (loss type, β), each
    term's difference, and whether the two trainers agree; a differing config key is named."""
    _peers(tmp_path / "pc", [16])
    tolerance = {"advantages": 1e-5, "ref_logps": 1e-4, "grad": 1e-3}
    steps = [
        {
            "loss_type": "grpo",
            "beta": 0.0,
            "diff": {"advantages": 2.4e-7, "ref_logps": None, "grad": 5.1e-6},
            "differing_keys": [],
            "agree": True,
        },
        {
            "loss_type": "grpo",
            "beta": 0.04,
            "diff": {"advantages": 2.4e-7, "ref_logps": 3.8e-6, "grad": 0.21},
            "differing_keys": [["use_bias_correction_kl", "False", "True"]],
            "agree": False,
        },
    ]
    (tmp_path / "pc" / ONE_STEP).write_text(
        json.dumps(
            {
                "spec": "pc",
                "arm": {"learning_rate": 5e-5},
                "seed": 0,
                "tolerance": tolerance,
                "versions": "trl 1.16.0",
                "steps": steps,
            }
        )
    )
    text, _ = peer_section(SPEC, _ours([16, 17, 18]), tmp_path / "pc")
    assert "| loss_type | β | advantages (≤ 1e-05) | ref_logps (≤ 1e-04) | grad (≤ 1e-03) | reads |" in text
    assert "| grpo | 0 | 2.4e-07 | – | 5.1e-06 | agree |" in text
    assert "| grpo | 0.04 | 2.4e-07 | 3.8e-06 | 2.1e-01 | **differ** (use_bias_correction_kl differs) |" in text
    assert "**One step: 1 of 2 settings agree.**" in text


def test_no_peer_runs_no_section(tmp_path):
    assert peer_section(SPEC, _ours([10, 11]), tmp_path / "none") == ("", None)


@pytest.mark.longest  # ~1 min: two TRL steps on SmolLM2
def test_grpo_peer_trains_trl_on_a_specs_arm_and_writes_a_run_folder(smollm2, tmp_path):
    from conftest import run_grpo_here

    data = tmp_path / "add.jsonl"
    data.write_text(
        "".join(
            json.dumps({"prompt": f"What is {a} + {b}? Reply with only the number.", "answer": str(a + b)}) + "\n"
            for a in range(1, 6)
            for b in range(1, 6)
        )
    )
    base = {
        "model": str(smollm2),
        "dataset": str(data),
        "reward_funcs": ["last_number"],
        "use_peft": True,
        "lora_r": 4,
        "lora_alpha": 8,
        "beta": 0.04,
        "prompts_per_step": 2,
        "num_generations": 2,
        "max_completion_length": 6,
        "max_steps": 2,
        "stl_window": 1,
        "baseline_prompts": 2,
        "num_threads": 1,
    }
    spec = tmp_path / "pc.yaml"
    spec.write_text(
        yaml.safe_dump(
            {
                "name": "pc",
                "base": base,
                "grid": {"learning_rate": [5e-5, 1e-4]},
                "seeds": [0],
                "objective": "steps_to_learn",
            }
        )
    )
    # grpo-lab's run of the arm gives the baseline: a finished folder of that point
    ours = tmp_path / "runs" / "pc" / "trial-0000"
    from sweeps.spec import load_spec

    cfg = load_spec(spec).config_for({"learning_rate": 5e-5, "seed": 0})
    ours.mkdir(parents=True)
    (ours / "config.yaml").write_text(yaml.safe_dump(cfg.to_dict()))
    (ours / "metrics.jsonl").write_text(
        json.dumps({"step": 1, "reward": 0.5}) + "\n" + json.dumps({"step": 2, "reward": 0.5}) + "\n"
    )
    (ours / "summary.json").write_text(
        json.dumps({"status": "finished", "steps_completed": 2, "baseline_reward": 0.25})
    )

    done = run_grpo_here(
        "peer",
        str(spec),
        "--arm",
        "learning_rate=5e-5",
        "--seeds",
        "0",
        "--runs",
        str(tmp_path / "runs"),
        "--out",
        str(tmp_path / "peer"),
        cwd=tmp_path,
    )
    assert done.returncode == 0, done.stderr
    assert [line.split(",")[0] for line in done.stdout.splitlines() if "TRL step " in line] == [
        "seed 0: TRL step 1/2",
        "seed 0: TRL step 2/2",
    ]  # each step as it is logged
    out = tmp_path / "peer" / "pc" / "seed-0"
    summary = json.loads((out / "summary.json").read_text())
    assert summary["status"] == "finished" and summary["trainer"] == "trl" and summary["steps_completed"] == 2
    assert summary["baseline_reward"] == 0.25 and 0.0 <= summary["reward_auc"] <= 1.0
    assert summary["median_step_time_s"] > 0  # TRL's step time, recorded as grpo-lab's runs record theirs
    assert summary["device_name"] and summary["cpu_math"] and summary["mkl_branch"]  # and where it ran
    rows = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    assert [r["step"] for r in rows] == [1, 2] and all("reward" in r and "loss" in r for r in rows)
    assert yaml.safe_load((out / "config.yaml").read_text())["learning_rate"] == 5e-5
    keys = {key: [ours, theirs] for key, ours, theirs in json.loads((out / TRL_ARGS).read_text())}
    assert keys["use_bias_correction_kl"] == [False, False] and all(a == b for a, b in keys.values())
    # a seed grpo-lab has not run is refused, naming what to do
    refused = run_grpo_here(
        "peer",
        str(spec),
        "--arm",
        "learning_rate=5e-5",
        "--seeds",
        "3",
        "--runs",
        str(tmp_path / "runs"),
        "--out",
        str(tmp_path / "peer"),
        cwd=tmp_path,
    )
    assert refused.returncode == 2 and refused.stderr.startswith("grpo: error: --seeds 3: grpo-lab has no finished run")
    assert not (tmp_path / "peer" / "pc" / "seed-3").exists()


def test_the_peer_command_refuses_an_axis_twice_and_a_second_arm_in_one_folder(tmp_path):
    """One line and exit 2, nothing trained: an axis given twice in --arm (the last had won), and an
    arm whose spec's peer folder already holds another arm's seeds (it printed "seed 0 is done" and
    trained nothing, or would have been compared as the first arm); --seeds missing or beside --one-step."""
    from conftest import run_grpo_here

    spec = "experiments/real/cpu/r0_positive_control_room_cpu.yaml"
    done = run_grpo_here(
        "peer", spec, "--arm", "learning_rate=5e-5", "learning_rate=1e-4", "--seeds", "0", "--out", str(tmp_path)
    )
    assert done.returncode == 2 and "learning_rate given twice" in done.stderr
    seed = tmp_path / "real-cpu-room-positive-control" / "seed-0"
    seed.mkdir(parents=True)
    (seed / "config.yaml").write_text(yaml.safe_dump({"learning_rate": 5e-5, "seed": 0}))
    done = run_grpo_here("peer", spec, "--arm", "learning_rate=1e-4", "--seeds", "0", "--out", str(tmp_path))
    assert done.returncode == 2 and len(done.stderr.splitlines()) == 1
    assert "holds TRL runs of another arm, learning_rate=5e-05 (seed-0)" in done.stderr
    assert sorted(p.name for p in seed.parent.iterdir()) == ["seed-0"]
    for flags, needle in (
        (["--arm", "learning_rate=5e-5"], "--seeds: missing"),
        (["--arm", "learning_rate=5e-5", "--seeds", "0", "--one-step"], "--seeds: beside --one-step"),
    ):
        done = run_grpo_here("peer", spec, *flags, "--out", str(tmp_path))
        assert done.returncode == 2 and done.stderr.startswith(f"grpo: error: {needle}")


def test_the_peers_old_module_names_still_run_for_one_release():
    import importlib
    import subprocess
    import sys

    import grpo_peer.check
    import grpo_peer.one_step
    import grpo_peer.trl_config

    assert importlib.import_module("benchmarks.peer_check") is grpo_peer.check
    assert importlib.import_module("benchmarks.peer_step") is grpo_peer.one_step
    assert importlib.import_module("benchmarks.trl_config") is grpo_peer.trl_config
    from conftest import ROOT

    for old in ("benchmarks.peer_check", "benchmarks.peer_step"):
        done = subprocess.run([sys.executable, "-m", old, "--help"], capture_output=True, text=True, cwd=ROOT)
        assert done.returncode == 0 and "--arm KEY=VALUE" in done.stdout


def test_the_command_names_the_spec_inside_the_repository_and_no_folder_outside_it(tmp_path):
    # a report rebuilt in another checkout had shown that checkout's absolute path to the spec
    import dataclasses

    from sweeps.paths import REPO

    _peers(tmp_path / "pc", [16])
    inside = dataclasses.replace(SPEC, path=str(REPO / "experiments/real/cpu/r0_positive_control_room_cpu.yaml"))
    text, _ = peer_section(inside, _ours([16]), tmp_path / "pc")
    assert "grpo peer experiments/real/cpu/r0_positive_control_room_cpu.yaml --arm learning_rate=5e-05" in text
    outside = dataclasses.replace(SPEC, path=str(tmp_path / "mine.yaml"))
    text, _ = peer_section(outside, _ours([16]), tmp_path / "pc")
    assert "grpo peer mine.yaml --arm" in text and str(tmp_path) not in text


def test_trl_is_configured_key_by_key_from_the_grpo_lab_config(tmp_path):
    """One builder for TRL's side (grpo_peer/trl_config.py, used by `grpo bench` and the peer
    check): every shared key carries over, use_bias_correction_kl included (TRL's default is True,
    grpo-lab's False: left out, TRL's KL gradient would differ at β > 0)."""
    pytest.importorskip("trl", reason="TRL is the [bench] extra; scripts/bootstrap.sh installs it")
    from grpo_peer.trl_config import SAME_NAME, key_by_key, trl_args
    from grpo_core.config.schema import GRPOConfig

    cfg = GRPOConfig(
        beta=0.04,
        epsilon=0.2,
        epsilon_high=0.28,
        num_iterations=2,
        top_k=5,
        top_p=0.9,
        temperature=0.7,
        loss_type="cispo",
        scale_rewards="none",
        max_grad_norm=0.0,
        learning_rate=3e-5,
        lr_scheduler_type="cosine",
        warmup_ratio=0.25,
        prompts_per_step=4,
        num_generations=8,
        max_completion_length=48,
        max_steps=60,
        seed=7,
        steps_per_generation=4,
    )
    args = trl_args(cfg, str(tmp_path))
    rows = key_by_key(cfg, args)
    assert len(rows) == len(SAME_NAME) + 2
    assert [r for r in rows if r[1] != r[2]] == []
    assert args.use_bias_correction_kl is False and args.epsilon_high == 0.28 and args.loss_type == "cispo"
    assert args.per_device_train_batch_size == 32 and args.warmup_steps == 0.25 and args.lr_scheduler_type == "cosine"
    assert args.steps_per_generation == 4 and trl_args(cfg, str(tmp_path), max_steps=3).max_steps == 3
