"""Child processes that end with the process that started them, however it ends.

A `grpo train` killed by SIGKILL (or by SIGTERM where nothing handles it, as in a benchmark script)
runs no cleanup: its reward workers would sit on their task queues for ever, holding the memory
they were forked with and the pipes of whoever waits on the command's output. Linux signals a
child whose parent dies when the child asked for it (prctl PR_SET_PDEATHSIG); elsewhere this is a
no-op. The signal follows the parent *thread* that started the child: start such children from
the main thread."""

from __future__ import annotations

import ctypes
import os
import signal

PR_SET_PDEATHSIG = 1


def die_with_parent(sig: int = signal.SIGTERM, parent: int | None = None) -> None:
    """In the child: `sig` to it when its parent dies. With `parent` (the parent's pid, read before
    the child started), a parent that died before the request took effect ends the child now."""
    try:
        ctypes.CDLL(None, use_errno=True).prctl(PR_SET_PDEATHSIG, int(sig))
    except (OSError, AttributeError):
        return
    if parent is not None and os.getppid() != parent:
        os.kill(os.getpid(), sig)
