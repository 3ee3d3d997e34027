"""Killed workers: a SIGKILLed `grpo sweep` leaves a RUNNING trial and a RUNNING MLflow run;
the next `grpo sweep` fails the trial, ends the run as KILLED, and runs the grid point again.
Optuna's heartbeat path (RDB storages) is checked on its own."""

import json
import os
import signal
import sqlite3
import subprocess
import sys
import time

import pytest
import reward_helpers
import yaml

from conftest import CACHE, ROOT, run_grpo_here as grpo_here


def _spec(tmp_path, name, max_steps, held=False):
    """`held`: the task's reward is reward_helpers:held_exact_match, which waits while the file
    GRPO_TEST_HOLD names exists (a test stops a run mid-way before it signals it)."""
    path = tmp_path / f"{name}.yaml"
    base = {"cache_dir": str(CACHE), "max_steps": max_steps, "baseline_prompts": 8, "stl_window": 5}
    if held:
        base["reward_funcs"] = ["reward_helpers:held_exact_match"]
    path.write_text(
        yaml.safe_dump(
            {"name": name, "base": base, "grid": {"learning_rate": [1e-4, 3e-4]}, "seeds": [0]}, sort_keys=False
        )
    )
    return path


def _study(storage_url, name, spec_path):
    import optuna

    from sweeps.driving.search import make_sampler
    from sweeps.spec import load_spec
    from sweeps.driving.storage import open_storage

    spec = load_spec(spec_path)
    return spec, optuna.load_study(study_name=name, storage=open_storage(storage_url), sampler=make_sampler(spec))


def test_sigkilled_worker_trial_is_detected_and_its_point_runs_again(tmp_path):
    from mlflow.tracking import MlflowClient
    from optuna.trial import TrialState

    from sweeps.spec import grid_point_of, point_key

    spec_path = _spec(tmp_path, "killme", max_steps=60, held=True)  # killed at step 20 or so, held there
    journal = f"journal://{tmp_path}/optuna.log"
    tracking = f"sqlite:///{tmp_path}/mlflow.db"
    args = [
        "sweep",
        str(spec_path),
        "--storage",
        journal,
        "--tracking-uri",
        tracking,
        "--out-root",
        str(tmp_path / "runs"),
    ]
    hold = tmp_path / "hold"
    env = {**os.environ, "PYTHONPATH": f"{ROOT / 'tests'}{os.pathsep}{ROOT}", "GRPO_TEST_HOLD": str(hold)}
    proc = subprocess.Popen(
        [sys.executable, "-m", "grpo_lab", *args], cwd=ROOT, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE
    )
    metrics = tmp_path / "runs" / "killme" / "trial-0000" / "metrics.jsonl"
    while proc.poll() is None:  # mid-trial: some steps logged, not all
        if metrics.exists() and len(metrics.read_text().splitlines()) >= 20:
            break
        time.sleep(0.2)
    assert proc.poll() is None, proc.stderr.read().decode()[-2000:]
    reward_helpers.hold_at_next_reward(hold, lambda: proc.poll() is None)  # however slowly this test runs
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait()
    hold.unlink()

    spec, study = _study(journal, "killme", spec_path)
    killed = study.get_trials(deepcopy=False)[0]
    assert killed.state == TrialState.RUNNING  # what the dead process left behind
    client = MlflowClient(tracking_uri=tracking)
    assert client.get_run(killed.user_attrs["mlflow_run_id"]).info.status == "RUNNING"

    res = grpo_here(*args)  # the rerun detects the dead owner and completes the grid
    assert res.returncode == 0, res.stderr[-3000:]
    assert "1 trial(s) of dead workers failed" in res.stderr and "1 MLflow run(s) ended as KILLED" in res.stderr

    spec, study = _study(journal, "killme", spec_path)
    trials = study.get_trials(deepcopy=False)
    killed = trials[0]
    assert killed.state == TrialState.FAIL and "worker died" in killed.user_attrs["error"]
    complete = [point_key(grid_point_of(spec, t)) for t in trials if t.state == TrialState.COMPLETE]
    assert sorted(complete) == sorted(point_key(p) for p in spec.grid_points())  # every point exactly once
    run = client.get_run(killed.user_attrs["mlflow_run_id"])
    assert run.info.status == "KILLED" and "worker died" in run.data.tags["failure_reason"]
    summary = json.loads((tmp_path / "runs" / "killme" / "trial-0000" / "summary.json").read_text())
    assert summary["status"] == "killed"
    assert len(metrics.read_text().splitlines()) >= 20  # what it trained before dying is kept


