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
    return train_many([args])[0]


def train_many(configs: list[list[str]]) -> list[list[dict]]:
    """Each config through `grpo train`'s main(), one after another in one new process whose CPU
    math is pinned by the first command, before torch loads, exactly as in a process of its own (one
    process instead of one per run saves each run's import of torch and transformers):
    the runs' comparable metrics rows, in order."""
    with tempfile.TemporaryDirectory() as tmp:
        (Path(tmp) / "configs.json").write_text(json.dumps(configs))
        env = {
            k: v
            for k, v in os.environ.items()
            if k not in ("ATEN_CPU_CAPABILITY", "MKL_CBWR", "ONEDNN_MAX_CPU_ISA", "GRPO_CPU_MATH")
        }
        env["PYTHONPATH"] = str(ROOT)
        proc = subprocess.run(
            [sys.executable, __file__, "--train", tmp], capture_output=True, text=True, cwd=ROOT, env=env
        )
        if proc.returncode != 0:
            raise RuntimeError(f"grpo train exited {proc.returncode}: {proc.stderr[-2000:]}")
        return [
            comparable(
                [json.loads(line) for line in Path(f"{tmp}/run-{i}/metrics.jsonl").read_text().splitlines() if line]
            )
            for i in range(len(configs))
        ]


def _train_here(tmp: str) -> int:
    """The child of train_many: every config of tmp/configs.json into tmp/run-<i>."""
    from grpo_lab.cli import main

    for i, args in enumerate(json.loads(Path(tmp, "configs.json").read_text())):
        sets = [a for arg in ["num_threads=1", *args] for a in ("--set", arg)]
        code = main(["train", "--no-mlflow", "--no-progress", *sets, "--out", f"{tmp}/run-{i}"])
        if code != 0:
            print(f"grpo train {' '.join(args)} exited {code}", file=sys.stderr)
            return code
    return 0


def first_difference(got: list[dict], want: list[dict]) -> str:
    """'' when equal, else where the two runs part: the first step and the keys that differ there.
    Every key the reference logged is compared; a key logged since it was made is not (a new
    metric reads what the run computed, it does not change it)."""
    for mine, ref in zip(got, want):
        mine = {k: v for k, v in mine.items() if k in ref}
        if mine != ref:
            keys = sorted(k for k in set(mine) | set(ref) if mine.get(k) != ref.get(k))
            return f"step {ref.get('step')}: " + ", ".join(f"{k} {mine.get(k)!r} vs {ref.get(k)!r}" for k in keys[:4])
    if len(got) != len(want):
        return f"{len(got)} steps against {len(want)}"
    return ""


if __name__ == "__main__":
    if sys.argv[1] == "--train":
        sys.exit(_train_here(sys.argv[2]))
    out = Path(sys.argv[1])
    for name, args in read_configs(out).items():
        rows = train(args)
        (out / f"{name}.jsonl").write_text("".join(json.dumps(r, sort_keys=True) + "\n" for r in rows))
        print(f"{name}: {len(rows)} steps")
