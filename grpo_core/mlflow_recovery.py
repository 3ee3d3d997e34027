"""Runs whose process died without recording its end (SIGKILL, the OOM killer, a store that failed
at the end): their curves backfilled from the run folder and their MLflow run ended (`grpo recover`,
and a sweep's recovery of its dead workers)."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Optional

from grpo_core.mlflow_logging import log_metrics, record_end, step_points
from grpo_core.mlflow_store import make_client
from grpo_core.record.provenance import owner_alive
from grpo_core.util.errors import cause_line


def backfill_and_end(client, run_id: str, run_dir: Optional[str | Path], reason: str) -> tuple[int, str]:
    """End a run that its process left RUNNING (killed with SIGKILL, or its store failed at the end).
    Its folder holds what the process wrote: the steps MLflow does not have yet are logged from its
    metrics.jsonl; a summary.json that says finished ends the run FINISHED with its summary; else the
    run is KILLED with the reason (and summary.json, when missing, says killed). A folder that another
    run has taken over since (a resume from a checkpoint) is left alone: its steps are that run's.
    A file that cannot be written is named in the reason; nothing stops the recovery. Returns (how
    many steps were backfilled, FINISHED or KILLED)."""
    import json

    import yaml
    from mlflow.entities import RunTag

    from grpo_core.run import RUN_MARKER, mark_killed, read_metrics_skipping

    backfilled, notes = 0, []
    folder = Path(run_dir) if run_dir else None
    marker = folder / RUN_MARKER if folder is not None else None
    owner = marker.read_text().strip() if marker is not None and marker.is_file() else run_id
    if folder is not None and owner != run_id:  # resumed by another run since: its files are that run's
        reason += f"; its run folder {folder} was since taken over by MLflow run {owner} (a resume)"
        folder = None
    summary = {}
    if folder is not None and (folder / "summary.json").is_file():
        try:
            summary = json.loads((folder / "summary.json").read_text())
        except (OSError, ValueError):
            summary = {}
    if folder is not None and (folder / "metrics.jsonl").is_file():
        have = max((m.step for m in client.get_metric_history(run_id, "reward")), default=0)
        rows, bad = read_metrics_skipping(folder / "metrics.jsonl")
        if bad:  # a disk or an editor damaged a line: the others are still the run's curves
            notes.append(f"{bad} malformed line(s) of metrics.jsonl skipped")
        rows = [r for r in rows if r.get("step", 0) > have]
        log_metrics(client, run_id, step_points(rows, int(time.time() * 1000)))
        backfilled = len(rows)
    if summary.get("status") == "finished":  # it trained to the end; only its MLflow record was cut short
        try:
            max_steps = (yaml.safe_load((folder / "config.yaml").read_text()) or {}).get("max_steps")
        except (OSError, ValueError, yaml.YAMLError):
            max_steps = None
        record_end(client, run_id, summary, "finished", max_steps, folder)
        return backfilled, "FINISHED"
    if folder is not None and (note := mark_killed(folder, reason)) is not None:
        notes.append(note)
    if notes:
        reason += "; " + "; ".join(notes)
    client.log_batch(
        run_id,
        tags=[RunTag("failure_reason", reason[:5000]), RunTag("error", reason[:5000]), RunTag("status", "killed")],
    )  # `error`, as a run that records its own end
    if folder is not None:
        for name in ("config.yaml", "metrics.jsonl", "summary.json"):
            if (folder / name).is_file():
                client.log_artifact(run_id, str(folder / name))
    client.set_terminated(run_id, status="KILLED")
    return backfilled, "KILLED"


def recover_runs(tracking_uri: str) -> tuple[list[tuple[str, str, int, str]], list[tuple[str, str]]]:
    """Find RUNNING runs whose owner process is gone from this host (killed with SIGKILL, the
    OOM killer, a store that failed at its end) and end them with backfill_and_end. Returns (ended:
    (run id, name, steps backfilled, FINISHED | KILLED), left alone: (run id, why))."""
    client = make_client(tracking_uri)
    ended, left = [], []
    experiments = [e.experiment_id for e in client.search_experiments()]
    for i in range(0, len(experiments), 100):
        for run in client.search_runs(
            experiments[i : i + 100], filter_string="attributes.status = 'RUNNING'", max_results=50_000
        ):
            owner = run.data.tags.get("owner")
            alive = owner_alive(owner) if owner else None
            name = run.info.run_name or run.info.run_id
            if alive is False:
                pid = owner.rsplit(":", 2)[1]
                try:
                    steps, status = backfill_and_end(
                        client, run.info.run_id, run.data.tags.get("run_dir"), f"process died (pid {pid} on this host)"
                    )
                except Exception as exc:  # one bad folder or run never stops the others' recovery
                    left.append((run.info.run_id, f"{name}: could not be ended: {cause_line(exc)}"))
                    continue
                ended.append((run.info.run_id, name, steps, status))
            elif alive is None:
                left.append(
                    (run.info.run_id, f"{name}: owner {owner or 'not recorded'} cannot be checked from this host")
                )
            else:  # its process is alive: a run in progress, never ended by recover
                left.append((run.info.run_id, f"{name}: still running (pid {owner.rsplit(':', 2)[1]} on this host)"))
    return ended, left