def test_rdb_heartbeat_fails_a_silent_trial_and_enqueues_its_retry(tmp_path):
    import optuna
    from optuna.trial import TrialState

    from sweeps.driving.recovery import Heartbeat, fail_stale, trial_id
    from sweeps.driving.storage import open_storage

    storage = open_storage(f"sqlite:///{tmp_path}/optuna.db", heartbeat_interval=1)
    study = optuna.create_study(study_name="hb", storage=storage)
    alive, silent = study.ask(), study.ask()
    for trial in (alive, silent):
        trial.suggest_categorical("learning_rate", [1e-4, 3e-4])
        trial.set_user_attr("owner", "another-machine:123:456")  # not on this host: only the heartbeat can tell
    storage.record_heartbeat(trial_id(storage, study, silent.number))  # one beat, then silence: its worker "died"
    with Heartbeat(storage, study, alive):
        time.sleep(4.0)  # > grace period (3 intervals)
        failed = fail_stale(study, storage)
    assert failed == [silent.number]
    trials = study.get_trials(deepcopy=False)
    assert trials[alive.number].state == TrialState.RUNNING
    assert trials[silent.number].state == TrialState.FAIL
    retry = trials[-1]  # RetryHeartbeatStaleTrialCallback: the same parameters, waiting to run
    assert retry.state == TrialState.WAITING and retry.system_attrs["failed_trial"] == silent.number
    assert retry.params == trials[silent.number].params


def test_owner_detection_tells_live_dead_and_unknown():
    from grpo_core.record.provenance import owner_alive, owner_id

    me = owner_id()
    assert owner_alive(me) is True
    host, pid, start = me.rsplit(":", 2)
    assert owner_alive(f"{host}:{pid}:{int(start) + 1}") is False  # same pid, another process: reused pid
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    assert owner_alive(f"{host}:{dead.pid}:1") is False
    assert owner_alive(f"other-host:{pid}:{start}") is None  # cannot tell from here


def test_non_finite_loss_stops_the_trial_with_its_reason_in_every_store(tmp_path):
    # advantage_scale 3e38 (within float32, so accepted) overflows it once scaled: the loss is not finite at step 1
    from mlflow.tracking import MlflowClient
    from optuna.trial import TrialState

    path = tmp_path / "nf.yaml"
    base = {"cache_dir": str(CACHE), "max_steps": 3, "baseline_prompts": 8, "stl_window": 2}
    path.write_text(
        yaml.safe_dump(
            {"name": "nf", "base": base, "grid": {"advantage_scale": [1.0, 3e38]}, "seeds": [0]}, sort_keys=False
        )
    )
    journal, tracking = f"journal://{tmp_path}/o.log", f"sqlite:///{tmp_path}/m.db"
    res = grpo_here(
        "sweep", str(path), "--storage", journal, "--tracking-uri", tracking, "--out-root", str(tmp_path / "runs")
    )
    assert res.returncode == 1 and "1 trial(s) failed" in res.stdout
    spec, study = _study(journal, "nf", path)
    bad = next(t for t in study.get_trials() if t.params["advantage_scale"] == 3e38)
    good = next(t for t in study.get_trials() if t.params["advantage_scale"] == 1.0)
    assert good.state == TrialState.COMPLETE
    assert bad.state == TrialState.FAIL and "non-finite loss at step 1" in bad.user_attrs["error"]
    summary = json.loads((tmp_path / "runs" / "nf" / f"trial-{bad.number:04d}" / "summary.json").read_text())
    assert summary["status"] == "failed" and "non-finite loss at step 1" in summary["error"]
    run = MlflowClient(tracking_uri=tracking).get_run(bad.user_attrs["mlflow_run_id"])
    assert run.info.status == "FAILED" and "non-finite loss" in run.data.tags["error"]


