"""`grpo train` end to end: files, MLflow, bad input (one line, exit 2, nothing written),
and failed runs recorded as failed."""

import json

import pytest

from conftest import CACHE, run_grpo as grpo, run_grpo_here as grpo_here
from grpo_lab.cli import main

BASE = ["--set", f"cache_dir={CACHE}", "--set", "baseline_prompts=8", "--no-progress"]


def base_without(overrides) -> list[str]:
    """BASE less the keys `overrides` (key=value strings) set: `grpo train` takes each key once."""
    keys = {o.split("=", 1)[0] for o in overrides}
    out, args = [], iter(BASE)
    for a in args:
        if a == "--set":
            value = next(args)
            if value.split("=", 1)[0] not in keys:
                out += [a, value]
        else:
            out.append(a)
    return out


BAD_INPUTS = [  # (overrides or files, key the message must name, words of what is allowed)
    (["loss_type=token_mean"], "loss_type", "grpo, bnpo, dapo, dr_grpo"),
    (["scale_rewards=std"], "scale_rewards", "group, batch, none"),
    (["lr_scheduler_type=step"], "lr_scheduler_type", "constant, linear, cosine"),
    (["num_generations=1"], "num_generations", "≥ 2"),
    (["gradient_accumulation_steps=3"], "gradient_accumulation_steps", "divisor"),
    (["learning_rate=-1e-4"], "learning_rate", "> 0"),
    (["advantage_noise_std=-0.01"], "advantage_noise_std", "≥ 0"),
    (["beta=-0.1"], "beta", "≥ 0"),
    (["advantage_scale=0"], "advantage_scale", "> 0"),
    (["warmup_steps=500", "max_steps=100"], "warmup_steps", "≤ max_steps"),
    (["warmup_ratio=1.5"], "warmup_ratio", "[0, 1)"),
    (["task=sorting"], "task", "addition, reverse"),
    (["not_a_key=1"], "not_a_key", "unknown key"),
    (["learning_rat=1e-4"], "learning_rat", "did you mean 'learning_rate'"),
    (["max_steps=ten"], "max_steps", "integer"),
    (["learning_rate=fast"], "learning_rate", "number"),
    (["top_p=0"], "top_p", "(0, 1]"),
    (["epsilon=1.5"], "epsilon", "(0, 1)"),
    (["model=/no/such/model/dir"], "model", "local model directory"),
    (["reward_funcs=no_such_reward"], "reward_funcs", "exact_match"),
    (["reward_funcs=no_such_module_xyz:f"], "reward_funcs", "cannot import"),
    (["max_completion_length=0"], "max_completion_length", "≥ 1"),
    # no silent corruption
    (["seed=-1"], "seed", "[0, 2^32 − 1]"),
    (["seed=1e23"], "seed", "expected an integer"),  # YAML reads 1e23 as text
    (["seed=4294967296"], "seed", "[0, 2^32 − 1]"),
    (["mlflow_tracking_uri=bogus://x"], "mlflow_tracking_uri", "sqlite:///"),
    (["mlflow_experiment="], "mlflow_experiment", "non-empty"),
    (["device=cuda"], "device", "no CUDA GPU"),
    (["mixed_precision=fp16"], "mixed_precision", "need a CUDA GPU"),
    (["max_completion_length=100"], "max_completion_length", "positions"),  # tiny model: 64
    (["stl_window=0"], "stl_window", "≥ 1"),
    (["reward_funcs=[exact_match, exact_match]"], "reward_funcs", "listed twice"),
    (["cache_dir=/proc/grpo-no-cache", "tiny_pretrain_steps=3"], "cache_dir", "writable"),
    # the variant axes
    (["importance_sampling_level=segment"], "importance_sampling_level", "token, sequence"),
    (["zero_variance_groups=filter"], "zero_variance_groups", "keep, drop, resample"),
    (["max_num_gen_batches=0"], "max_num_gen_batches", "≥ 1"),
    (["reward_weights=[1, 2]"], "reward_weights", "one weight per reward function: 1 (exact_match)"),
    (["reward_weights=[heavy]"], "reward_weights", "expected a number"),
    (["mask_truncated_completions=sometimes"], "mask_truncated_completions", "true or false"),
]


