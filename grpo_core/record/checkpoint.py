"""Checkpoints of a run: everything the next step depends on (the weights training changes,
optimizer and schedule, the six random streams, the generation batch being reused when μ > 1, the metric history), so a
resumed run continues exactly as an uninterrupted one would (same config, CPU). Read with
`torch.load(weights_only=True)`: tensors and plain containers only, so a checkpoint cannot run code."""

from __future__ import annotations

import dataclasses
import random
from pathlib import Path
from typing import Optional

import numpy as np
import torch

from grpo_core.sampling.batch import GenerationBatch
from grpo_core.config.checkpoint_compat import CHECKPOINT_STATE, config_digest, digest_keys
from grpo_core.config.schema import save_config
from grpo_core.util.errors import UserInputError
from grpo_core.util.files import staged_folder


def _numpy_state_to_plain(state: tuple) -> tuple:
    """np.random.get_state() with its key array as a list, so torch.load(weights_only=True) reads it."""
    name, keys, pos, has_gauss, cached = state
    return (name, keys.tolist(), int(pos), int(has_gauss), float(cached))


def _numpy_state_from_plain(state) -> tuple:
    name, keys, pos, has_gauss, cached = state
    return (name, np.asarray(keys, dtype=np.uint32), pos, has_gauss, cached)


def _as_tuple(state):
    """random.getstate() as saved (tuples may come back as lists): (version, tuple(internal), gauss)."""
    version, internal, gauss = state
    return (version, tuple(internal), gauss)


def _changing(policy: torch.nn.Module) -> set[str]:
    """The names of what training changes: the trainable parameters (a tied weight under its first
    name) and the buffers."""
    return {name for name, p in policy.named_parameters() if p.requires_grad} | {
        name for name, _ in policy.named_buffers()
    }


def trained_weights(policy: torch.nn.Module) -> dict:
    """The entries of the policy's state_dict that training changes. With LoRA these are the
    adapters (a few MB); the frozen base (540 MB for SmolLM2-135M in float32) is what the config's
    model loads anyway, so writing it at every checkpoint bought nothing."""
    keep = _changing(policy)
    return {name: value for name, value in policy.state_dict().items() if name in keep}


def restore_weights(policy: torch.nn.Module, saved: dict) -> None:
    """Load trained_weights' entries (or a whole state_dict, as checkpoints held before them) into
    the policy; each of its trainable parameters and buffers must be among them."""
    missing, unexpected = policy.load_state_dict(saved, strict=False)
    lacking = sorted(set(missing) & _changing(policy))
    if unexpected or lacking:
        raise ValueError(f"weights {'not in this model: ' + unexpected[0] if unexpected else 'missing: ' + lacking[0]}")


def save_checkpoint(trainer, run_dir: Path, history: dict) -> Optional[Path]:
    """Write `run_dir/checkpoint-<step>` (atomically: a temporary folder, then a rename) and
    remove older checkpoints. Holds everything the next step depends on: weights, optimizer
    and schedule, the four random streams, the generation batch being consumed (k × μ > 1), the history. On P
    processes every process calls this (its sampling stream and batch are gathered) and
    process 0 writes; the others return None."""
    import shutil

    batch = None
    if trainer._batch is not None and trainer.step % trainer.cfg.reuse_steps != 0:
        batch = {f.name: getattr(trainer._batch, f.name) for f in dataclasses.fields(trainer._batch)}
    per_process = None
    if trainer.num_processes > 1:  # what differs between processes: the sampling stream and the batch
        from accelerate.utils import gather_object

        on_cpu = None if batch is None else {k: v.cpu() if torch.is_tensor(v) else v for k, v in batch.items()}
        per_process = gather_object([{"sample": trainer.sample_gen.get_state(), "batch": on_cpu}])
        if trainer.rank != 0:
            return None
    state = {
        "step": trainer.step,
        "history": history,
        "batch": batch,
        "model": trained_weights(trainer.policy),
        "optimizer": trainer.optimizer.state_dict(),
        "scheduler": trainer.scheduler.state_dict(),
        "rng": {
            "prompt": trainer.prompt_rng.getstate(),
            "sample": trainer.sample_gen.get_state(),
            "noise": trainer.noise_gen.get_state(),
            "torch": torch.get_rng_state(),
            "python": random.getstate(),
            "numpy": _numpy_state_to_plain(np.random.get_state()),
        },
    }
    if per_process is not None:
        state["per_process"] = per_process
    config = trainer.cfg.to_dict()  # what the run was trained with, which a resume must equal (config_digest)
    state["config_keys"] = digest_keys(config)
    state["config_digest"] = config_digest(config, state["config_keys"])
    target = run_dir / f"checkpoint-{trainer.step}"
    with staged_folder(target) as tmp:  # a full disk leaves no half-written checkpoint to keep it full
        torch.save(state, tmp / CHECKPOINT_STATE)
        save_config(trainer.cfg, tmp)
    for old in run_dir.glob("checkpoint-*"):
        if old != target and old.name.split("-")[-1].isdigit():
            shutil.rmtree(old, ignore_errors=True)
    return target


