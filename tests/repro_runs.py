"""Reference runs for the cross-machine check (tests/test_cross_machine.py).

A folder under tests/data/repro/ holds `configs.txt` (`name | grpo train --set arguments`, every
run with the tiny model, num_threads 1 and no MLflow) and one `<name>.jsonl` per config: its
metrics.jsonl rows with the timing keys removed and keys sorted, made on the machine the folder
is named after. Write this machine's references with

    .venv/bin/python tests/repro_runs.py tests/data/repro/this-machine
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def read_configs(folder: Path) -> dict[str, list[str]]:
    """name -> the `--set` arguments of each config in folder/configs.txt."""
    configs = {}
    for line in (folder / "configs.txt").read_text().splitlines():
        if line.strip() and not line.startswith("#"):
            name, args = line.split("|", 1)
            configs[name.strip()] = args.split()
    return configs


def comparable(rows: list[dict]) -> list[dict]:
    """metrics.jsonl rows without the keys that measure time (they differ between any two runs)."""
    return [{k: v for k, v in sorted(r.items()) if "time" not in k and "per_second" not in k} for r in rows]


def train(args: list[str]) -> list[dict]:
    """`grpo train` in its own process, as a user runs it (the command pins the CPU math before torch
    loads): the run's comparable metrics rows."""
    with tempfile.TemporaryDirectory() as tmp:
        sets = [a for arg in ["num_threads=1", *args] for a in ("--set", arg)]
        env = {k: v for k, v in os.environ.items() if k not in ("ATEN_CPU_CAPABILITY", "MKL_CBWR",
                                                                  "ONEDNN_MAX_CPU_ISA", "GRPO_CPU_MATH")}
        proc = subprocess.run([sys.executable, "-m", "grpo_lab", "train", "--no-mlflow", "--no-progress", *sets,
                               "--out", f"{tmp}/run"], capture_output=True, text=True, cwd=ROOT, env=env)
        if proc.returncode != 0:
            raise RuntimeError(f"grpo train {' '.join(args)} exited {proc.returncode}: {proc.stderr[-2000:]}")
        return comparable([json.loads(l) for l in Path(f"{tmp}/run/metrics.jsonl").read_text().splitlines() if l])


def first_difference(got: list[dict], want: list[dict]) -> str:
    """'' when equal, else where the two runs part: the first step and the keys that differ there."""
    for mine, ref in zip(got, want):
        if mine != ref:
            keys = sorted(k for k in set(mine) | set(ref) if mine.get(k) != ref.get(k))
            return f"step {ref.get('step')}: " + ", ".join(f"{k} {mine.get(k)!r} vs {ref.get(k)!r}" for k in keys[:4])
    if len(got) != len(want):
        return f"{len(got)} steps against {len(want)}"
    return ""


if __name__ == "__main__":
    out = Path(sys.argv[1])
    for name, args in read_configs(out).items():
        rows = train(args)
        (out / f"{name}.jsonl").write_text("".join(json.dumps(r, sort_keys=True) + "\n" for r in rows))
        print(f"{name}: {len(rows)} steps")
