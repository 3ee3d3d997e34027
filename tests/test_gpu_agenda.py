"""The GPU agenda (scripts/gpu_agenda.py, issue 23) dry-run on the CPU: tiny model, 2 steps, one
seed, every step of the real agenda, in two slices; so the command cannot rot between GPU sessions."""

import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
AGENDA = [sys.executable, str(ROOT / "scripts" / "gpu_agenda.py")]


def test_the_agenda_runs_in_slices_and_a_rerun_goes_on(tmp_path):
    out, work = tmp_path / "out", tmp_path / "work"
    args = ["--out", str(out), "--work", str(work), "--dry-run"]
    # a slice of 5 s of work (budget − the 20 s margin): stops inside the first step, cleanly
    first = subprocess.run([*AGENDA, *args, "--budget", "25"], cwd=tmp_path, capture_output=True, text=True)
    assert first.returncode == 3, first.stdout + first.stderr[-2000:]
    assert "run the command again to go on" in first.stdout
    state = json.loads((out / "agenda.json").read_text()) if (out / "agenda.json").exists() else {"done": {}}
    assert "bench" not in state["done"]
    second = subprocess.run([*AGENDA, *args, "--budget", "900"], cwd=tmp_path, capture_output=True, text=True)
    assert second.returncode == 0, second.stdout + second.stderr[-2000:]
    done = json.loads((out / "agenda.json").read_text())["done"]
    specs = sorted(p.stem for p in (ROOT / "experiments" / "real").glob("*.yaml"))
    assert list(done) == ["smoke", "workers", *[f"sweep:{s}" for s in specs], "bench"]
    assert done["smoke"]["steps"] == 2 and abs(done["smoke"]["step1_loss"]) <= 1e-6  # C1's step 1 on the way
    assert done["workers"]["workers"] in (1, 2)
    for sweep in ("real-c1-zero-loss", "real-c2-warmup", "real-c3-advantage-noise"):
        folders = sorted((out / "runs" / sweep).glob("trial-*"))
        assert folders and all(sorted(p.name for p in f.iterdir()) == ["config.yaml", "metrics.jsonl", "summary.json"]
                               for f in folders)
        assert all(json.loads((f / "summary.json").read_text())["status"] == "finished" for f in folders)
    assert "ours/TRL" in (out / "gpu.md").read_text() or "| tiny |" in (out / "gpu.md").read_text()
    assert "per token step" in (out / "decode.md").read_text()
    assert "| 2 |" in (out / "gpu_workers.md").read_text()
    # a third call has nothing left to do
    third = subprocess.run([*AGENDA, *args, "--budget", "60"], cwd=tmp_path, capture_output=True, text=True)
    assert third.returncode == 0 and "every step done" in third.stdout


def test_a_budget_below_the_margin_is_one_line_exit_2(tmp_path):
    res = subprocess.run([*AGENDA, "--out", str(tmp_path / "o"), "--budget", "10", "--dry-run"], capture_output=True,
                         text=True)
    assert res.returncode == 2 and len(res.stderr.strip().splitlines()) == 1 and "--budget" in res.stderr
    assert not (tmp_path / "o").exists()