def load_checkpoint(trainer, folder: str | Path) -> dict:
    """Restore a checkpoint written by save_checkpoint; returns its metric history. The file is
    read with `weights_only=True`: tensors and plain containers only, so a checkpoint cannot
    run code. A file that is not such a checkpoint is a one-line UserInputError."""

    path = Path(folder) / CHECKPOINT_STATE
    try:
        state = torch.load(path, map_location="cpu", weights_only=True)  # moved where needed below
        saved = state.get("per_process") or [{"sample": state["rng"]["sample"], "batch": state["batch"]}]
    except Exception as exc:  # unpickling refused, a truncated file
        raise _restore_error(path, exc) from None
    if (
        "config_digest" in state
        and config_digest(trainer.cfg.to_dict(), state["config_keys"]) != state["config_digest"]
    ):
        raise UserInputError(
            f"resume_from_checkpoint: {Path(folder) / 'config.yaml'} is not the config the checkpoint "
            f"was trained with (its digest, written with the checkpoint, differs: the file was edited); "
            f"allowed: the checkpoint as it was written"
        )
    if len(saved) != trainer.num_processes:
        raise UserInputError(
            f"resume_from_checkpoint: {path} was written by a run on {len(saved)} process(es), "
            f"this one has {trainer.num_processes}; allowed: resume it on {len(saved)}"
        )
    own = saved[trainer.rank]
    try:
        restore_weights(trainer.policy, state["model"])
        trainer.optimizer.load_state_dict(state["optimizer"])
        trainer.scheduler.load_state_dict(state["scheduler"])
        rng = state["rng"]
        trainer.prompt_rng.setstate(_as_tuple(rng["prompt"]))
        trainer.sample_gen.set_state(own["sample"].cpu())  # generator states are CPU byte tensors
        trainer.noise_gen.set_state(rng["noise"].cpu())
        torch.set_rng_state(rng["torch"].cpu())
        random.setstate(_as_tuple(rng["python"]))
        np.random.set_state(_numpy_state_from_plain(rng["numpy"]))
        trainer.step = int(state["step"])
        batch = own["batch"]
        if batch is not None:
            batch = {k: v.to(trainer.device) if torch.is_tensor(v) else v for k, v in batch.items()}
        trainer._batch = GenerationBatch(**batch) if batch is not None else None
        return state["history"]
    except Exception as exc:  # missing or mismatched entries
        raise _restore_error(path, exc) from None


def _restore_error(path: Path, exc: Exception) -> UserInputError:
    first = (str(exc).strip().splitlines() or [type(exc).__name__])[0][:200]
    return UserInputError(
        f"resume_from_checkpoint: cannot restore {path}: {first}; allowed: a checkpoint "
        f"written by grpo train with save_steps"
    )