@pytest.mark.parametrize("overrides,key,allowed", BAD_INPUTS, ids=[b[1] + ":" + b[0][0] for b in BAD_INPUTS])
def test_bad_setting_one_line_exit_2_nothing_written(tmp_path, capsys, overrides, key, allowed):
    out = tmp_path / "run"
    args = ["train", "--out", str(out), *base_without(overrides)]
    if not any(o.startswith("mlflow_tracking_uri=") for o in overrides):  # a key is set once
        args += ["--set", f"mlflow_tracking_uri=sqlite:///{tmp_path}/m.db"]
    for o in overrides:
        args += ["--set", o]
    assert main(args) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and key in err and allowed in err, err
    assert not out.exists() and not (tmp_path / "m.db").exists()


def test_malformed_and_missing_yaml(tmp_path, capsys):
    bad = tmp_path / "bad.yaml"
    bad.write_text("loss_type: [grpo\nbeta: 0\n")
    assert main(["train", str(bad), "--no-mlflow"]) == 2
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0 and "bad.yaml" in err and "malformed YAML" in err
    assert main(["train", str(tmp_path / "missing.yaml"), "--no-mlflow"]) == 2
    assert "no such file" in capsys.readouterr().err
    listing = tmp_path / "list.yaml"
    listing.write_text("- 1\n- 2\n")
    assert main(["train", str(listing), "--no-mlflow"]) == 2
    assert "expected a mapping" in capsys.readouterr().err


@pytest.mark.parametrize("steps", [1, 3, 10])
def test_a_short_run_with_every_other_key_at_its_default_trains(tmp_path, capsys, steps):
    out = tmp_path / "run"
    assert (
        main(
            [
                "train",
                "--set",
                f"max_steps={steps}",
                "--set",
                f"cache_dir={CACHE}",
                "--no-mlflow",
                "--no-progress",
                "--out",
                str(out),
            ]
        )
        == 0
    )
    err = capsys.readouterr().err
    notes = [line for line in err.splitlines() if line.startswith("grpo: note:")]
    assert len(notes) == 1 and f"cannot be reached in {steps} steps" in notes[0] and "stl_window = 20" in notes[0]
    summary = json.loads((out / "summary.json").read_text())
    assert summary["status"] == "finished" and summary["steps_completed"] == steps
    assert summary["steps_to_learn"] is None and summary["learned"] == 0
    assert summary["steps_to_learn_reason"].startswith(f"cannot be reached in {steps} steps")
    # what to change: a window that fits, or more steps where none can (it said "stl_window ≤ 1" for 1 step)
    assert notes[0].endswith(
        {1: "train at least 2 steps)", 3: "set stl_window ≤ 1 for this run)", 10: "set stl_window ≤ 5 for this run)"}[
            steps
        ]
    )


def test_bad_input_from_a_real_process_has_no_traceback(tmp_path):
    res = grpo("train", "--set", "loss_type=nope", "--out", str(tmp_path / "r"))
    assert res.returncode == 2
    assert res.stderr.strip().count("\n") == 0 and "Traceback" not in res.stderr
    assert "loss_type" in res.stderr


