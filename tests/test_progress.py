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

import yaml

from conftest import CACHE, ROOT, run_grpo


def _grid(tmp_path, steps=30):
    """experiments/example-grid.yaml (2 × 2 × 2 = 8 trials), shortened, on stores of its own."""
    data = yaml.safe_load((ROOT / "experiments" / "example-grid.yaml").read_text())
    data["base"].update(max_steps=steps, stl_window=5, cache_dir=str(CACHE), baseline_prompts=16)
    spec = tmp_path / "example-grid.yaml"
    spec.write_text(yaml.safe_dump(data, sort_keys=False))
    return ["sweep", str(spec), "--workers", "2", "--storage", f"journal:///{tmp_path}/journal.log",
            "--tracking-uri", f"sqlite:///{tmp_path}/mlflow.db", "--out-root", str(tmp_path / "runs")]


def test_sweep_on_a_terminal_shows_a_moving_bar_with_an_eta(tmp_path):
    main, child = pty.openpty()
    fcntl.ioctl(child, termios.TIOCSWINSZ, struct.pack("HHHH", 40, 160, 0, 0))  # a 160-column terminal
    env = {**os.environ, "PYTHONPATH": f"{ROOT / 'tests'}{os.pathsep}{ROOT}"}
    env.pop("COLUMNS", None)
    proc = subprocess.Popen([sys.executable, "-m", "grpo_lab", *_grid(tmp_path)], stdin=child, stdout=child,
                            stderr=child, cwd=tmp_path, env=env, close_fds=True)
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
    lines = [l for l in res.stderr.splitlines() if l.startswith("[example-grid] trial ")]
    assert len(lines) == 8 and all(" complete (" in l and "steps_to_learn" in l for l in lines)
    assert lines[-1].split(" · ")[1] == "8/8 done, 0 failed"
    assert "\r" not in res.stderr and "INFO mlflow" not in res.stderr  # no bar, no MLflow chatter
