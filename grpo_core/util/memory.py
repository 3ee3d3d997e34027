"""Memory that a run cannot have: an address-space limit (`ulimit -v`) too low for torch and the
tokenizer to start, refused before anything loads; an allocation that fails mid-run, said in one
line and recorded as the run's failure; and the memory gate, which keeps the steps that need a large
share of the machine's memory from running at once in processes side by side (below).

Under a low `ulimit -v` the tokenizer's Rust allocator aborts the process (exit 134, "memory
allocation of 16 bytes failed", no word from grpo and no record), and torch's CPU allocator raises
"DefaultCPUAllocator: can't allocate memory" from deep inside a step. Measured on this project's
2-core machine (2026-11-28, `grpo train` of the tiny model for 1-2 steps, `ulimit -v` in KiB):
1,000,000 aborted 4 times of 4; 1,200,000 failed to allocate 4 of 4; 1,100,000 and 1,300,000
trained (1 try each); 1,500,000 trained 4 of 4 and 1,800,000 3 of 3. The floor, 2 GiB (2,097,152 KiB),
leaves a margin over that; a larger model needs more, and then fails in one line (memory_failure)."""

from __future__ import annotations

import resource
from typing import Optional

from grpo_core.util.errors import RunFailure, UserInputError

MIN_ADDRESS_SPACE = 2 * 1024**3  # bytes: below it, a run of even the tiny model fails or aborts (above)
# what torch and Python say when an allocation fails (CPU and CUDA alike)
OUT_OF_MEMORY = ("can't allocate memory", "out of memory", "cannot allocate memory")


def address_space_limit() -> Optional[int]:
    """This process's soft address-space limit in bytes (`ulimit -v`), or None when unlimited."""
    soft, _ = resource.getrlimit(resource.RLIMIT_AS)
    return None if soft == resource.RLIM_INFINITY else soft


def _mib(n: int) -> str:
    return f"{n / 1024**2:.0f} MiB"


def check_address_space(command: str) -> None:
    """Refuse a command that trains under an address-space limit below MIN_ADDRESS_SPACE, in one
    line and before torch loads (where the process would abort with no word)."""
    limit = address_space_limit()
    if limit is not None and limit < MIN_ADDRESS_SPACE:
        raise UserInputError(
            f"ulimit -v: {_mib(limit)} of address space, too little for grpo {command} to start "
            f"torch and the tokenizer; allowed: at least {_mib(MIN_ADDRESS_SPACE)} "
            f"(ulimit -v {MIN_ADDRESS_SPACE // 1024}) or unlimited"
        )


def memory_failure(exc: BaseException) -> Optional[RunFailure]:
    """A RunFailure saying "out of memory" (and the address-space limit, where one is set) when
    `exc` is a failed allocation, else None."""
    if not isinstance(exc, (MemoryError, RuntimeError)):  # torch.OutOfMemoryError is a RuntimeError
        return None
    text = str(exc)
    if not isinstance(exc, MemoryError) and not any(s in text.lower() for s in OUT_OF_MEMORY):
        return None
    what = text.splitlines()[0][:160] if text else type(exc).__name__
    limit = address_space_limit()
    where = (
        f"the address-space limit (ulimit -v) is {_mib(limit)}" if limit is not None else "the machine's memory ran out"
    )
    return RunFailure(
        f"out of memory ({what}); {where}: a smaller batch (prompts_per_step, num_generations, "
        f"max_completion_length) or more memory"
    )


# ---- the memory gate: one step at a time above a share of the machine's memory ------------------
# Two runs side by side on a 24 GiB machine (a sweep's two workers) each hold 2-8 GiB, but one step
# of long completions can need 13-16 GiB for its forward and backward (measured 2026-12-01: a step of
# the C5 spec with room for lengths, 32 completions of up to 192 tokens, peaked at 13.3 GiB alone,
# VmHWM 13,984,576 kB, and the same step beside another run was killed at an anon-rss of 16.1 GiB);
# two such steps at once and the kernel's OOM killer ends a run. So a CPU step whose estimated need
# exceeds a sixth of the machine's memory first takes the host's gate, an exclusive lock on a file
# every grpo process of this user shares: such steps run one at a time and wait for each other;
# smaller ones never wait. Waiting changes nothing a run computes (it counts in step_time); the lock
# goes with a killed process. The processes of one data-parallel run never take it: they meet in
# every backward.
GATE_SHARE = 6  # a step estimated above MemTotal / GATE_SHARE takes the gate
#
# A step's freed memory must also go back to the machine: glibc keeps the freed chunks of its heap
# (tensors under its mmap threshold, up to 32 MiB: a layer's activations) for the process to reuse,
# so a run that had finished its big step went on holding most of it. Measured 2026-12-02: a worker
# of C5's sweep, generating its next batch, held a resident 7.2 GiB (VmRSS 7,541,576 kB; VmHWM 10.5
# GiB) and 1.4 GiB (1,480,188 kB) right after `malloc_trim(0)` (called in the live process with gdb);
# the other worker's step beside it had reached an anon-rss of 16.7 GiB (17,459,916 kB) when the OOM
# killer ended it. So a block that held the gate ends by handing the process's freed memory back
# (release_freed_memory), before the gate lets the next holder in; a block below the share does so
# only where the process's resident size has grown by TRIM_GROWTH since the last release. Trimming
# after every block cost the tiny model's step about a sixth of its time (`grpo bench --setup tiny`,
# ours/TRL 0.54-0.60 against 0.45-0.51 with trims after gated steps only, 2026-12-03), and a block
# below the share frees at most a sixth of the machine.
TRIM_GROWTH = 512 * 2**20  # bytes of resident growth since the last release that make a small block trim


