"""Data-parallel runs: which process this is, and how `grpo train --num-processes N` launches N.

A run on P processes is one run: every process draws the same prompts for the step, keeps its
share of whole groups (prompts_per_step / P), samples and scores them, and the rewards are
gathered so advantages, noise and reward metrics are computed over the whole batch exactly as on
one process. Gradients are averaged by DDP; the loss normalizers are chosen so that the average
equals the one-process gradient (see loss.aggregate). Only process 0 writes the run folder, logs to
MLflow and shows progress.

`grpo train --num-processes N` launches with torch's elastic agent (what torchrun runs): it
starts the processes and sets RANK, LOCAL_RANK and WORLD_SIZE, which accelerate reads (gloo on
CPUs, NCCL on GPUs). `accelerate launch
--multi_gpu` sets the same variables; note that `accelerate launch --cpu --num_processes N`
starts one process, not N.
"""

from __future__ import annotations

import os
import sys


def process_rank() -> int:
    """This process's index among the run's processes (0 when not launched as several)."""
    return int(os.environ.get("RANK", "0"))


def world_size() -> int:
    """How many processes train this run (1 when not launched as several)."""
    return int(os.environ.get("WORLD_SIZE", "1"))


def is_main_process() -> bool:
    return process_rank() == 0


_PEERS: dict[int, int] = {}  # rank → pid of every process of this run (note_peers)


def note_peers() -> None:
    """Learn every process's pid, by rank, once the process group is up (a collective: every
    process calls it), so that a process can say which of the others died."""
    import torch.distributed as dist

    if world_size() > 1 and dist.is_available() and dist.is_initialized():
        pids: list = [None] * world_size()
        dist.all_gather_object(pids, os.getpid())
        _PEERS.update(enumerate(pids))


def _how_it_ended(pid: int) -> str | None:
    """None while the process runs; else how it ended, as far as this process can see: the exit
    status of a process its launcher has not reaped yet (/proc/PID/stat's exit_code), else 'died'."""
    import signal

    try:
        stat = open(f"/proc/{pid}/stat").read()
    except OSError:
        return "died"  # gone, and reaped
    fields = stat[stat.rindex(")") + 2 :].split()  # from field 3 (the state) on
    if fields[0] not in ("Z", "X"):
        return None
    try:
        code = int(fields[49])  # field 52, exit_code, as waitpid reports it
    except (IndexError, ValueError):
        return "died"
    if code & 0x7F:
        try:
            return f"died ({signal.Signals(code & 0x7F).name})"
        except ValueError:
            return f"died (signal {code & 0x7F})"
    return f"exited with status {code >> 8}"


def dead_peer(wait_s: float = 0.0) -> str | None:
    """'worker R of N (pid P) died (SIGKILL)' for the first other process of this run that ended,
    or None while all run, after looking again for up to `wait_s` seconds. A killed peer's sockets
    close while the kernel is still taking it down, before /proc shows it ended: the survivor's
    "Connection reset by peer" can come first (seen in a CI run of 2026-11-27), so a caller that
    has just seen a collective fail waits a moment for the cause to show."""
    import time

    deadline = time.monotonic() + wait_s
    while True:
        for rank, pid in sorted(_PEERS.items()):
            if rank != process_rank() and (how := _how_it_ended(pid)) is not None:
                return f"worker {rank} of {world_size()} (pid {pid}) {how}"
        if not _PEERS or time.monotonic() >= deadline:
            return None
        time.sleep(0.05)


def shut_down() -> None:
    """End this process's part in a finished data-parallel run: wait for the others (a barrier),
    destroy the process group, then leave with exit code 0 without the interpreter's teardown
    (os._exit, after flushing the output): it never returns there. Left to the interpreter's exit,
    gloo's threads ended a finished 2-process run with "terminate called without an active
    exception" (exit 241, in a fresh clone's test run of 2026-11-24); destroying the group first
    made it rarer, not gone (again on 2026-11-26, on a 2-core machine running four other
    processes). Everything the run records is written and closed by then (run folder, MLflow).
    Nothing to do in a one-process run."""
    import torch.distributed as dist

    if dist.is_available() and dist.is_initialized():
        dist.barrier()
        dist.destroy_process_group()
        import logging

        logging.shutdown()
        leave(0)


def leave(code: int) -> None:
    """Leave this process now with `code`, its output flushed, without the interpreter's teardown,
    where gloo's threads can abort it (shut_down). It never returns."""
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (OSError, ValueError):  # a closed pipe or stream: nothing left to say there
            pass
    os._exit(code)


class MainProcessDied(Exception):
    """Process 0 of a launched run ended by a signal, so nothing recorded the run: the message says
    which (`worker 0 of N (pid P) died (SIGKILL)`), for the launcher to record and print."""


def launch_local(num_processes: int, args: list[str]) -> int:
    """Run `python <args>` (the caller's command, e.g. `-m grpo_lab train …`) on `num_processes` processes of this machine (torch's elastic agent,
    as `torchrun --standalone` does) and return the exit code: 0, or that of the first process
    that failed (2 for bad input, 143 when terminated). The agent's own log lines are silenced, so
    a refused run shows the one line its process 0 printed. SIGTERM or Ctrl-C reaches every
    process (the agent sends SIGTERM), and process 0 records the run as killed. Another process
    that dies: process 0 records the run as killed, naming it (dead_peer). Process 0 that dies
    by a signal: MainProcessDied, for the launcher to record."""
    import logging
    import uuid

    from torch.distributed.elastic.multiprocessing import SignalException
    from torch.distributed.elastic.multiprocessing.errors import ChildFailedError
    from torch.distributed.launcher.api import LaunchConfig, elastic_launch

    for name in [n for n in logging.root.manager.loggerDict if n.startswith("torch.distributed")]:
        logging.getLogger(name).setLevel(logging.CRITICAL)  # each has its own level (torch's LOGLEVEL)
    config = LaunchConfig(
        min_nodes=1,
        max_nodes=1,
        nproc_per_node=num_processes,
        run_id=uuid.uuid4().hex,
        rdzv_backend="c10d",
        rdzv_endpoint="localhost:0",
        max_restarts=0,
        monitor_interval=0.2,
    )
    try:
        elastic_launch(config, entrypoint=sys.executable)(*args)
        return 0
    except ChildFailedError as exc:
        failures = sorted(exc.failures.items())  # by rank
        main = next((f for rank, f in failures if rank == 0), None)
        if main is not None and main.exitcode < 0:  # killed by a signal: it could record nothing
            raise MainProcessDied(f"worker 0 of {num_processes} (pid {main.pid}) died ({main.signal_name()})") from None
        return (main.exitcode if main is not None else failures[0][1].exitcode) or 1
    except SignalException:
        return 143
