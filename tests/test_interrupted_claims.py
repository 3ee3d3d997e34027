"""A sweep stopped while it claims a trial, or while it writes Optuna's SQLite storage: the trial
is failed (never left RUNNING with no owner), no traceback is printed, and the rerun trains every
grid point. sweeps/driving/claims.py, recovery.py (fail_unowned) and storage.py (whole_call_rdb_storage)."""

import os
import signal
import sys

import pytest
import yaml

from conftest import CACHE, run_grpo_here as grpo_here


def _sweep(tmp_path, storage_url):
    spec = tmp_path / "spec.yaml"
    spec.write_text(
        yaml.safe_dump(
            {
                "name": "claimed",
                "grid": {"beta": [0.0]},
                "seeds": [0, 1],
                "base": {"cache_dir": str(CACHE), "max_steps": 2, "stl_window": 1, "baseline_prompts": 8},
            }
        )
    )
    stores = [
        "--storage",
        storage_url,
        "--tracking-uri",
        f"sqlite:///{tmp_path}/m.db",
        "--out-root",
        str(tmp_path / "runs"),
    ]
    return lambda: grpo_here("sweep", spec, "--workers", "1", *stores, cwd=tmp_path)


def _sigterm_at_call(aimed, run):
    """`run()` with SIGTERM sent to this process (once) as a function starts for which
    aimed(frame) is true; the result of run() and whether it was sent."""
    sent = []

    def tracer(frame, event, arg):
        if event == "call" and not sent and aimed(frame):
            sent.append(frame.f_code.co_name)
            sys.settrace(before)  # (tracing every call slows what follows)
            os.kill(os.getpid(), signal.SIGTERM)

    before = sys.gettrace()
    sys.settrace(tracer)
    try:
        return run(), bool(sent)
    finally:
        sys.settrace(before)


def _trials(storage_url):
    import optuna

    from sweeps.driving.storage import open_storage

    study = optuna.load_study(study_name="claimed", storage=open_storage(storage_url))
    return [(t.state.name, t.params.get("seed"), t.user_attrs.get("error")) for t in study.trials]


def _every_point_once_complete(trials):
    return sorted(seed for state, seed, _ in trials if state == "COMPLETE") == [0, 1]


def test_a_sweep_stopped_as_it_claims_a_trial_fails_that_trial_and_the_rerun_trains_its_point(tmp_path):
    """SIGTERM between the claim's making of the trial (its point recorded) and its owner's record:
    that trial had stayed RUNNING with no owner, its point taken, and every rerun ended (exit 0)
    without training it."""
    from sweeps.driving.claims import CLAIM_INTERRUPTED

    url = f"journal:///{tmp_path}/journal.log"
    sweep = _sweep(tmp_path, url)
    done, sent = _sigterm_at_call(
        lambda f: f.f_code.co_name == "owner_id" and f.f_back.f_code.co_name == "_claim_once", sweep
    )
    assert sent and done.returncode == 143, done.stderr[-2000:]
    assert "Traceback" not in done.stderr, done.stderr[-2000:]
    assert [(state, error) for state, _, error in _trials(url)] == [
        ("FAIL", CLAIM_INTERRUPTED.format("interrupted (SIGTERM)"))
    ]
    again = sweep()
    assert again.returncode == 0, again.stderr[-2000:]
    trials = _trials(url)
    assert _every_point_once_complete(trials) and len(trials) == 3, trials
    assert sorted(p.name for p in (tmp_path / "runs" / "claimed").iterdir()) == ["trial-0001", "trial-0002"]


@pytest.mark.parametrize("storage", ["journal", "sqlite"])
def test_a_trial_left_with_no_owner_is_failed_and_its_point_runs_again(tmp_path, storage, monkeypatch):
    """A trial whose claimant died (SIGKILL) between making it and recording its owner is failed by
    the next claim once it is UNOWNED_AFTER_S old (younger, it may be another machine's claim under
    way; tests/test_sweeps.py has two machines claim at once), and its point is trained."""
    import optuna

    import sweeps.driving.recovery as recovery
    from sweeps.driving.storage import open_storage

    url = f"journal:///{tmp_path}/journal.log" if storage == "journal" else f"sqlite:///{tmp_path}/optuna.db"
    sweep = _sweep(tmp_path, url)
    first, sent = _sigterm_at_call(
        lambda f: f.f_code.co_name == "_claim_once", sweep
    )  # makes the study, trains nothing
    assert sent and first.returncode == 143 and _trials(url) == [], first.stderr[-2000:]
    storage_ = open_storage(url)
    study = optuna.load_study(study_name="claimed", storage=storage_)
    orphan = study.ask()
    orphan.suggest_categorical("beta", [0.0])
    orphan.suggest_categorical("seed", [0, 1])  # its point recorded; its owner never
    assert recovery.fail_unowned(study, storage_) == []  # just started: perhaps another machine's claim
    monkeypatch.setattr(recovery, "UNOWNED_AFTER_S", 0.0)  # (as if 10 minutes had passed)
    done = sweep()
    assert done.returncode == 0, done.stderr[-2000:]
    trials = _trials(url)
    assert trials[0] == ("FAIL", orphan.params["seed"], recovery.UNOWNED_REASON), trials
    assert _every_point_once_complete(trials), trials


@pytest.mark.parametrize(
    "aim, said",
    [
        ("__init__", "grpo: terminated (SIGTERM)"),  # the command's line: before the sweep's own try
        ("set_trial_state_values", "grpo sweep: interrupted; run the same command again to resume"),
    ],
)
def test_a_sigterm_inside_an_optuna_sqlite_commit_stops_the_sweep_cleanly(tmp_path, aim, said):
    """SIGTERM as SQLAlchemy commits for Optuna's SQLite storage, as it makes its tables or as a
    trial is told: raised inside the commit, it became an AssertionError in SQLAlchemy's error
    handling (a traceback, or the trial recorded failed with exit 1); now it is raised once the
    call returns, the sweep ends as on Ctrl-C (143), and the rerun finishes."""
    url = f"sqlite:///{tmp_path}/optuna.db"
    sweep = _sweep(tmp_path, url)

    def aimed(frame):
        if frame.f_code.co_name != "_do_commit":
            return False
        while (frame := frame.f_back) is not None:
            if "optuna" in frame.f_code.co_filename and frame.f_code.co_name == aim:
                return True
        return False

    done, sent = _sigterm_at_call(aimed, sweep)
    assert sent and done.returncode == 143, done.stderr[-2000:]
    assert "Traceback" not in done.stderr and "AssertionError" not in done.stderr, done.stderr[-2000:]
    assert said in done.stderr, done.stderr[-2000:]
    again = sweep()
    assert again.returncode == 0, again.stderr[-2000:]
    trials = _trials(url)
    assert _every_point_once_complete(trials) and "RUNNING" not in [s for s, _, _ in trials], trials
