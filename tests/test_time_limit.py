"""`grpo sweep --stop-after DURATION`: no trial starts once the limit has passed, running ones
finish, the sweep says how many points are left and exits 3; the same command without it goes on
where it stopped, and with a limit it does not reach, ends as without one. The limit is read on time_limit.now(), replaced here by a clock that moves 10 s a
reading, so which trial is the last to start does not depend on this machine's speed."""

import pytest
import yaml

from conftest import CACHE, ROOT, run_grpo_here as grpo_here


def _spec(tmp_path):
    base = {"cache_dir": str(CACHE), "max_steps": 2, "baseline_prompts": 8, "stl_window": 2}
    path = tmp_path / "limited.yaml"
    path.write_text(
        yaml.safe_dump(
            {"name": "limited", "base": base, "grid": {"learning_rate": [1e-4, 3e-4]}, "seeds": [0]}, sort_keys=False
        )
    )
    return path


def _trials(tmp_path):
    import optuna

    storage = optuna.storages.JournalStorage(
        optuna.storages.journal.JournalFileBackend(str(tmp_path / "results/local/optuna-journal.log"))
    )
    return optuna.load_study(study_name="limited", storage=storage).get_trials(deepcopy=False)


@pytest.mark.parametrize("limit, started", [("15s", 1), ("5s", 0)])
def test_a_sweep_stops_starting_trials_at_its_limit_and_the_same_command_goes_on(tmp_path, monkeypatch, limit, started):
    from optuna.trial import TrialState

    from sweeps.driving import time_limit

    readings = iter(range(0, 10_000, 10))  # the sweep's start reads 0; each later reading 10 s on
    monkeypatch.setattr(time_limit, "now", lambda: float(next(readings)))
    _spec(tmp_path)
    first = grpo_here("sweep", "limited.yaml", "--stop-after", limit, cwd=tmp_path)
    # 15 s: the first claim (at 10 s) starts a trial, the second (at 20 s) does not; 5 s: none starts
    assert first.returncode == 3, first.stderr[-2000:]
    assert (
        f"stopped starting trials after {limit} (--stop-after); {2 - started} grid point(s) left: run the "
        f"same command again to go on" in first.stdout
    )
    trials = _trials(tmp_path)
    assert [t.state for t in trials] == [TrialState.COMPLETE] * started  # the one that started ran to its end
    assert len(list((tmp_path / "results/local/sweeps/limited").glob("trial-*"))) == started

    monkeypatch.undo()  # the real clock: a limit of 2 h is not reached
    again = grpo_here("sweep", "limited.yaml", "--stop-after", "2h", cwd=tmp_path)
    assert again.returncode == 0 and "--stop-after" not in again.stdout, again.stderr[-2000:]
    trials = _trials(tmp_path)
    assert [t.state for t in trials] == [TrialState.COMPLETE] * 2  # the rest, and nothing twice
    assert {t.params["learning_rate"] for t in trials} == {1e-4, 3e-4}


def test_durations_read_as_a_researcher_writes_them():
    from grpo_core.util.errors import UserInputError
    from sweeps.driving.time_limit import parse_duration

    assert [parse_duration(t) for t in ("5400", "90m", "1.5h", "1h30m", "5399s", "1H30M")] == [
        5400,
        5400,
        5400,
        5400,
        5399,
        5400,
    ]
    assert parse_duration("0.5") == 0.5
    for bad in ("", "0", "0m", "-5", "soon", "1d", "m", "1h-30m", "inf", "nan", "1e3"):
        with pytest.raises(UserInputError, match="allowed: a duration > 0"):
            parse_duration(bad)


@pytest.mark.parametrize("bad", ["soon", "0", "-1h"])
def test_a_bad_limit_is_one_line_and_writes_nothing(tmp_path, bad):
    _spec(tmp_path)
    res = grpo_here("sweep", "limited.yaml", f"--stop-after={bad}", cwd=tmp_path)
    assert res.returncode == 2 and len(res.stderr.strip().splitlines()) == 1, res.stderr
    assert f"--stop-after: got '{bad}'; allowed: a duration > 0" in res.stderr
    assert sorted(p.name for p in tmp_path.iterdir()) == ["limited.yaml"]  # no store, no run folder


def test_reproduce_starts_no_sweep_past_its_limit_and_writes_the_report_from_what_finished(tmp_path, monkeypatch):
    """The first sweep gets what is left of the limit (and, on this clock, has passed it by its first
    claim: exit 3 from the sweep); the second does not start. Nothing trained, nothing lost: the
    report is written, each claim marked as waiting for its runs, and the exit code asks for a rerun."""
    from sweeps.driving import time_limit

    exp = tmp_path / "experiments"
    exp.mkdir()
    for name in ("c1_zero_loss.yaml", "c4_advantage_scale.yaml"):
        data = yaml.safe_load((ROOT / "experiments" / name).read_text())
        data["base"]["cache_dir"] = str(CACHE)
        (exp / name).write_text(yaml.safe_dump(data, sort_keys=False, allow_unicode=True))
    readings = iter(range(0, 10_000, 10))
    monkeypatch.setattr(time_limit, "now", lambda: float(next(readings)))
    res = grpo_here(
        "reproduce",
        "--quick",
        "--max-steps",
        "4",
        "--seeds",
        "1",
        "--experiments",
        str(exp),
        "--out",
        str(tmp_path / "report"),
        "--stop-after",
        "15s",
        cwd=tmp_path,
    )
    assert res.returncode == 3, res.stderr[-3000:]
    assert res.stdout.count("== [") == 1  # the second sweep was not started
    assert (
        "grpo reproduce: stopped starting trials after 15s (--stop-after); 2 spec(s) with points left "
        "(c1_zero_loss, c4_advantage_scale): run the same command again to go on"
    ) in res.stdout
    assert not list((tmp_path / "report").glob("runs/*/trial-*"))
    report = (tmp_path / "report" / "REPORT.md").read_text()
    assert "## C1 — " in report and "## C4 — " in report and report.count("| **no finished runs yet** |") == 2


def test_reproduce_refuses_a_limit_with_report_only(tmp_path):
    res = grpo_here("reproduce", "--report-only", "--stop-after", "1h", "--out", str(tmp_path / "r"), cwd=tmp_path)
    assert res.returncode == 2 and len(res.stderr.strip().splitlines()) == 1, res.stderr
    assert "--stop-after with --report-only: nothing trains; allowed: one of them" in res.stderr
    assert not (tmp_path / "r").exists()