def test_ctrl_c_stops_the_sweep_cleanly_and_a_rerun_finishes_it(tmp_path):
    from mlflow.tracking import MlflowClient
    from optuna.trial import TrialState

    from sweeps.spec import grid_point_of, point_key

    spec_path = _spec(tmp_path, "ctrlc", max_steps=60, held=True)  # interrupted at step 20 or so, held there
    journal, tracking = f"journal://{tmp_path}/o.log", f"sqlite:///{tmp_path}/m.db"
    args = [
        "sweep",
        str(spec_path),
        "--storage",
        journal,
        "--tracking-uri",
        tracking,
        "--workers",
        "2",
        "--out-root",
        str(tmp_path / "runs"),
    ]
    hold = tmp_path / "hold"
    env = {**os.environ, "PYTHONPATH": f"{ROOT / 'tests'}{os.pathsep}{ROOT}", "GRPO_TEST_HOLD": str(hold)}
    # as in a terminal's foreground job: SIGINT not ignored, even where pytest itself was started in the
    # background of a shell without job control, which ignores it (and children inherit that)
    proc = subprocess.Popen(
        [sys.executable, "-m", "grpo_lab", *args],
        cwd=ROOT,
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        start_new_session=True,
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),
    )
    metrics = tmp_path / "runs" / "ctrlc" / "trial-0000" / "metrics.jsonl"
    while proc.poll() is None:
        if metrics.exists() and len(metrics.read_text().splitlines()) >= 20:
            break
        time.sleep(0.2)
    assert proc.poll() is None, "the sweep ended before the signal was sent"
    reward_helpers.hold_at_next_reward(hold, lambda: proc.poll() is None)
    os.killpg(proc.pid, signal.SIGINT)  # what Ctrl-C in a terminal does: the whole process group
    proc.wait()
    hold.unlink()
    assert proc.returncode == 130, proc.stderr.read().decode()[-2000:]

    spec, study = _study(journal, "ctrlc", spec_path)
    interrupted = [t for t in study.get_trials(deepcopy=False) if t.state == TrialState.FAIL]
    assert interrupted and all(t.user_attrs["error"] == "interrupted" for t in interrupted)
    assert not [t for t in study.get_trials(deepcopy=False) if t.state == TrialState.RUNNING]
    client = MlflowClient(tracking_uri=tracking)
    assert all(client.get_run(t.user_attrs["mlflow_run_id"]).info.status == "KILLED" for t in interrupted)

    res = grpo_here(*[a if a != "2" else "1" for a in args])  # the rerun, on one worker: not forked from pytest
    assert res.returncode == 0, res.stderr[-2000:]
    spec, study = _study(journal, "ctrlc", spec_path)
    complete = [
        point_key(grid_point_of(spec, t)) for t in study.get_trials(deepcopy=False) if t.state == TrialState.COMPLETE
    ]
    assert sorted(complete) == sorted(point_key(p) for p in spec.grid_points())


def test_sigterm_to_the_sweep_ends_it_as_ctrl_c_does(tmp_path):
    from mlflow.tracking import MlflowClient
    from optuna.trial import TrialState

    spec_path = _spec(tmp_path, "term", max_steps=150)
    journal, tracking = f"journal://{tmp_path}/o.log", f"sqlite:///{tmp_path}/m.db"
    args = [
        "sweep",
        str(spec_path),
        "--storage",
        journal,
        "--tracking-uri",
        tracking,
        "--workers",
        "2",
        "--out-root",
        str(tmp_path / "runs"),
    ]
    env = {**os.environ, "PYTHONPATH": f"{ROOT / 'tests'}{os.pathsep}{ROOT}"}
    proc = subprocess.Popen(
        [sys.executable, "-m", "grpo_lab", *args],
        cwd=ROOT,
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        start_new_session=True,
    )
    metrics = tmp_path / "runs" / "term" / "trial-0000" / "metrics.jsonl"
    while proc.poll() is None:
        if metrics.exists() and len(metrics.read_text().splitlines()) >= 20:
            break
        time.sleep(0.2)
    assert proc.poll() is None, "the sweep ended before the signal was sent"
    os.kill(proc.pid, signal.SIGTERM)  # to the sweep process only, as `kill PID` or a scheduler does
    proc.wait()
    said = proc.stderr.read().decode()
    assert proc.returncode == 143, said[-2000:]
    # (its last line had said "no run had started in this process: nothing was recorded by it")
    assert "grpo sweep: interrupted; run the same command again to resume" in said.splitlines(), said
    assert said.strip().splitlines()[-1] == (
        "grpo: terminated (SIGTERM); each trial its workers had begun is recorded as failed, and its run as killed"
    ), said

    spec, study = _study(journal, "term", spec_path)
    trials = study.get_trials(deepcopy=False)
    assert not [t for t in trials if t.state == TrialState.RUNNING]  # nothing left for a later repair
    interrupted = [t for t in trials if t.state == TrialState.FAIL]
    assert interrupted and all(t.user_attrs["error"] == "interrupted (SIGTERM)" for t in interrupted)
    client = MlflowClient(tracking_uri=tracking)
    for t in interrupted:
        assert client.get_run(t.user_attrs["mlflow_run_id"]).info.status == "KILLED"
        summary = json.loads((tmp_path / "runs" / "term" / f"trial-{t.number:04d}" / "summary.json").read_text())
        assert summary["status"] == "killed"


