"""Rebuild the committed tiny base models: grpo_core/tiny_bases/<task>/ and BASES.json.

Each base is the built-in tiny model pretrained on its task (grpo_core.tasks.models.pretrain_tiny, the
task's calibrated step count). Pretraining is deterministic on one machine but its float32
rounding depends on the CPU, so the bases are committed and every run checks and records the
SHA-256 of the one it loads. Rebuilding changes every number in results/: do it only on purpose.

    .venv/bin/python scripts/make_tiny_bases.py [TASK ...]
"""

from __future__ import annotations

import json
import platform
import shutil
import sys
from datetime import datetime, timezone
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from grpo_core.tasks.models import COMMITTED_BASES, committed_bases, pretrain_tiny, weights_sha256  # noqa: E402
from grpo_core.tasks.catalog import TASKS  # noqa: E402


def cpu_name() -> str:
    for line in Path("/proc/cpuinfo").read_text().splitlines():
        if line.startswith("model name"):
            return line.split(":", 1)[1].strip()
    return platform.processor() or "unknown CPU"


def main(tasks: list[str]) -> None:
    bases = committed_bases()
    for task in tasks or list(TASKS):
        steps = TASKS[task].tiny_pretrain_steps
        model, tokenizer = pretrain_tiny(task, steps)
        folder = COMMITTED_BASES / task
        shutil.rmtree(folder, ignore_errors=True)
        model.save_pretrained(folder)
        tokenizer.save_pretrained(folder)
        bases[task] = {
            "sha256": weights_sha256(folder),
            "pretrain_steps": steps,
            "made_on": cpu_name(),
            "torch": torch.__version__,
            "date": datetime.now(timezone.utc).strftime("%Y-%m-%d"),
        }
        print(f"{task}: {folder} sha256 {bases[task]['sha256']}", flush=True)
    (COMMITTED_BASES / "BASES.json").write_text(json.dumps(bases, indent=2, sort_keys=True) + "\n")


if __name__ == "__main__":
    main(sys.argv[1:])