def machine_memory() -> Optional[int]:
    """This machine's memory in bytes (MemTotal of /proc/meminfo), or None where it cannot be read."""
    try:
        with open("/proc/meminfo") as f:
            for line in f:
                if line.startswith("MemTotal:"):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        return None
    return None


def gate_path() -> str:
    """The host's gate: one lock file in the temporary folder per user."""
    import os
    import tempfile

    return os.path.join(tempfile.gettempdir(), f"grpo-memory-gate-{os.getuid()}.lock")


def grad_step_bytes(model_config, positions: int, logit_rows: int) -> int:
    """Estimated float32 memory of one forward and backward with gradients: `positions` token
    positions through the decoder, and `logit_rows` rows of the lm head's logits. Per position and
    layer, 12 hidden-size and 3 MLP-size vectors saved for the backward; per logits row, the logits,
    the rows picked from them and their gradient (3 vocabulary-size vectors). Fitted to one
    measurement: step 5 of C5's grpo seed 139 (SmolLM2-135M with LoRA, 32 completions, 7 cut at 192
    tokens, so no group fits a packed row: about 6,340 positions and 6,116 logits rows) rose 11.5 GiB
    (12.4 GB) over the process's 1.8 GiB before it; this estimate says 12.4 GB. It decides only who
    waits."""
    layers = int(getattr(model_config, "num_hidden_layers", 0) or 0)
    hidden = int(getattr(model_config, "hidden_size", 0) or 0)
    mlp = int(getattr(model_config, "intermediate_size", 0) or 4 * hidden)
    vocab = int(getattr(model_config, "vocab_size", 0) or 0)
    return 4 * (positions * layers * (12 * hidden + 3 * mlp) + logit_rows * 3 * vocab)


def status_kib(field_name: str) -> int:
    """A memory field of this process's /proc/self/status in KiB (VmRSS, VmHWM, ...); Linux only."""
    import re
    from pathlib import Path

    return int(re.search(rf"{field_name}:\s+(\d+)", Path("/proc/self/status").read_text()).group(1))


def reset_peak_resident() -> None:
    """Start this process's peak resident size (VmHWM) anew from its current size (Linux: writing 5 to
    /proc/self/clear_refs), so a run in a sweep's worker reports its own peak; nothing elsewhere."""
    try:
        with open("/proc/self/clear_refs", "w") as f:
            f.write("5")
    except OSError:
        pass


def _status_or_none(field_name: str) -> Optional[int]:
    """status_kib, or None where /proc cannot tell (not Linux, no such field)."""
    try:
        return status_kib(field_name)
    except (OSError, AttributeError, ValueError):
        return None


def peak_resident_mib() -> Optional[float]:
    """This process's peak resident memory in MiB since it started or since reset_peak_resident
    (VmHWM), or None where /proc cannot tell."""
    kib = _status_or_none("VmHWM")
    return None if kib is None else kib / 1024


def release_freed_memory() -> bool:
    """Hand the memory this process has freed back to the machine (glibc's `malloc_trim(0)`).
    True when some was released; False when none could be, or where the C library is not glibc.
    Changes nothing a run computes: only freed chunks are returned."""
    global _malloc_trim
    if _malloc_trim is None:
        import ctypes

        try:  # the C library this process already runs on, whose allocator holds the memory
            _malloc_trim = ctypes.CDLL(None).malloc_trim
        except (OSError, AttributeError):  # not glibc (musl, macOS): nothing to call
            _malloc_trim = False
    return bool(_malloc_trim and _malloc_trim(0))


_malloc_trim = None  # glibc's malloc_trim, looked up on first use; False where there is none
_resident_at_release = 0  # this process's resident bytes right after its last release


def _resident() -> int:
    """This process's resident bytes (VmRSS), or 0 where /proc cannot tell."""
    return (_status_or_none("VmRSS") or 0) * 1024


def _resident_grew() -> bool:
    return _resident() - _resident_at_release > TRIM_GROWTH


def _note_resident() -> None:
    global _resident_at_release
    _resident_at_release = _resident()


class memory_gate:
    """`with memory_gate(estimate):` holds the host's gate while the block runs when `estimate`
    (bytes) exceeds `total` / GATE_SHARE (total: this machine's memory), and at the block's end
    hands the memory the block freed back to the machine when it held the gate or the resident size
    grew by TRIM_GROWTH since the last release (release_freed_memory).
    `waited` (seconds), `held` and `released` say what it did."""

    def __init__(self, estimate: int, total: Optional[int] = None, path: Optional[str] = None):
        total = machine_memory() if total is None else total
        self.held = total is not None and estimate > total / GATE_SHARE
        self.path, self.waited, self._file, self.released = path or gate_path(), 0.0, None, False

    def __enter__(self) -> "memory_gate":
        if self.held:
            import fcntl
            import time

            self._file = open(self.path, "a")
            started = time.perf_counter()
            try:
                fcntl.flock(self._file, fcntl.LOCK_EX)
            except BaseException:
                self._file.close()
                raise
            self.waited = time.perf_counter() - started
        return self

    def __exit__(self, *exc) -> None:
        if self.held or _resident_grew():
            self.released = release_freed_memory()  # before the next holder's step needs it
            _note_resident()
        if self._file is not None:
            self._file.close()  # closing the file releases the lock
            self._file = None
