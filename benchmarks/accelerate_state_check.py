"""Why the checkpoint's random-state bookkeeping is ours and not `accelerator.save_state`. Figures: docs/development/layout.md (the design notes).

Our checkpoint holds three named generators, the per-process sampling streams and the batch
being reused (μ > 1); accelerate saves the global generators only, so those would have to go in
through `register_for_checkpointing`, which accelerate stores as `custom_checkpoint_<i>.pkl` and
loads with `weights_only=False`. This script saves a state that way, replaces the custom file with
a pickle whose loading runs a shell command, calls `load_state`, and reports whether the command
ran. Ours loads with `weights_only=True` (tests/test_checkpoint.py refuses such a file). Usage:

    .venv/bin/python benchmarks/accelerate_state_check.py
"""

from __future__ import annotations

import os
import tempfile
from pathlib import Path


class NamedGenerator:
    """A torch.Generator in the shape register_for_checkpointing accepts."""

    def __init__(self, seed: int):
        import torch

        self.generator = torch.Generator().manual_seed(seed)

    def state_dict(self) -> dict:
        return {"state": self.generator.get_state()}

    def load_state_dict(self, state: dict) -> None:
        self.generator.set_state(state["state"])


class RunsCode:
    def __init__(self, marker: Path):
        self.marker = marker

    def __reduce__(self):
        return os.system, (f"touch {self.marker}",)


def main() -> None:
    import accelerate
    import torch
    from accelerate import Accelerator

    folder = Path(tempfile.mkdtemp(prefix="grpo-accelerate-state-"))
    marker = folder / "code-ran"
    accelerator = Accelerator(cpu=True)
    model = torch.nn.Linear(2, 2)
    model, optimizer = accelerator.prepare(model, torch.optim.AdamW(model.parameters()))
    accelerator.register_for_checkpointing(NamedGenerator(0))
    accelerator.save_state(str(folder / "state"))
    files = sorted(p.name for p in (folder / "state").iterdir())
    torch.save({"state": RunsCode(marker)}, folder / "state" / "custom_checkpoint_0.pkl")
    try:
        accelerator.load_state(str(folder / "state"))
    except Exception as exc:  # the planted object is no generator state; the command ran before this
        outcome = f"load_state then raised {type(exc).__name__}"
    else:
        outcome = "load_state returned"
    print(f"accelerate {accelerate.__version__}, torch {torch.__version__}: save_state wrote {', '.join(files)}")
    print(f"planted custom_checkpoint_0.pkl: {outcome}; the planted shell command ran: {marker.exists()}")


if __name__ == "__main__":
    main()
