"""completions.jsonl (log_completions): what the model wrote, in the run folder, in MLflow and on the
terminal; reading the completions changes nothing the run computes."""

import json

from conftest import CACHE, run_grpo_here as grpo_here

BASE = [
    "--set",
    f"cache_dir={CACHE}",
    "--set",
    "baseline_prompts=8",
    "--set",
    "max_steps=3",
    "--set",
    "stl_window=1",
    "--set",
    "prompts_per_step=4",
    "--set",
    "num_generations=4",
]
FIELDS = {"step", "prompt", "completion", "reward", "rewards/exact_match", "advantage", "length", "truncated"}


def rows_of(path):
    return [json.loads(line) for line in path.read_text().splitlines() if line]


def comparable(path):
    return [{k: v for k, v in row.items() if "time" not in k and "per_second" not in k} for row in rows_of(path)]


def test_every_completion_of_a_short_run_in_the_folder_mlflow_and_terminal(tmp_path):
    from mlflow.tracking import MlflowClient

    uri = f"sqlite:///{tmp_path}/m.db"
    res = grpo_here(
        "train",
        *BASE,
        "--set",
        "log_completions_per_step=0",
        "--set",
        "num_completions_to_print=2",
        "--set",
        f"mlflow_tracking_uri={uri}",
        "--no-progress",
        "--out",
        tmp_path / "run",
    )
    assert res.returncode == 0, res.stderr[-2000:]
    rows = rows_of(tmp_path / "run" / "completions.jsonl")
    metrics = rows_of(tmp_path / "run" / "metrics.jsonl")
    assert len(rows) == 3 * 16 and all(set(r) == FIELDS for r in rows)
    for step in (1, 2, 3):
        mine = [r for r in rows if r["step"] == step]
        assert len(mine) == 16
        # the rows are the step's batch: their mean reward is the logged reward, each group's
        # advantages sum to 0 (group-normalized), and the reward is the one function's value
        assert abs(sum(r["reward"] for r in mine) / 16 - metrics[step - 1]["reward"]) < 1e-6
        for g in range(4):
            group = mine[4 * g : 4 * g + 4]
            assert len({r["prompt"] for r in group}) == 1
            assert abs(sum(r["advantage"] for r in group)) < 1e-5
        assert all(r["rewards/exact_match"] == r["reward"] for r in mine)  # one function, weight 1
        assert all(1 <= r["length"] <= 8 and isinstance(r["truncated"], bool) for r in mine)
        mean_length = sum(r["length"] for r in mine) / 16
        assert abs(mean_length - metrics[step - 1]["completions/mean_length"]) < 1e-6
    assert res.stdout.count("  completion: ") == 3 * 2 and "step 3 · reward" in res.stdout
    # MLflow: the file and the table the run page shows
    client = MlflowClient(tracking_uri=uri)
    run = client.search_runs([client.get_experiment_by_name("grpo-train").experiment_id])[0]
    assert {"completions.jsonl", "completions.json"} <= {a.path for a in client.list_artifacts(run.info.run_id)}
    from pathlib import Path

    table = json.loads(Path(client.download_artifacts(run.info.run_id, "completions.json", str(tmp_path))).read_text())
    assert table["columns"][:3] == ["step", "prompt", "completion"] and "rewards/exact_match" in table["columns"]
    assert len(table["data"]) == 48 and table["data"][0][2] == rows[0]["completion"]


def test_the_default_sample_and_logging_off_leave_the_run_as_it_was(tmp_path):
    runs = {}
    for name, extra in (
        ("default", []),
        ("off", ["--set", "log_completions=false"]),
        ("all", ["--set", "log_completions_per_step=0"]),
    ):
        res = grpo_here("train", *BASE, *extra, "--no-mlflow", "--no-progress", "--out", tmp_path / name)
        assert res.returncode == 0, res.stderr[-2000:]
        runs[name] = comparable(tmp_path / name / "metrics.jsonl")
    assert runs["default"] == runs["off"] == runs["all"]  # reading completions draws nothing
    assert not (tmp_path / "off" / "completions.jsonl").exists()
    sample = rows_of(tmp_path / "default" / "completions.jsonl")
    every = rows_of(tmp_path / "all" / "completions.jsonl")
    assert [len([r for r in sample if r["step"] == s]) for s in (1, 2, 3)] == [8, 8, 8]
    assert all(r in every for r in sample)  # spread over the batch: rows 0, 2, 4 … of 16
    assert {r["prompt"] for r in sample if r["step"] == 1} == {r["prompt"] for r in every if r["step"] == 1}


def test_a_closed_output_pipe_stops_the_printing_not_the_run(tmp_path):
    # `grpo train … | head -2` closed the pipe after step 1's completions: the next print raised
    # BrokenPipeError, which failed the run at step 2 and printed a traceback
    import os
    import subprocess
    import sys

    from conftest import ROOT

    env = {**os.environ, "PYTHONPATH": f"{ROOT / 'tests'}{os.pathsep}{ROOT}"}
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "grpo_lab",
            "train",
            *BASE,
            "--set",
            "log_completions_per_step=0",
            "--set",
            "num_completions_to_print=2",
            "--no-mlflow",
            "--no-progress",
            "--out",
            str(tmp_path / "run"),
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        cwd=ROOT,
        env=env,
    )
    assert proc.stdout.readline().startswith("step 1 · reward")
    proc.stdout.close()  # the reader leaves, as `head` does
    err = proc.stderr.read()
    assert proc.wait() == 141 and "Traceback" not in err, err[-2000:]
    summary = json.loads((tmp_path / "run" / "summary.json").read_text())
    assert summary["status"] == "finished" and summary["steps_completed"] == 3
    assert len(rows_of(tmp_path / "run" / "completions.jsonl")) == 3 * 16  # every row, printed or not