def test_train_writes_run_folder_and_mlflow(tmp_path):
    config = tmp_path / "exp.yaml"
    config.write_text("task: addition\nmax_steps: 3\nstl_window: 1\nloss_type: dapo\n")  # partial file
    db = tmp_path / "mlflow.db"
    res = grpo_here(
        "train",
        str(config),
        *BASE,
        "--set",
        "beta=0.04",
        "--set",
        f"mlflow_tracking_uri=sqlite:///{db}",
        "--out",
        str(tmp_path / "run"),
        cwd=tmp_path,
    )
    assert res.returncode == 0, res.stderr
    run = tmp_path / "run"
    rows = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    assert [r["step"] for r in rows] == [1, 2, 3]
    summary = json.loads((run / "summary.json").read_text())
    assert summary["status"] == "finished" and summary["steps_completed"] == 3
    import yaml

    resolved = yaml.safe_load((run / "config.yaml").read_text())
    assert resolved["loss_type"] == "dapo" and resolved["beta"] == 0.04 and resolved["tiny_pretrain_steps"] == 1200

    from mlflow.tracking import MlflowClient

    client = MlflowClient(tracking_uri=f"sqlite:///{db}")
    exp = client.get_experiment_by_name("grpo-train")
    (mrun,) = client.search_runs([exp.experiment_id])
    assert mrun.info.status == "FINISHED"
    assert mrun.data.params["loss_type"] == "dapo" and mrun.data.params["beta"] == "0.04"
    assert set(resolved) | {"num_processes"} == set(mrun.data.params)  # every config value is logged
    assert mrun.data.params["num_processes"] == "1"  # and how many processes trained the run
    assert [m.step for m in client.get_metric_history(mrun.info.run_id, "reward")] == [1, 2, 3]
    assert "baseline_reward" in mrun.data.metrics
    assert mrun.data.metrics["steps_to_learn"] == 4  # not learned in 3 steps: logged as max_steps + 1
    assert mrun.data.tags["base_model_sha256"] == summary["base_model_sha256"] and mrun.data.tags["run_dir"]
    assert exp.artifact_location.startswith("file://")
    assert exp.tags["mlflow.experimentKind"] == "custom_model_development"  # the UI's model-training view


def test_reward_function_that_raises_is_recorded_as_failed(tmp_path):
    db = tmp_path / "mlflow.db"
    res = grpo_here(
        "train",
        *BASE,
        "--set",
        "reward_funcs=reward_helpers:explode_on_seven",
        "--set",
        "max_steps=3",
        "--set",
        "stl_window=1",
        "--set",
        f"mlflow_tracking_uri=sqlite:///{db}",
        "--out",
        str(tmp_path / "run"),
        cwd=tmp_path,
    )
    assert res.returncode == 1 and "Traceback" not in res.stderr
    summary = json.loads((tmp_path / "run" / "summary.json").read_text())
    assert summary["status"] == "failed"
    assert "explode_on_seven" in summary["error"] and "seven is not allowed" in summary["error"]
    assert "completion" in summary["error"] and "7" in summary["error"]
    from mlflow.tracking import MlflowClient

    client = MlflowClient(tracking_uri=f"sqlite:///{db}")
    (mrun,) = client.search_runs([client.get_experiment_by_name("grpo-train").experiment_id])
    assert mrun.info.status == "FAILED" and "explode_on_seven" in mrun.data.tags["error"]


def test_non_finite_reward_stops_the_run(tmp_path):
    res = grpo_here(
        "train", *BASE, "--set", "reward_funcs=reward_helpers:nan_reward", "--no-mlflow", "--out", str(tmp_path / "run")
    )
    assert res.returncode == 1
    summary = json.loads((tmp_path / "run" / "summary.json").read_text())
    assert summary["status"] == "failed" and "non-finite" in summary["error"] and "nan_reward" in summary["error"]


def test_reward_too_large_for_float32_stops_the_run_naming_it(tmp_path):
    # 1e308 passed the finite check, overflowed in the baseline's float sums, and the baseline's
    # nan standard error asked for one more prompt at a time up to its cap: minutes before failing
    res = grpo_here(
        "train",
        *BASE,
        "--set",
        "reward_funcs=reward_helpers:huge_reward",
        "--no-mlflow",
        "--out",
        str(tmp_path / "run"),
    )
    assert res.returncode == 1 and "Traceback" not in res.stderr and res.stderr.count("\n") == 1, res.stderr
    assert (
        "huge_reward returned 1e+308 for completion 0" in res.stderr
        and "allowed: numbers of absolute value ≤ 1e+15" in res.stderr
    )
    summary = json.loads((tmp_path / "run" / "summary.json").read_text())
    assert summary["status"] == "failed" and "huge_reward" in summary["error"]


