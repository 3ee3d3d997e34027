"""Memory that a run cannot have: an address-space limit (`ulimit -v`) too low for torch and the
tokenizer to start, refused before anything loads; an allocation that fails mid-run, said in one
line and recorded as the run's failure.

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

MIN_ADDRESS_SPACE = 2 * 1024 ** 3  # bytes: below it, a run of even the tiny model fails or aborts (above)
# what torch and Python say when an allocation fails (CPU and CUDA alike)
OUT_OF_MEMORY = ("can't allocate memory", "out of memory", "cannot allocate memory")


def address_space_limit() -> Optional[int]:
    """This process's soft address-space limit in bytes (`ulimit -v`), or None when unlimited."""
    soft, _ = resource.getrlimit(resource.RLIMIT_AS)
    return None if soft == resource.RLIM_INFINITY else soft


def _mib(n: int) -> str:
    return f"{n / 1024 ** 2:.0f} MiB"


def check_address_space(command: str) -> None:
    """Refuse a command that trains under an address-space limit below MIN_ADDRESS_SPACE, in one
    line and before torch loads (where the process would abort with no word)."""
    limit = address_space_limit()
    if limit is not None and limit < MIN_ADDRESS_SPACE:
        raise UserInputError(f"ulimit -v: {_mib(limit)} of address space, too little for grpo {command} to start "
                             f"torch and the tokenizer; allowed: at least {_mib(MIN_ADDRESS_SPACE)} "
                             f"(ulimit -v {MIN_ADDRESS_SPACE // 1024}) or unlimited")


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
    where = (f"the address-space limit (ulimit -v) is {_mib(limit)}" if limit is not None
             else "the machine's memory ran out")
    return RunFailure(f"out of memory ({what}); {where}: a smaller batch (prompts_per_step, num_generations, "
                      f"max_completion_length) or more memory")