def test_a_worker_whose_trial_was_failed_elsewhere_stops_writing_and_records_its_run_as_abandoned(
    tmp_path, monkeypatch
):
    """A worker paused past the heartbeat window (SIGSTOP, a suspended laptop) has its trial failed by
    another process and its point handed on. When it resumes, its fence (the trial's state in the
    storage, read between steps) stops the run before another step: the folder and the MLflow run
    say abandoned, once, and Optuna is not told a second time (it had raised UpdateFinishedTrialError
    with a traceback, and MLflow showed the run FINISHED beside its retry)."""
    import optuna
    from mlflow.tracking import MlflowClient
    from optuna.trial import TrialState

    import sweeps.driving.recovery as recovery

    real_lost, calls = recovery.Heartbeat.lost, {"n": 0}

    def paused_then_failed(self, every_s=5.0):  # at the 3rd step, "another process" fails the trial in the storage
        calls["n"] += 1
        if calls["n"] == 3:
            self.storage.set_trial_state_values(self.trial_id, TrialState.FAIL)
        return real_lost(self, every_s=0)

    monkeypatch.setattr(recovery.Heartbeat, "lost", paused_then_failed)
    spec = tmp_path / "fence.yaml"
    spec.write_text(
        yaml.safe_dump(
            {
                "name": "fence",
                "base": {"cache_dir": str(CACHE), "max_steps": 6, "stl_window": 2, "baseline_prompts": 8},
                "grid": {"learning_rate": [1e-4]},
                "seeds": [0],
            }
        )
    )
    store = f"sqlite:///{tmp_path}/m.db"
    done = grpo_here(
        "sweep",
        str(spec),
        "--storage",
        f"journal:///{tmp_path}/j.log",
        "--tracking-uri",
        store,
        "--out-root",
        str(tmp_path / "runs"),
        cwd=tmp_path,
    )
    assert "Traceback" not in done.stderr and "UpdateFinishedTrialError" not in done.stderr
    assert "trial 0: abandoned" not in done.stderr and "trial 0: its trial was failed by another process" in done.stderr
    summary = json.loads((tmp_path / "runs" / "fence" / "trial-0000" / "summary.json").read_text())
    assert summary["status"] == "abandoned" and summary["abandoned_after_step"] == 3  # checked after each step
    rows = (tmp_path / "runs" / "fence" / "trial-0000" / "metrics.jsonl").read_text().splitlines()
    assert len(rows) == 3  # no step written after the fence saw the trial failed (of 6)
    client = MlflowClient(tracking_uri=store)
    run = next(
        r
        for r in client.search_runs([client.get_experiment_by_name("fence").experiment_id])
        if r.data.tags.get("trial_number") == "0"
    )
    assert run.info.status == "KILLED" and run.data.tags["status"] == "abandoned"
    study = optuna.load_study(
        study_name="fence",
        storage=optuna.storages.JournalStorage(optuna.storages.journal.JournalFileBackend(str(tmp_path / "j.log"))),
    )
    assert [t.state for t in study.trials] == [TrialState.FAIL]  # told once; a rerun runs the point again
    assert done.returncode == 1 and "rerun to retry them" in done.stdout