def test_out_folder_that_is_not_empty_is_refused(tmp_path, capsys):
    (tmp_path / "keep.txt").write_text("x")
    assert main(["train", "--out", str(tmp_path), "--no-mlflow"]) == 2
    assert "not empty" in capsys.readouterr().err
    assert (tmp_path / "keep.txt").read_text() == "x"


def test_interrupted_run_is_recorded_as_killed(tmp_path):
    db = tmp_path / "mlflow.db"
    res = grpo_here(
        "train",
        *base_without(["baseline_prompts=1"]),
        "--set",
        "reward_funcs=reward_helpers:interrupt",
        "--set",
        "baseline_prompts=1",
        "--set",
        f"mlflow_tracking_uri=sqlite:///{db}",
        "--out",
        str(tmp_path / "run"),
    )
    # the interrupt lands in the baseline, before step 1: the folder and MLflow still record it
    assert res.returncode == 130 and "Traceback" not in res.stderr
    assert json.loads((tmp_path / "run" / "summary.json").read_text())["status"] == "killed"
    from mlflow.tracking import MlflowClient

    client = MlflowClient(tracking_uri=f"sqlite:///{db}")
    (mrun,) = client.search_runs([client.get_experiment_by_name("grpo-train").experiment_id])
    assert mrun.info.status == "KILLED"


def test_a_second_interrupt_while_mlflow_is_written_says_what_is_recorded(tmp_path, monkeypatch):
    # it had printed "the run is recorded as killed" of a run MLflow still showed running
    import grpo_core.mlflow_logging

    def interrupted_again(*args, **kwargs):  # Ctrl-C pressed again as the killed run's record reaches MLflow
        raise KeyboardInterrupt

    monkeypatch.setattr(grpo_core.mlflow_logging, "record_end", interrupted_again)
    db = tmp_path / "mlflow.db"
    res = grpo_here(
        "train",
        *base_without(["baseline_prompts=1"]),
        "--set",
        "reward_funcs=reward_helpers:interrupt",
        "--set",
        "baseline_prompts=1",
        "--set",
        f"mlflow_tracking_uri=sqlite:///{db}",
        "--out",
        str(tmp_path / "run"),
    )
    assert res.returncode == 130 and "Traceback" not in res.stderr, res.stderr[-2000:]
    assert res.stderr.strip().splitlines() == [
        f"grpo: interrupted; the run is recorded as killed in {tmp_path / 'run'}; its MLflow record was interrupted as "
        "it was written: `grpo recover` completes it from the folder"
    ]  # (once its process is gone: not this one)
    assert json.loads((tmp_path / "run" / "summary.json").read_text())["status"] == "killed"
    from mlflow.tracking import MlflowClient

    client = MlflowClient(tracking_uri=f"sqlite:///{db}")
    (mrun,) = client.search_runs([client.get_experiment_by_name("grpo-train").experiment_id])
    assert mrun.info.status == "RUNNING" and mrun.data.tags["run_dir"] == str(tmp_path / "run")


def test_bad_files_one_line_exit_2_nothing_written(tmp_path, capsys):
    binary = tmp_path / "model.bin"
    binary.write_bytes(bytes(range(256)) * 4)
    mixed = tmp_path / "mixed.yaml"
    mixed.write_text("1: a\nloss_type: grpo\n")
    duplicate = tmp_path / "dup.yaml"
    duplicate.write_text("beta: 0.0\nbeta: 0.04\n")
    rows = tmp_path / "rows.jsonl"
    rows.write_text('{"prompt": "1+1=", "answer": "2"}\n{"answer": "3"}\n')
    readme = tmp_path / "README.md"
    readme.write_text("not a folder")
    cases = [
        ([str(binary)], "not a text file"),
        ([str(mixed)], "key 1 is a int"),
        ([str(duplicate)], "duplicate key 'beta'"),
        (["--set", f"dataset={rows}"], "row 2"),
        (["--out", str(readme)], "is a file"),
        (["--out", "/proc/grpo-read-only/run"], "cannot write there"),
    ]
    for args, needle in cases:
        out = ["--out", str(tmp_path / "run")] if "--out" not in args else []
        assert main(["train", *args, *out, "--set", f"mlflow_tracking_uri=sqlite:///{tmp_path}/m.db", *BASE]) == 2
        err = capsys.readouterr().err.strip()
        assert len(err.splitlines()) == 1 and needle in err, err
        assert not (tmp_path / "run").exists() and not (tmp_path / "m.db").exists()
    assert readme.read_text() == "not a folder"


