"""Checkpoints: a run killed after a checkpoint and resumed from it gives the same metrics, step
for step, as a run that was never interrupted (same seed, CPU)."""

import json
import os
import shutil
import signal
import subprocess
import sys
import time

import pytest
import reward_helpers

from conftest import CACHE, ROOT, make_cfg, run_grpo_here as grpo_here
from grpo_lab.cli import main
from grpo_core.run import TIMING_KEYS, read_metrics, run_training

ARGS = ["--no-mlflow", "--no-progress", "--set", f"cache_dir={CACHE}", "--set", "baseline_prompts=8"]


def _without_timing(rows):
    return [{k: v for k, v in r.items() if k not in TIMING_KEYS} for r in rows]


def _summary(path):
    """A run's summary without what the machine decides: its times and its peak resident memory (a
    resumed process holds less than one that trained every step)."""
    s = json.loads((path / "summary.json").read_text())
    return {k: v for k, v in s.items() if not k.endswith("time_s") and k != "peak_rss_mib"}


def test_killed_run_resumed_from_checkpoint_matches_an_uninterrupted_run(tmp_path):
    # the killed run in a process of its own, the others in this one: torch's thread count is set
    # (num_threads 1), as MKL's sums depend on it
    # (the task's exact_match, held while the file `hold` exists: the run waits past checkpoint-80 for its kill)
    settings = [
        "--set",
        "max_steps=120",
        "--set",
        "save_steps=40",
        "--set",
        "num_threads=1",
        "--set",
        "reward_funcs=reward_helpers:held_exact_match",
    ]
    ref = tmp_path / "ref"
    assert grpo_here("train", *ARGS, *settings, "--out", str(ref)).returncode == 0
    assert [p.name for p in ref.glob("checkpoint-*")] == ["checkpoint-120"]  # only the latest is kept

    run = tmp_path / "run"
    hold = tmp_path / "hold"
    env = {**os.environ, "PYTHONPATH": f"{ROOT / 'tests'}{os.pathsep}{ROOT}", "GRPO_TEST_HOLD": str(hold)}
    proc = subprocess.Popen(
        [sys.executable, "-m", "grpo_lab", "train", *ARGS, *settings, "--out", str(run)],
        cwd=ROOT,
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    while proc.poll() is None:  # wait for the event, however long this machine takes
        if (run / "checkpoint-80").is_dir() and len((run / "metrics.jsonl").read_text().splitlines()) >= 85:
            break
        time.sleep(0.05)
    assert proc.poll() is None, "the run ended before it could be killed"
    reward_helpers.hold_at_next_reward(hold, lambda: proc.poll() is None)
    os.kill(proc.pid, signal.SIGKILL)  # preempted: steps after checkpoint-80 are lost
    proc.wait()
    hold.unlink()
    killed_at = len(read_metrics(run / "metrics.jsonl"))
    assert 80 < killed_at < 120

    res = grpo_here("train", *ARGS, *settings, "--set", f"resume_from_checkpoint={run / 'checkpoint-80'}")  # on in run/
    assert res.returncode == 0, res.stderr[-2000:]
    resumed = read_metrics(run / "metrics.jsonl")
    assert [m["step"] for m in resumed] == list(range(1, 121))
    assert _without_timing(resumed) == _without_timing(read_metrics(ref / "metrics.jsonl"))
    assert _summary(run) == _summary(ref)


def test_resume_mid_iteration_restores_the_reused_batch(tmp_path):
    # μ = 2: the checkpoint at step 3 falls between the two steps on one generation batch
    cfg = make_cfg(max_steps=5, save_steps=3, num_iterations=2, beta=0.04, advantage_noise_std=0.01)
    run_training(cfg, tmp_path / "ref", progress=False)
    shutil.copytree(tmp_path / "ref" / "checkpoint-3", tmp_path / "ckpt" / "checkpoint-3")
    shutil.copy(tmp_path / "ref" / "metrics.jsonl", tmp_path / "ckpt" / "metrics.jsonl")
    resumed_cfg = make_cfg(
        max_steps=5,
        save_steps=3,
        num_iterations=2,
        beta=0.04,
        advantage_noise_std=0.01,
        resume_from_checkpoint=str(tmp_path / "ckpt" / "checkpoint-3"),
    )
    run_training(resumed_cfg, tmp_path / "resumed", progress=False)
    assert _without_timing(read_metrics(tmp_path / "resumed" / "metrics.jsonl")) == _without_timing(
        read_metrics(tmp_path / "ref" / "metrics.jsonl")
    )


def test_a_lora_checkpoint_holds_the_adapters_and_resumes_exactly(tmp_path):
    """With LoRA a checkpoint holds what training changes (the adapters), not the frozen base;
    the run resumed from it gives the uninterrupted run's metrics, and so does a run that writes
    none (a sweep's report and study take save_steps as no part of what a run is)."""
    import torch

    settings = dict(max_steps=5, save_steps=3, use_peft=True, lora_r=4, beta=0.04, learning_rate=1e-2)
    run_training(make_cfg(**settings), tmp_path / "ref", progress=False)  # keeps checkpoint-3
    weights = torch.load(tmp_path / "ref" / "checkpoint-3" / "trainer_state.pt", weights_only=True)["model"]
    assert weights and all(".lora_A." in name or ".lora_B." in name for name in weights), sorted(weights)[:3]
    shutil.copytree(tmp_path / "ref" / "checkpoint-3", tmp_path / "ckpt" / "checkpoint-3")
    shutil.copy(tmp_path / "ref" / "metrics.jsonl", tmp_path / "ckpt" / "metrics.jsonl")
    run_training(
        make_cfg(**settings, resume_from_checkpoint=str(tmp_path / "ckpt" / "checkpoint-3")),
        tmp_path / "resumed",
        progress=False,
    )
    assert _without_timing(read_metrics(tmp_path / "resumed" / "metrics.jsonl")) == _without_timing(
        read_metrics(tmp_path / "ref" / "metrics.jsonl")
    )
    run_training(make_cfg(**{**settings, "save_steps": 0}), tmp_path / "none", progress=False)  # writing them
    assert _without_timing(read_metrics(tmp_path / "none" / "metrics.jsonl")) == _without_timing(
        read_metrics(tmp_path / "ref" / "metrics.jsonl")
    )  # changes nothing a run computes


@pytest.mark.parametrize(
    "setting, message",
    [
        ("resume_from_checkpoint=/no/such/checkpoint", "is not a checkpoint folder"),
        ("save_steps=-1", "save_steps"),
    ],
)
def test_bad_checkpoint_settings_one_line_exit_2(tmp_path, capsys, setting, message):
    assert main(["train", *ARGS, "--set", setting, "--out", str(tmp_path / "r")]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and message in err
    assert not (tmp_path / "r").exists()


def test_resume_with_a_different_config_is_refused(tmp_path, capsys):
    run_training(make_cfg(max_steps=2, save_steps=2), tmp_path / "ref", progress=False)
    ckpt = tmp_path / "ref" / "checkpoint-2"
    assert (
        main(
            [
                "train",
                *ARGS,
                "--set",
                "max_steps=2",
                "--set",
                "stl_window=1",
                "--set",
                "loss_type=bnpo",
                "--set",
                f"resume_from_checkpoint={ckpt}",
            ]
        )
        == 2
    )
    err = capsys.readouterr().err
    assert "loss_type='grpo'" in err and "allowed: the same config" in err


def test_a_checkpoint_that_would_run_code_is_refused(tmp_path, capsys):
    # a checkpoint folder with a matching config.yaml and a pickled payload (torch.save of an object
    # whose unpickling calls os.system): loading it with weights_only=True refuses it, no code runs
    run_training(make_cfg(max_steps=2, save_steps=2), tmp_path / "ref", progress=False)
    ckpt = tmp_path / "ref" / "checkpoint-2"
    marker = tmp_path / "pwned"

    class Payload:
        def __reduce__(self):
            return (os.system, (f"touch {marker}",))

    import torch

    torch.save({"step": 2, "model": Payload()}, ckpt / "trainer_state.pt")
    same = {**make_cfg(max_steps=2, save_steps=2).to_dict(), "resume_from_checkpoint": str(ckpt)}
    args = ["train", "--no-mlflow", "--no-progress", "--out", str(tmp_path / "resumed")]
    for key in (
        "cache_dir",
        "max_steps",
        "save_steps",
        "baseline_prompts",
        "eval_prompts",
        "stl_window",
        "resume_from_checkpoint",
    ):
        args += ["--set", f"{key}={same[key]}"]
    assert main(args) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "cannot restore" in err and not marker.exists()
    assert not (tmp_path / "resumed").exists()
    (ckpt / "trainer_state.pt").write_bytes(b"not a checkpoint")  # a corrupt file: the same one line
    assert main(args) == 2 and "cannot restore" in capsys.readouterr().err


def test_sigterm_records_the_run_as_killed_with_its_curve(tmp_path):
    from mlflow.tracking import MlflowClient

    db = tmp_path / "m.db"
    run = tmp_path / "run"
    env = {**os.environ, "PYTHONPATH": f"{ROOT / 'tests'}{os.pathsep}{ROOT}"}
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "grpo_lab",
            "train",
            "--no-progress",
            "--set",
            f"cache_dir={CACHE}",
            "--set",
            "baseline_prompts=8",
            "--set",
            "max_steps=2000",
            "--set",
            f"mlflow_tracking_uri=sqlite:///{db}",
            "--out",
            str(run),
        ],
        cwd=ROOT,
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )
    while proc.poll() is None and not (
        (run / "metrics.jsonl").exists() and len((run / "metrics.jsonl").read_text().splitlines()) >= 20
    ):
        time.sleep(0.05)
    os.kill(proc.pid, signal.SIGTERM)  # what kill, Slurm, Kubernetes and docker stop send
    assert proc.wait() == 143, proc.stderr.read()[-2000:]
    summary = json.loads((run / "summary.json").read_text())
    assert summary["status"] == "killed" and "SIGTERM" in summary["error"]
    client = MlflowClient(tracking_uri=f"sqlite:///{db}")
    (mrun,) = client.search_runs([client.get_experiment_by_name("grpo-train").experiment_id])
    assert mrun.info.status == "KILLED"
    logged = len(client.get_metric_history(mrun.info.run_id, "reward"))
    assert logged == len(read_metrics(run / "metrics.jsonl")) >= 20  # every step it trained reached MLflow