@pytest.mark.parametrize("mode", ["grid", "search"])
def test_a_worker_paused_after_its_last_step_keeps_its_finished_run_without_a_traceback(tmp_path, monkeypatch, mode):
    """The fence's blind spot: paused after its run's last step (the fence has no step left to check),
    the worker finds its trial failed elsewhere only when it records the finished run in the trial.
    Optuna refuses that (UpdateFinishedTrialError); the worker then reports the run as finished after
    another process failed it, once, without a traceback, and Optuna is not told a second time.
    The run itself trained to the end: its folder and MLflow run say finished, with every step."""
    import optuna
    from mlflow.tracking import MlflowClient
    from optuna.trial import TrialState

    import sweeps.driving.recovery as recovery

    real_lost, calls = recovery.Heartbeat.lost, {"n": 0}

    def failed_after_the_last_step(self, every_s=5.0):  # the 6th step's check passes; then "another process" fails it
        calls["n"] += 1
        lost = real_lost(self, every_s=0)
        if calls["n"] == 6:
            self.storage.set_trial_state_values(self.trial_id, TrialState.FAIL)
        return lost

    monkeypatch.setattr(recovery.Heartbeat, "lost", failed_after_the_last_step)
    spec = tmp_path / "late.yaml"
    axes = (
        {"grid": {"learning_rate": [1e-4]}}
        if mode == "grid"
        # a search: its trial's one seed, then its records
        else {"search": {"learning_rate": {"low": 1e-4, "high": 2e-4}}, "sampler": "random", "n_trials": 1}
    )
    spec.write_text(
        yaml.safe_dump(
            {
                "name": "late",
                "base": {"cache_dir": str(CACHE), "max_steps": 6, "stl_window": 2, "baseline_prompts": 8},
                **axes,
                "seeds": [0],
            }
        )
    )
    store = f"sqlite:///{tmp_path}/m.db"
    done = grpo_here(
        "sweep",
        str(spec),
        "--storage",
        f"journal:///{tmp_path}/j.log",
        "--tracking-uri",
        store,
        "--out-root",
        str(tmp_path / "runs"),
        cwd=tmp_path,
    )
    assert "Traceback" not in done.stderr and "UpdateFinishedTrialError" not in done.stderr, done.stderr[-3000:]
    assert done.stderr.count("trial 0 finished after another process had failed it") == 1, done.stderr[-3000:]
    assert calls["n"] == 6  # the run's 6 steps were checked, the last before the trial was failed
    folder = tmp_path / "runs" / "late" / "trial-0000" / ("seed-0" if mode == "search" else "")
    summary = json.loads((folder / "summary.json").read_text())
    assert summary["status"] == "finished" and summary["steps_completed"] == 6
    assert len((folder / "metrics.jsonl").read_text().splitlines()) == 6
    client = MlflowClient(tracking_uri=store)
    runs = [
        r
        for r in client.search_runs([client.get_experiment_by_name("late").experiment_id])
        if r.data.tags.get("trial_number") == "0"
    ]  # a search: the trial's run and its seed's
    assert len(runs) == (2 if mode == "search" else 1) and {r.info.status for r in runs} == {"FINISHED"}
    study = optuna.load_study(
        study_name="late",
        storage=optuna.storages.JournalStorage(optuna.storages.journal.JournalFileBackend(str(tmp_path / "j.log"))),
    )
    assert [t.state for t in study.trials] == [TrialState.FAIL]  # told once, by the other process
    assert "error" not in study.trials[0].user_attrs  # not told a second time, as failed by this worker
    assert done.returncode == 1 and "rerun to retry them" in done.stdout