def test_a_second_writer_to_a_run_folder_is_refused_and_the_first_is_untouched(tmp_path, capsys):
    from grpo_core.run import RUN_LOCK, claim_run_folder

    out = tmp_path / "run"
    with claim_run_folder(out):  # a run holding the folder, as a running `grpo train` does
        (out / "metrics.jsonl").write_text('{"step": 1}\n')
        assert main(["train", "--out", str(out), "--no-mlflow", *BASE]) == 2
        err = capsys.readouterr().err
        assert "another grpo run" in err and f"pid {__import__('os').getpid()}" in err
        assert (out / "metrics.jsonl").read_text() == '{"step": 1}\n'
    assert sorted(p.name for p in out.iterdir()) == [RUN_LOCK, "metrics.jsonl"]


def test_two_real_runs_into_one_folder_one_is_refused(tmp_path):
    import subprocess
    import sys

    from conftest import ROOT

    out = tmp_path / "o"
    env = {**__import__("os").environ, "PYTHONPATH": str(ROOT)}
    first = subprocess.Popen(
        [sys.executable, "-m", "grpo_lab", "train", "--set", "max_steps=100", "--out", str(out), "--no-mlflow", *BASE],
        cwd=ROOT,
        env=env,
        stderr=subprocess.PIPE,
        text=True,
    )
    while first.poll() is None and not (out / "config.yaml").exists():  # until the first run is writing
        __import__("time").sleep(0.05)
    second = grpo_here("train", "--set", "seed=1", "--set", "max_steps=100", "--out", str(out), "--no-mlflow", *BASE)
    assert first.wait() == 0, first.stderr.read()
    assert second.returncode == 2 and "Traceback" not in second.stderr and len(second.stderr.strip().splitlines()) == 1
    rows = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    assert [r["step"] for r in rows] == list(range(1, 101))  # one writer: every line whole, in order
    assert json.loads((out / "summary.json").read_text())["status"] == "finished"


def test_reward_functions_with_one_name_stay_apart(tmp_path):
    from conftest import make_cfg
    from grpo_core.trainer import GRPOTrainer

    trainer = GRPOTrainer(make_cfg(reward_funcs=["reward_helpers:constant", "reward_helpers_other:constant"]))
    assert sorted(trainer.reward_funcs) == ["reward_helpers.constant", "reward_helpers_other.constant"]
    batch = trainer.generate_batch()
    assert batch.metrics["rewards/reward_helpers.constant"] == 1.0
    assert batch.metrics["rewards/reward_helpers_other.constant"] == 0.5  # both counted, neither overwritten
    assert batch.metrics["reward"] == 1.5


def test_reward_returned_as_a_string_fails_the_run(tmp_path):
    res = grpo_here(
        "train",
        *BASE,
        "--set",
        "reward_funcs=reward_helpers:string_reward",
        "--no-mlflow",
        "--out",
        str(tmp_path / "run"),
    )
    assert res.returncode == 1 and "Traceback" not in res.stderr
    summary = json.loads((tmp_path / "run" / "summary.json").read_text())
    assert (
        summary["status"] == "failed" and "'1.0' (str)" in summary["error"] and "allowed: numbers" in summary["error"]
    )


