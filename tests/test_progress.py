"""A long command shows where it is: `grpo sweep` on a terminal (a pseudo-terminal here, as a user's
shell gives it) draws one bar that moves, with failures, the running trials' steps and an ETA; into
a file or a pipe it writes one plain line per finished trial."""

import fcntl
import os
import pty
import re
import struct
import subprocess
import sys
import termios

import pytest
import yaml

from conftest import CACHE, ROOT, run_grpo


def _grid(tmp_path, steps=30):
    """experiments/example-grid.yaml (2 × 2 × 2 = 8 trials), shortened, on stores of its own."""
    data = yaml.safe_load((ROOT / "experiments" / "example-grid.yaml").read_text())
    data["base"].update(max_steps=steps, stl_window=5, cache_dir=str(CACHE), baseline_prompts=16)
    spec = tmp_path / "example-grid.yaml"
    spec.write_text(yaml.safe_dump(data, sort_keys=False))
    return [
        "sweep",
        str(spec),
        "--workers",
        "2",
        "--storage",
        f"journal:///{tmp_path}/journal.log",
        "--tracking-uri",
        f"sqlite:///{tmp_path}/mlflow.db",
        "--out-root",
        str(tmp_path / "runs"),
    ]


def test_sweep_on_a_terminal_shows_a_moving_bar_with_an_eta(tmp_path):
    main, child = pty.openpty()
    fcntl.ioctl(child, termios.TIOCSWINSZ, struct.pack("HHHH", 40, 160, 0, 0))  # a 160-column terminal
    env = {**os.environ, "PYTHONPATH": f"{ROOT / 'tests'}{os.pathsep}{ROOT}"}
    env.pop("COLUMNS", None)
    proc = subprocess.Popen(
        [sys.executable, "-m", "grpo_lab", *_grid(tmp_path)],
        stdin=child,
        stdout=child,
        stderr=child,
        cwd=tmp_path,
        env=env,
        close_fds=True,
    )
    os.close(child)
    chunks = []
    while True:
        try:
            data = os.read(main, 65536)
        except OSError:  # the child closed the terminal
            break
        if not data:
            break
        chunks.append(data)
    assert proc.wait() == 0
    os.close(main)
    screen = b"".join(chunks).decode(errors="replace")
    frames = [f for f in re.split(r"[\r\n]", screen) if "trials, " in f]
    counts = [int(m.group(1)) for f in frames if (m := re.search(r"(\d+)/8 trials", f))]
    assert counts and counts == sorted(counts) and counts[-1] == 8, frames  # it moves forward, and finishes
    assert len(set(counts)) >= 3  # redrawn in place as trials finish, not printed once at the end
    assert any(re.search(r"running t\d+ \d+/30", f) for f in frames)  # the running trials' steps
    assert any(re.search(r"ETA \d+(m\d\ds|s)", f) for f in frames)  # a time, once there is a rate
    assert "0 failed" in frames[-1]


def test_sweep_into_a_pipe_writes_one_line_per_finished_trial(tmp_path):
    res = run_grpo(*_grid(tmp_path, steps=10), cwd=tmp_path)
    assert res.returncode == 0, res.stderr
    lines = [line for line in res.stderr.splitlines() if line.startswith("[example-grid] trial ")]
    assert len(lines) == 8 and all(" complete (" in line and "steps_to_learn" in line for line in lines)
    assert lines[-1].split(" · ")[1] == "8/8 done, 0 failed"
    assert "\r" not in res.stderr and "INFO mlflow" not in res.stderr  # no bar, no MLflow chatter


def test_the_eta_times_each_point_left_by_its_own_variants_finished_trials_and_stops_at_the_limit(tmp_path):
    """A grid whose arms differ twofold in time (the real placebo variants: 7 prompts a step ≈ 20 min,
    four steps per batch ≈ 10): fast seeds 0 and 1 took 600 s, slow seed 0 1200 s, slow seed 1 is half
    way. Left: fast seed 2 (600 s), slow seed 2 (1200 s) and the running half (600 s), on 2 workers:
    1200 s. One mean over all finished trials (800 s) put it at 2.5 × 800 / 2 = 1000 s."""
    import datetime
    from types import SimpleNamespace

    from optuna.trial import TrialState

    from sweeps.driving.progress import SweepProgress
    from sweeps.spec import SweepSpec

    start = datetime.datetime(2026, 11, 29, 12, 0, 0)
    folder = tmp_path / "t3"
    folder.mkdir()
    (folder / "metrics.jsonl").write_text("{}\n" * 20)  # 20 of 40 steps written

    def trial(number, arm, seed, state, seconds=None, run_dir=None):
        return SimpleNamespace(
            number=number,
            state=state,
            params={"arm": arm, "seed": seed},
            user_attrs={"invocation": "now", **({"run_dir": str(run_dir)} if run_dir else {})},
            datetime_start=start,
            datetime_complete=start + datetime.timedelta(seconds=seconds or 0),
        )

    trials = [
        trial(0, "fast", 0, TrialState.COMPLETE, 600),
        trial(1, "fast", 1, TrialState.COMPLETE, 600),
        trial(2, "slow", 0, TrialState.COMPLETE, 1200),
        trial(3, "slow", 1, TrialState.RUNNING, run_dir=folder),
    ]
    study = SimpleNamespace(get_trials=lambda deepcopy=False: trials)
    spec = SweepSpec(name="eta", base={"max_steps": 40}, grid={"arm": ["fast", "slow"]}, seeds=[0, 1, 2])
    snap = SweepProgress(spec, study, "now", workers=2).snapshot()
    assert snap["done"] == 3 and snap["eta"] == pytest.approx(1200.0)
    trials[2] = trial(2, "slow", 0, TrialState.FAIL)  # no slow trial finished: the mean of all finished ones
    snap = SweepProgress(spec, study, "now", workers=2).snapshot()
    assert snap["failed"] == 1 and snap["eta"] == pytest.approx((600 + 600 + 600 * 0.5) / 2)
    # --stop-after: past the limit no trial starts, so the sweep ends with its running trial (half of
    # its variant's time left), not after the points it will not start
    import time

    snap = SweepProgress(spec, study, "now", workers=2, start_until=time.time() - 1).snapshot()
    assert snap["eta"] == pytest.approx(600 * 0.5)  # no slow trial finished: timed by the fast ones' 600 s
    trials[2] = trial(2, "slow", 0, TrialState.COMPLETE, 1200)
    assert SweepProgress(spec, study, "now", workers=2, start_until=time.time() - 1).snapshot()["eta"] == pytest.approx(
        600
    )
    # before it: no later than the limit and one more trial (the slowest left: 1200 s) on six seeds
    # (left: 4 fast and 4 slow points and the running half, (2400 + 4800 + 600) / 2 = 3900 s)
    wide = SweepSpec(name="eta", base={"max_steps": 40}, grid={"arm": ["fast", "slow"]}, seeds=[0, 1, 2, 3, 4, 5])
    assert SweepProgress(wide, study, "now", workers=2).snapshot()["eta"] == pytest.approx(3900)
    eta = SweepProgress(wide, study, "now", workers=2, start_until=time.time() + 100).snapshot()["eta"]
    assert 1295 < eta <= 1300