@pytest.mark.slow
def test_a_worker_paused_past_the_heartbeat_window_leaves_its_point_recorded_once(tmp_path):
    """The real thing the fence test above stages: a worker SIGSTOPped mid-trial (a suspended laptop,
    an overloaded node) on an RDB storage with a 1 s heartbeat. The other worker fails its silent
    trial and runs its point again; resumed, the paused worker stops before writing another step.
    Each point is then recorded once as done, in Optuna, the run folders and MLflow alike, and the
    paused trial's run says abandoned there."""
    import optuna
    import sqlalchemy.exc
    from filelock import FileLock
    from mlflow.tracking import MlflowClient
    from optuna.trial import TrialState

    from sweeps.driving.storage import claim_lock_path
    from sweeps.spec import grid_point_of, load_spec, point_key

    def _locked(*databases):
        """Whether a database stays locked for a second: the stopped worker was mid-write. Stopped so,
        it would hold the store until resumed, and the other worker's writes would time out waiting
        (CI saw MLflow's "database is locked" traceback); this test is about the heartbeat fence, so
        it pauses a worker between writes."""
        for db in (d for d in databases if d.exists()):
            con = sqlite3.connect(db, timeout=1.0)
            try:
                con.execute("BEGIN EXCLUSIVE")  # waits out the running worker's short writes
                con.rollback()
            except sqlite3.OperationalError:
                return True
            finally:
                con.close()
        return False

    def _state(storage, number):
        try:
            return optuna.load_study(study_name="pause", storage=storage).trials[number].state
        except sqlalchemy.exc.OperationalError:  # the file locked a moment by the sweep's writers
            return None

    spec_path = tmp_path / "pause.yaml"
    base = {"cache_dir": str(CACHE), "max_steps": 30, "baseline_prompts": 8, "stl_window": 5}
    spec_path.write_text(
        yaml.safe_dump(
            {"name": "pause", "base": base, "grid": {"learning_rate": [1e-4, 2e-4, 3e-4, 4e-4]}, "seeds": [0]}
        )
    )
    storage, tracking = f"sqlite:///{tmp_path}/optuna.db", f"sqlite:///{tmp_path}/mlflow.db"
    env = {**os.environ, "PYTHONPATH": f"{ROOT / 'tests'}{os.pathsep}{ROOT}"}
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "grpo_lab",
            "sweep",
            str(spec_path),
            "--workers",
            "2",
            "--storage",
            storage,
            "--heartbeat-interval",
            "1",
            "--tracking-uri",
            tracking,
            "--out-root",
            str(tmp_path / "runs"),
        ],
        cwd=tmp_path,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )
    spec = load_spec(spec_path)
    # 4 points of 30 steps: the other worker has 2 trials or more left, seconds past the 3 s grace period (at 16
    # steps a quiet machine finished them first, and nobody was left to fail the silent trial)
    paused = None
    try:
        deadline = time.monotonic() + 180
        while paused is None:  # a trial a few steps in: its owner is the worker to pause
            assert proc.poll() is None and time.monotonic() < deadline, proc.communicate()[1][-3000:]
            time.sleep(0.3)
            try:
                study = optuna.load_study(study_name="pause", storage=storage)
            # not created yet, the file locked a moment, or this read racing the sweep to create Optuna's tables
            except (KeyError, sqlalchemy.exc.OperationalError, sqlalchemy.exc.IntegrityError):
                continue
            trials = study.get_trials(deepcopy=False)
            # a trial of the first pair, so that the other worker has claims left to make
            assert len(trials) <= 2, "no trial of the first pair was paused 3 to 20 steps in"
            for t in (t for t in trials if t.state == TrialState.RUNNING):
                metrics = tmp_path / "runs" / "pause" / f"trial-{t.number:04d}" / "metrics.jsonl"
                # 3 to 20 steps in (of 30): paused after its last step, the fence has no step left to check
                if "owner" in t.user_attrs and metrics.exists() and 3 <= len(metrics.read_text().splitlines()) <= 20:
                    owner = int(t.user_attrs["owner"].rsplit(":", 2)[1])
                    os.kill(owner, signal.SIGSTOP)
                    if _locked(tmp_path / "optuna.db", tmp_path / "mlflow.db"):  # stopped mid-write: try again
                        os.kill(owner, signal.SIGCONT)
                        break
                    paused, pid = t.number, owner
                    # the other worker fails a silent trial when it next claims one, past the 3 s grace period;
                    # trials of the tiny model can take under 3 s, and CI saw it claim the last points within
                    # the grace period and leave, nobody failing the paused trial: its claims wait until then
                    lock = tmp_path / claim_lock_path(storage, "pause")
                    assert lock.exists(), f"the workers claim under another lock than {lock}"
                    with FileLock(lock, timeout=30):
                        time.sleep(5)  # SQLite's clock counts whole seconds
                    break
        deadline = time.monotonic() + 120  # the other worker's next claim
        while _state(storage, paused) in (TrialState.RUNNING, None):
            if time.monotonic() > deadline or proc.poll() is not None:
                os.killpg(proc.pid, signal.SIGKILL)
                states = [t.state.name for t in optuna.load_study(study_name="pause", storage=storage).trials]
                pytest.fail(
                    f"the paused worker's trial {paused} was never failed (trials: {states}); "
                    f"the sweep said: {proc.communicate()[1][-3000:]}"
                )
            time.sleep(0.3)
        os.kill(pid, signal.SIGCONT)
        out, err = proc.communicate(timeout=180)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
    assert proc.returncode == 0 and "Traceback" not in err and "UpdateFinishedTrialError" not in err, err[-3000:]
    assert f"trial {paused}: its trial was failed by another process" in err
    trials = optuna.load_study(study_name="pause", storage=storage).trials
    assert trials[paused].state == TrialState.FAIL
    keys = sorted(point_key(p) for p in spec.grid_points())
    # Optuna: each point complete once
    assert sorted(point_key(grid_point_of(spec, t)) for t in trials if t.state == TrialState.COMPLETE) == keys
    # the run folders: each point finished once; the paused trial's folder abandoned, cut where it stopped
    summaries = {
        t.number: json.loads((tmp_path / "runs" / "pause" / f"trial-{t.number:04d}" / "summary.json").read_text())
        for t in trials
    }
    finished = [point_key(grid_point_of(spec, trials[n])) for n, s in summaries.items() if s["status"] == "finished"]
    assert sorted(finished) == keys
    assert summaries[paused]["status"] == "abandoned" and summaries[paused]["abandoned_after_step"] < 30
    # MLflow: one FINISHED run per point, the paused trial's ended KILLED with the tag abandoned
    client = MlflowClient(tracking_uri=tracking)
    runs = [
        r
        for r in client.search_runs([client.get_experiment_by_name("pause").experiment_id])
        if r.data.tags.get("trial_number") is not None
    ]
    done = [r for r in runs if r.info.status == "FINISHED"]
    assert sorted(point_key(grid_point_of(spec, trials[int(r.data.tags["trial_number"])])) for r in done) == keys
    stopped = next(r for r in runs if r.data.tags["trial_number"] == str(paused))
    assert stopped.info.status == "KILLED" and stopped.data.tags["status"] == "abandoned"