def test_grpo_recover_ends_a_sigkilled_run_and_backfills_its_curve(tmp_path):
    from mlflow.tracking import MlflowClient

    db = tmp_path / "m.db"
    run = tmp_path / "run"
    env = {**os.environ, "PYTHONPATH": f"{ROOT / 'tests'}{os.pathsep}{ROOT}"}
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "grpo_lab",
            "train",
            "--no-progress",
            "--set",
            f"cache_dir={CACHE}",
            "--set",
            "baseline_prompts=8",
            "--set",
            "max_steps=2000",
            "--set",
            f"mlflow_tracking_uri=sqlite:///{db}",
            "--out",
            str(run),
        ],
        cwd=ROOT,
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    while proc.poll() is None and not (
        (run / "metrics.jsonl").exists() and len((run / "metrics.jsonl").read_text().splitlines()) >= 30
    ):
        time.sleep(0.05)
    os.kill(proc.pid, signal.SIGKILL)  # nothing can be recorded: the OOM killer, a lost node
    proc.wait()
    client = MlflowClient(tracking_uri=f"sqlite:///{db}")
    (mrun,) = client.search_runs([client.get_experiment_by_name("grpo-train").experiment_id])
    assert mrun.info.status == "RUNNING" and not (run / "summary.json").exists()

    res = grpo_here("recover", "--tracking-uri", f"sqlite:///{db}")
    assert res.returncode == 0 and "1 run(s) ended" in res.stdout, res.stderr
    mrun = client.get_run(mrun.info.run_id)
    assert mrun.info.status == "KILLED" and "process died" in mrun.data.tags["failure_reason"]
    steps = [m.step for m in client.get_metric_history(mrun.info.run_id, "reward")]
    kept = [r["step"] for r in read_metrics(run / "metrics.jsonl")]
    assert sorted(steps) == kept and len(kept) >= 30  # the curve, backfilled from metrics.jsonl
    assert json.loads((run / "summary.json").read_text())["status"] == "killed"
    again = grpo_here("recover", "--tracking-uri", f"sqlite:///{db}")  # idempotent
    assert again.returncode == 0 and "0 run(s) ended" in again.stdout
