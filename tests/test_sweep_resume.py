"""A sweep stopped mid-run with `save_steps`: the rerun goes on from the stopped run's latest
checkpoint in its folder, and the run's metrics are those of a sweep never stopped; a finished
run keeps no checkpoint; a checkpoint of another config is not taken. sweeps/driving/resume.py."""

import json
import os
import signal

import yaml

from conftest import CACHE, run_grpo_here as grpo_here
from grpo_core.run import read_metrics
from test_checkpoint import _summary, _without_timing

BASE = {
    "cache_dir": str(CACHE),
    "max_steps": 8,
    "stl_window": 2,
    "baseline_prompts": 8,
    "save_steps": 2,
    "num_threads": 1,
    "beta": 0.04,
}


def _spec(tmp_path, **base):
    spec = tmp_path / "spec.yaml"
    spec.write_text(
        yaml.safe_dump(
            {"name": "resumed", "grid": {"scale_rewards": ["group"]}, "seeds": [3], "base": {**BASE, **base}}
        )
    )
    return spec


def _sweep(tmp_path, spec, folder, store=None):
    store = store or folder
    return grpo_here(
        "sweep",
        spec,
        "--workers",
        "1",
        "--storage",
        f"journal:///{tmp_path}/{store}.log",
        "--tracking-uri",
        f"sqlite:///{tmp_path}/{store}.db",
        "--out-root",
        str(tmp_path / folder),
        cwd=tmp_path,
    )


def _stopped_at_step(tmp_path, monkeypatch, spec, step):
    """The sweep stopped by SIGTERM as its run reaches `step` (before that step's checkpoint is
    written: the latest on disk is the one before it)."""
    import grpo_core.trainer

    real_save, sent = grpo_core.trainer.save_checkpoint, []

    def save_checkpoint(trainer, run_dir, history):
        if trainer.step == step and not sent:
            sent.append(step)
            os.kill(os.getpid(), signal.SIGTERM)
        return real_save(trainer, run_dir, history)

    with monkeypatch.context() as patched:
        patched.setattr(grpo_core.trainer, "save_checkpoint", save_checkpoint)
        done = _sweep(tmp_path, spec, "runs")
    assert sent and done.returncode == 143, done.stderr[-2000:]
    return done


def _trials(tmp_path):
    import optuna

    from sweeps.driving.storage import open_storage

    study = optuna.load_study(study_name="resumed", storage=open_storage(f"journal:///{tmp_path}/runs.log"))
    return [(t.state.name, t.user_attrs.get("resumed_from"), t.user_attrs.get("run_dir")) for t in study.trials]


def test_a_stopped_run_goes_on_from_its_checkpoint_and_matches_a_run_never_stopped(tmp_path, monkeypatch):
    from sweeps.reporting.report_inputs import collect_runs
    from sweeps.spec import load_spec

    spec = _spec(tmp_path)
    assert _sweep(tmp_path, spec, "ref").returncode == 0
    ref = tmp_path / "ref" / "resumed" / "trial-0000"
    assert not list(ref.glob("checkpoint-*"))  # finished: its checkpoints are gone

    _stopped_at_step(tmp_path, monkeypatch, spec, 6)
    run = tmp_path / "runs" / "resumed" / "trial-0000"
    assert json.loads((run / "summary.json").read_text())["status"] == "killed"
    assert [p.name for p in run.glob("checkpoint-*")] == ["checkpoint-4"]
    assert len(read_metrics(run / "metrics.jsonl")) == 6  # steps 5 and 6 are redone from checkpoint-4

    _spec(tmp_path, save_steps=4)  # how often it checkpoints is no other sweep, nor another run
    again = _sweep(tmp_path, spec, "runs")
    assert again.returncode == 0, again.stderr[-2000:]
    assert "trial-0000 goes on from its checkpoint at step 4" in again.stdout, again.stdout[-2000:]
    assert sorted(p.name for p in (tmp_path / "runs" / "resumed").iterdir()) == ["trial-0000"]  # no new folder
    assert _without_timing(read_metrics(run / "metrics.jsonl")) == _without_timing(read_metrics(ref / "metrics.jsonl"))
    assert _summary(run) == _summary(ref)
    assert not list(run.glob("checkpoint-*"))
    assert yaml.safe_load((run / "config.yaml").read_text())["resume_from_checkpoint"] == str(run / "checkpoint-4")
    assert _trials(tmp_path) == [("FAIL", None, str(run)), ("COMPLETE", str(run / "checkpoint-4"), str(run))]

    runs, left_out = collect_runs(tmp_path / "runs", load_spec(spec))  # the report takes the resumed run
    assert [r.folder for r in runs] == [run] and left_out == []


def test_a_checkpoint_of_another_config_is_not_taken(tmp_path, monkeypatch):
    """The spec edited after the stop (another learning rate; a new study, as a fresh clone makes, since
    a study refuses an edited spec): the point trains anew in a new folder, and the stopped run is
    left as it was."""
    spec = _spec(tmp_path)
    _stopped_at_step(tmp_path, monkeypatch, spec, 4)
    stopped = tmp_path / "runs" / "resumed" / "trial-0000"
    _spec(tmp_path, learning_rate=2e-3)
    again = _sweep(tmp_path, spec, "runs", store="edited")
    assert again.returncode == 0, again.stderr[-2000:]
    (fresh,) = [p for p in (tmp_path / "runs" / "resumed").iterdir() if p != stopped]  # trial-0000-<invocation>
    assert json.loads((fresh / "summary.json").read_text())["status"] == "finished"
    assert yaml.safe_load((fresh / "config.yaml").read_text())["resume_from_checkpoint"] is None
    assert json.loads((stopped / "summary.json").read_text())["status"] == "killed"
    assert [p.name for p in stopped.glob("checkpoint-*")] == ["checkpoint-2"]


def test_a_held_folder_leaves_the_next_best_checkpoint(tmp_path):
    """Two stopped runs of the same config: the one with the later checkpoint is held by another process
    (its run lock), so the point goes on from the other's, not from step 1."""
    from filelock import FileLock

    from grpo_core.config.checkpoint_compat import CHECKPOINT_STATE
    from grpo_core.config.schema import GRPOConfig
    from grpo_core.run import RUN_LOCK
    from sweeps.driving.resume import resumable_checkpoint

    cfg = GRPOConfig(save_steps=2, cache_dir=str(CACHE))
    for folder, step in (("trial-0000", 6), ("trial-0001", 4), ("trial-0002", 2)):
        checkpoint = tmp_path / folder / f"checkpoint-{step}"
        checkpoint.mkdir(parents=True)
        (checkpoint / CHECKPOINT_STATE).write_bytes(b"state")
        (checkpoint / "config.yaml").write_text(yaml.safe_dump(cfg.to_dict()))
        (tmp_path / folder / "summary.json").write_text(json.dumps({"status": "killed"}))
    assert resumable_checkpoint(tmp_path, cfg) == tmp_path / "trial-0000" / "checkpoint-6"
    with FileLock(tmp_path / "trial-0000" / RUN_LOCK):
        assert resumable_checkpoint(tmp_path, cfg) == tmp_path / "trial-0001" / "checkpoint-4"
        with FileLock(tmp_path / "trial-0001" / RUN_LOCK), FileLock(tmp_path / "trial-0002" / RUN_LOCK):
            assert resumable_checkpoint(tmp_path, cfg) is None
    assert resumable_checkpoint(tmp_path, cfg) == tmp_path / "trial-0000" / "checkpoint-6"