@pytest.mark.parametrize("detector", ["dead_owner", "running"])
def test_a_trial_finished_between_the_listing_and_the_write_is_left_as_it_is(tmp_path, detector):
    """Two `grpo sweep` processes starting on one store both list the trials of a dead worker; the
    one that writes second finds them failed already. It writes nothing and does not count them
    (Optuna had raised UpdateFinishedTrialError, stopping the sweep before its first trial)."""
    import optuna
    from optuna.trial import TrialState

    from grpo_core.record.provenance import owner_id
    from sweeps.driving.recovery import fail_dead_owners, fail_running, fail_trial
    from sweeps.driving.storage import open_storage

    storage = open_storage(f"sqlite:///{tmp_path}/optuna.db")
    study = optuna.create_study(study_name="race", storage=storage)
    host, _, _ = owner_id().rsplit(":", 2)
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    first, second = study.ask(), study.ask()
    for trial in (first, second):
        trial.set_user_attr("owner", f"{host}:{dead.pid}:1")
    listed = study.get_trials(deepcopy=False, states=(TrialState.RUNNING,))  # what the second process saw
    assert fail_trial(study, storage, first.number, "worker died (the first process)")  # the first process wins

    class Stale:  # the study as the second process listed it, before the first one's write
        study_name = study.study_name

        def get_trials(self, deepcopy=False, states=None):
            return listed

        def tell(self, *args, **kwargs):
            return study.tell(*args, **kwargs)

    failed = (
        fail_dead_owners(Stale(), storage)
        if detector == "dead_owner"
        else fail_running(Stale(), storage, "machine lost")
    )
    assert failed == [second.number]
    trials = study.get_trials(deepcopy=False)
    assert [t.state for t in trials] == [TrialState.FAIL, TrialState.FAIL]
    assert trials[first.number].user_attrs["error"] == "worker died (the first process)"  # not overwritten
    assert not fail_trial(study, storage, first.number, "again")


def _holds_open(pid: int, path) -> bool:
    try:
        return any(os.readlink(f"/proc/{pid}/fd/{fd}") == str(path) for fd in os.listdir(f"/proc/{pid}/fd"))
    except OSError:  # it ended meanwhile, or one of its files closed between the listing and the read
        return False


