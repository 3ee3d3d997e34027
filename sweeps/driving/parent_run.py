"""A sweep's MLflow parent run: made on its first invocation, reopened on every rerun (its id is
kept in the study), and never left RUNNING by an interrupt that comes while it is made."""

from __future__ import annotations

import json
from contextlib import suppress

from grpo_core.mlflow_store import get_or_create_experiment, kept_whole, make_client

from grpo_core.mlflow_logging import git_commit
from grpo_core.record.provenance import owner_id
from grpo_core.util.errors import mask_secrets, release_frames

from ..spec import SweepSpec


def parent_run(study, spec: SweepSpec, tracking_uri: str) -> str:
    """The parent run's id, RUNNING and owned by this process. On SQLite, the run is made (or
    reopened) and its id kept whole (kept_whole): Ctrl-C or SIGTERM that comes meanwhile, or while a
    new parent's parameters are logged, ends it KILLED (an error, FAILED) before it is raised, and the
    rerun makes a new one (the sweep says it was interrupted)."""
    client, run_id = make_client(tracking_uri), None
    try:
        with kept_whole(client):  # an interrupt here is raised once the id is kept: the run is ended below
            run_id, new = _open_parent_run(study, spec, client, tracking_uri)
        if new:
            _describe_parent_run(study, spec, client, tracking_uri, run_id)
        return run_id
    except BaseException as exc:
        release_frames(exc)
        if run_id is not None:
            with suppress(Exception):
                client.set_terminated(run_id, status="KILLED" if isinstance(exc, KeyboardInterrupt) else "FAILED")
        raise


def _open_parent_run(study, spec: SweepSpec, client, tracking_uri: str) -> tuple[str, bool]:
    """The sweep's MLflow parent run, reused on every rerun (its id is kept in the study), or a new
    one (then True: _describe_parent_run logs what it is)."""
    run_id = study.user_attrs.get(f"mlflow_parent_run_id:{mask_secrets(tracking_uri)}")
    if run_id:
        try:
            client.update_run(run_id, status="RUNNING")
            client.set_tag(run_id, "owner", owner_id())  # this process now: `grpo recover` ends it if it dies
            return run_id, False
        except Exception:  # deleted, or another store: make a new one
            pass
    experiment_id = get_or_create_experiment(client, spec.experiment, tracking_uri)
    tags = {
        "sweep": spec.name,
        "sweep_role": "parent",
        "git_commit": git_commit(),
        "spec_path": spec.path,
        "mode": spec.mode,
        "owner": owner_id(),
        **{k: v[:5000] for k, v in spec.text.items()},
    }
    return client.create_run(experiment_id, run_name=spec.name, tags=tags).info.run_id, True


def _describe_parent_run(study, spec: SweepSpec, client, tracking_uri: str, run_id: str) -> None:
    """A new parent run's parameters; then the study keeps its id (a parent stopped before that is
    ended, and the rerun makes a new one)."""
    client.log_param(run_id, "objective", ",".join(spec.all_objectives))
    client.log_param(run_id, "direction", ",".join(spec.all_directions))
    if spec.pruner:
        client.log_param(run_id, "pruner", json.dumps(spec.pruner))
    client.log_param(run_id, "grid", json.dumps(spec.grid)[:6000])
    client.log_param(run_id, "search", json.dumps(spec.search)[:6000])
    client.log_param(run_id, "seeds", json.dumps(spec.seeds))
    if spec.replication_seeds:
        client.log_param(run_id, "replication_seeds", json.dumps(spec.replication_seeds))
    client.log_param(run_id, "base", mask_secrets(json.dumps(spec.base, default=str))[:6000])
    study.set_user_attr(f"mlflow_parent_run_id:{mask_secrets(tracking_uri)}", run_id)