def test_secrets_are_masked_in_error_lines(capsys):
    storage = "postgresql://grpo:hunter2@127.0.0.1:1/optuna"
    from conftest import ROOT

    assert main(["trials", str(ROOT / "experiments" / "example-grid.yaml"), "--storage", storage]) == 2
    err = capsys.readouterr().err
    assert "hunter2" not in err and "grpo:***@127.0.0.1" in err


def test_fetch_model_checks_its_destination_before_downloading(tmp_path):
    (tmp_path / "a-file").write_text("x")
    (tmp_path / "full").mkdir()
    (tmp_path / "full" / "notes.txt").write_text("mine")
    for dest, needle in (
        (tmp_path / "a-file", "is a file"),
        (tmp_path / "a-file" / "model", "is a file"),
        (tmp_path / "full", "not empty"),
        ("/proc/grpo-model", "cannot write"),
    ):
        before = sorted(p.name for p in tmp_path.iterdir())
        res = grpo_here("fetch-model", "--dest", str(dest))
        assert res.returncode == 2 and needle in res.stderr and len(res.stderr.strip().splitlines()) == 1, res.stderr
        assert sorted(p.name for p in tmp_path.iterdir()) == before  # no lock file, no partial folder


def test_an_interrupt_before_any_run_started_says_nothing_was_recorded(tmp_path, monkeypatch):
    # (a million-point grid's SIGTERM said "the run is recorded as killed" of a run that never existed)
    import sweeps.driving.driver
    from grpo_core.util.errors import Terminated

    def interrupted(*args, **kwargs):
        raise Terminated()

    monkeypatch.setattr(sweeps.driving.driver, "run_sweep", interrupted)
    (tmp_path / "s.yaml").write_text(
        f"name: s\nbase: {{cache_dir: {CACHE}}}\ngrid: {{loss_type: [grpo]}}\nseeds: [0]\n"
    )
    import grpo_core.run

    monkeypatch.setattr(grpo_core.run, "runs_started", 0)
    res = grpo_here("sweep", "s.yaml", cwd=tmp_path)
    assert res.returncode == 143 and "nothing was recorded" in res.stderr and "recorded as killed" not in res.stderr


def test_more_threads_than_cpus_trains_and_says_so(tmp_path, capsys):
    """num_threads is part of a run's numbers, so a run recorded on a larger machine keeps its
    threads here (allowed), with one note that it will be slower."""
    import os

    cpus = len(os.sched_getaffinity(0))
    out = tmp_path / "run"
    assert (
        main(
            [
                "train",
                "--set",
                "max_steps=2",
                "--set",
                "stl_window=1",
                "--set",
                f"num_threads={cpus + 2}",
                "--set",
                f"cache_dir={CACHE}",
                "--no-mlflow",
                "--no-progress",
                "--out",
                str(out),
            ]
        )
        == 0
    )
    notes = [line for line in capsys.readouterr().err.splitlines() if line.startswith("grpo: note:")]
    assert notes == [
        f"grpo: note: num_threads {cpus + 2} is more than the {cpus} CPU(s) this process may use: "
        f"the same numbers, more slowly"
    ]
    assert json.loads((out / "summary.json").read_text())["status"] == "finished"


@pytest.mark.parametrize(
    "args",
    [
        ("train", "--out", ""),
        ("sweep", "experiments/example-grid.yaml", "--out-root", ""),
        ("reproduce", "--quick", "--out", ""),
        ("trials", "x.yaml", "--storage", ""),
        ("ui", "--tracking-uri", ""),
    ],
)
def test_an_empty_place_is_refused_not_read_as_the_default(args, tmp_path):
    """`--out ''` (an unset variable in a script) had trained into the default folder in silence."""
    from conftest import run_grpo_here

    done = run_grpo_here(*args, cwd=tmp_path)
    assert done.returncode == 2 and "'': empty; allowed: a path" in done.stderr and len(done.stderr.splitlines()) == 1
    assert list(tmp_path.iterdir()) == []  # nothing written