def test_a_worker_killed_by_a_signal_is_replaced_while_points_are_left(tmp_path):
    # what the OOM killer did to one of C5's two workers: SIGKILL mid-trial. The sweep records the trial as
    # failed (its point runs again on the next sweep) and starts a new worker, which trains the points left
    from pathlib import Path

    from mlflow.tracking import MlflowClient
    from optuna.trial import TrialState

    path = tmp_path / "replace.yaml"
    # (the task's exact_match, held while the file `hold` exists: trial 0 waits mid-run for its kill, however
    # slowly the machine runs this test; its 40 tiny steps take about a second)
    base = {
        "cache_dir": str(CACHE),
        "max_steps": 40,
        "baseline_prompts": 8,
        "stl_window": 5,
        "reward_funcs": ["reward_helpers:held_exact_match"],
    }
    path.write_text(
        yaml.safe_dump(
            {"name": "replace", "base": base, "grid": {"learning_rate": [1e-4, 3e-4]}, "seeds": [0, 1, 2]},
            sort_keys=False,
        )
    )  # 6 points for 2 workers
    journal = f"journal://{tmp_path}/optuna.log"
    args = [
        "sweep",
        str(path),
        "--workers",
        "2",
        "--storage",
        journal,
        "--tracking-uri",
        f"sqlite:///{tmp_path}/mlflow.db",
        "--out-root",
        str(tmp_path / "runs"),
    ]
    hold = tmp_path / "hold"
    env = {**os.environ, "PYTHONPATH": f"{ROOT / 'tests'}{os.pathsep}{ROOT}", "GRPO_TEST_HOLD": str(hold)}
    proc = subprocess.Popen(
        [sys.executable, "-m", "grpo_lab", *args],
        cwd=ROOT,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    metrics = tmp_path / "runs" / "replace" / "trial-0000" / "metrics.jsonl"
    while proc.poll() is None and not (metrics.exists() and len(metrics.read_text().splitlines()) >= 3):
        time.sleep(0.1)
    first_workers = reward_helpers.hold_at_next_reward(hold, lambda: proc.poll() is None, count=2)  # both, mid-trial
    owner = next(pid for pid in first_workers if _holds_open(pid, metrics))  # trial 0's worker
    os.kill(owner, signal.SIGKILL)
    assert len(metrics.read_text().splitlines()) < 40  # killed mid-run
    hold.unlink()  # the other worker and the one that replaces the killed one train on unheld
    assert proc.poll() is None, proc.stderr.read()[-2000:]
    _, study = _study(journal, "replace", path)
    victim = study.trials[0]
    assert victim.user_attrs["owner"].rsplit(":", 2)[1] == str(owner)
    summary = Path(victim.user_attrs["run_dir"]) / "summary.json"
    # recorded while the sweep goes on, not by the next claim or sweep: the progress line and the MLflow UI stop
    # showing the dead run as running (C5's line said "running t52 7/40" for 20 minutes after the OOM kill)
    while proc.poll() is None and not summary.exists():
        time.sleep(0.1)
    seen_running = proc.poll() is None
    _, study = _study(journal, "replace", path)
    out, err = proc.communicate(timeout=600)
    assert seen_running, "the sweep ended before it recorded its killed worker's trial"
    assert json.loads(summary.read_text())["status"] == "killed"
    assert study.trials[victim.number].state == TrialState.FAIL
    run = MlflowClient(tracking_uri=f"sqlite:///{tmp_path}/mlflow.db").get_run(victim.user_attrs["mlflow_run_id"])
    assert run.info.status == "KILLED"
    assert proc.returncode == 1, err[-3000:]  # one trial failed in this run: the killed one
    assert (
        f"worker 0 (pid {owner}) was killed by signal 9" in err
        or f"worker 1 (pid {owner}) was killed by signal 9" in err
    )
    assert "2 worker(s) (1 replaced after being killed by a signal)" in out, out[-2000:]
    _, study = _study(journal, "replace", path)
    trials = study.get_trials(deepcopy=False)
    failed = [t for t in trials if t.state == TrialState.FAIL]
    assert [t.number for t in failed] == [victim.number] and "worker died" in failed[0].user_attrs["error"]
    done = [t for t in trials if t.state == TrialState.COMPLETE]
    assert len(done) == 5  # every other point, none twice
    owners = {int(t.user_attrs["owner"].rsplit(":", 2)[1]) for t in done}
    assert owners - first_workers, owners  # the new worker trained some of them


def _kill_self():
    os.kill(os.getpid(), signal.SIGKILL)


def _exit_zero():
    pass


@pytest.mark.parametrize("replace", [True, False])
def test_the_pool_records_a_killed_worker_at_once_whether_or_not_it_replaces_it(capsys, replace):
    # under --stop-after (or with no point left) no worker replaces the dead one, and its trial must still be
    # failed now, not by a claim that will not come
    import multiprocessing as mp

    from sweeps.driving.worker_pool import WorkerPool

    context, made, deaths, forks = mp.get_context("fork"), [], [], []

    def make(i):
        made.append(i)
        return context.Process(target=_kill_self if len(made) == 1 else _exit_zero)

    pool = WorkerPool(
        make,
        may_replace=lambda: replace,
        before_fork=lambda: forks.append("before"),
        after_fork=lambda: forks.append("after"),
        on_death=lambda: deaths.append(len(made)),
    )
    pool.start(0)
    pool.join()
    assert deaths == [1]  # once, for the killed worker, before any replacement started
    assert [p.exitcode for p in pool.procs] == ([-signal.SIGKILL, 0] if replace else [-signal.SIGKILL])
    assert made == ([0, 0] if replace else [0]) and pool.replaced == int(replace)
    assert forks == (["before", "after"] if replace else [])
    err = capsys.readouterr().err
    assert "worker 0" in err and "killed by signal 9" in err and "recorded as failed now" in err
    assert ("a new worker takes its place" in err) == replace


def test_a_pool_whose_recording_fails_goes_on(capsys):
    import multiprocessing as mp

    from sweeps.driving.worker_pool import WorkerPool

    context, made = mp.get_context("fork"), []

    def make(i):
        made.append(i)
        return context.Process(target=_kill_self if len(made) == 1 else _exit_zero)

    def broken():
        raise OSError("database is locked")

    pool = WorkerPool(
        make, may_replace=lambda: True, before_fork=lambda: None, after_fork=lambda: None, on_death=broken
    )
    pool.start(0)
    pool.join()
    assert pool.replaced == 1 and pool.procs[-1].exitcode == 0
    assert "could not record worker 0's trial as failed yet (database is locked)" in capsys.readouterr().err
