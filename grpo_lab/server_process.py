"""A server that lives and dies with the command that started it (`grpo ui`).

The server (MLflow's, which starts uvicorn as a process of its own) runs in a process group of
its own, so a Ctrl-C at the terminal reaches only `grpo ui`, which then stops the whole group
quietly (SIGTERM, then SIGKILL after a grace period). A watchdog, a small child process that the
kernel signals when `grpo ui` dies however it dies (PR_SET_PDEATHSIG, SIGKILL included), stops the
group too: no server is left holding the port of a command that is gone."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

from grpo_core.util.parent_death import die_with_parent

GRACE_S = 10.0


def stop_group(group: int, grace_s: float = GRACE_S) -> None:
    """SIGTERM to the process group, SIGKILL to what is left of it after grace_s."""
    try:
        os.killpg(group, signal.SIGTERM)
        deadline = time.monotonic() + grace_s
        while time.monotonic() < deadline:
            os.killpg(group, 0)
            time.sleep(0.2)
        os.killpg(group, signal.SIGKILL)
    except ProcessLookupError:
        pass


def _watch(group: int, parent: int) -> None:
    """The watchdog (`python -m grpo_lab.server_process GROUP PARENT`): told when its parent dies
    (SIGTERM, PR_SET_PDEATHSIG) or by the parent itself, it stops the group; it ends with the group."""

    def stop(*_):
        stop_group(group)
        os._exit(0)

    signal.signal(signal.SIGTERM, stop)
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    if os.getppid() != parent:  # the parent died before the signal was set up
        stop()
    while True:
        try:
            os.killpg(group, 0)
        except ProcessLookupError:
            os._exit(0)
        time.sleep(1)


def serve(cmd: list[str], env: dict | None = None) -> int:
    """Run `cmd` until it exits or this process is interrupted (Ctrl-C, SIGTERM: it is stopped and 0
    is returned, with one line on stderr); the watchdog stops it if this process is killed."""
    proc = subprocess.Popen(cmd, env=env, start_new_session=True)
    watchdog = subprocess.Popen(
        [sys.executable, "-m", "grpo_lab.server_process", str(proc.pid), str(os.getpid())],
        preexec_fn=die_with_parent,
        stdin=subprocess.DEVNULL,
    )
    try:
        return proc.wait()
    except KeyboardInterrupt:  # Ctrl-C, or SIGTERM (grpo_core.util.errors.handle_sigterm)
        print("grpo ui: stopping the MLflow server", file=sys.stderr, flush=True)
        stop_group(proc.pid)
        proc.wait()
        return 0
    finally:
        if watchdog.poll() is None:
            watchdog.terminate()  # its handler stops what may be left of the group, then exits
        watchdog.wait()


if __name__ == "__main__":
    _watch(int(sys.argv[1]), int(sys.argv[2]))
