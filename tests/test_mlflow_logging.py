"""The MLflow logger's buffered curves (handed to a writer thread, written with the public
log_batch) read back exactly as one direct log_batch of every point: every point, and the
latest value per key."""

import os

import pytest
from mlflow.entities import Metric

from grpo_core.mlflow_store import make_client

from grpo_core.mlflow_logging import MlflowRunLogger


def _history(client, run_id, key):
    return [(m.step, m.value) for m in sorted(client.get_metric_history(run_id, key), key=lambda m: m.step)]


def test_buffered_curves_match_one_direct_log_batch(tmp_path):
    uri = f"sqlite:///{tmp_path}/mlflow.db"
    steps = [{"step": s, "reward": s / 10, "loss": -s * 1e-3, "rewards/exact_match": 0.5} for s in range(1, 121)]
    logger = MlflowRunLogger(uri, "t", "bulk", {"lr": 1e-4}, flush_every=50)  # 3 flushes, the last partial
    for m in steps:
        logger.log_step(m)
    logger.end({"final_reward": 1.0, "train_time_s": 2.0}, "finished")

    client = make_client(uri)
    reference = client.create_run(logger.experiment_id).info.run_id
    client.log_batch(
        reference, metrics=[Metric(k, v, 0, m["step"]) for m in steps for k, v in m.items() if k != "step"]
    )

    for key in ("reward", "loss", "rewards/exact_match"):
        assert _history(client, logger.run_id, key) == _history(client, reference, key)
        assert len(_history(client, logger.run_id, key)) == 120
    run, ref = client.get_run(logger.run_id), client.get_run(reference)
    for key in ("reward", "loss", "rewards/exact_match"):
        assert run.data.metrics[key] == ref.data.metrics[key]  # latest value per key
    assert run.data.metrics["final_reward"] == 1.0 and run.info.status == "FINISHED"
    assert 0 <= run.data.metrics["logging/overhead_frac"] < 1
    assert logger.writer_cpu_seconds > 0  # the writer thread did the writing


def test_curves_are_handed_to_the_writer_every_few_seconds(tmp_path, monkeypatch):
    # a slow step (the real model on a CPU: ~90 s) must not keep its curve out of MLflow for 50 steps
    import grpo_core.mlflow_logging as ml

    clock = [0.0]
    monkeypatch.setattr(ml.time, "monotonic", lambda: clock[0])
    logger = MlflowRunLogger(
        f"sqlite:///{tmp_path}/m.db", "t", "slow", {"max_steps": 10}, flush_every=50, flush_seconds=2.0
    )
    logger.log_step({"step": 1, "reward": 0.1})
    assert logger._buffer  # 0 s since the last flush: still buffered
    clock[0] = 2.5
    logger.log_step({"step": 2, "reward": 0.2})
    assert logger._buffer == []  # 2.5 s: handed to the writer thread
    logger.end({"steps_to_learn": None, "learned": 0}, "finished")
    client = make_client(f"sqlite:///{tmp_path}/m.db")
    assert _history(client, logger.run_id, "reward") == [(1, 0.1), (2, 0.2)]
    run = client.get_run(logger.run_id)
    assert run.data.metrics["steps_to_learn"] == 11  # never learned: max_steps + 1, always present
    assert client.get_experiment(logger.experiment_id).tags["mlflow.experimentKind"] == "custom_model_development"


def test_credentials_in_params_are_masked(tmp_path):
    logger = MlflowRunLogger(
        f"sqlite:///{tmp_path}/m.db", "t", "secret", {"mlflow_tracking_uri": "http://alice:s3cret@tracking:5000"}
    )
    logger.end({}, "finished")
    params = make_client(f"sqlite:///{tmp_path}/m.db").get_run(logger.run_id).data.params
    assert params["mlflow_tracking_uri"] == "http://alice:***@tracking:5000"


def test_overlapping_writers_restore_the_switch_interval_they_found():
    # a search trial and its seed run can write at once: the first to start saves the interval,
    # the last to finish restores it, in whatever order they finish
    import sys

    from grpo_core.mlflow_logging import _WRITER_SWITCH_S, short_switch_interval

    before = sys.getswitchinterval()
    first, second = short_switch_interval(), short_switch_interval()
    first.__enter__()
    second.__enter__()
    assert sys.getswitchinterval() == _WRITER_SWITCH_S
    first.__exit__(None, None, None)  # the first writer finishes while the second still writes
    assert sys.getswitchinterval() == _WRITER_SWITCH_S
    second.__exit__(None, None, None)
    assert sys.getswitchinterval() == before != _WRITER_SWITCH_S


def test_a_worker_forked_while_a_writer_writes_starts_with_the_interval_unshortened():
    import os
    import sys

    from grpo_core.mlflow_logging import short_switch_interval

    before = sys.getswitchinterval()
    with short_switch_interval():
        read, write = os.pipe()
        pid = os.fork()
        if pid == 0:  # the child: a fresh lock (not held), the interval the parent started from
            try:
                ok = sys.getswitchinterval() == before
                with short_switch_interval():
                    pass
                os.write(write, b"1" if ok and sys.getswitchinterval() == before else b"0")
            finally:
                os._exit(0)  # never back into pytest, whatever happened
        os.close(write)
        answer = os.read(read, 1)
        os.waitpid(pid, 0)
    assert answer == b"1"


def test_the_default_relative_store_follows_the_working_folder(tmp_path, monkeypatch):
    # MLflow keeps one store per URI for the life of a process: `sqlite:///results/local/mlflow.db`
    # from a second working folder wrote to the first folder's database before make_client made it absolute
    uri = "sqlite:///results/local/mlflow.db"
    for name in ("a", "b"):
        (tmp_path / name).mkdir()
        monkeypatch.chdir(tmp_path / name)
        make_client(uri).create_experiment(f"made-in-{name}", artifact_location=(tmp_path / name / "art").as_uri())
    for name, other in (("a", "b"), ("b", "a")):
        names = {
            e.name for e in make_client(f"sqlite:///{tmp_path / name}/results/local/mlflow.db").search_experiments()
        }
        assert f"made-in-{name}" in names and f"made-in-{other}" not in names


def test_mlflow_info_lines_stay_quiet_when_mlflow_was_imported_first(tmp_path, monkeypatch):
    # MLflow reads MLFLOW_LOGGING_LEVEL once, on import: in a notebook (or a test process) that imported
    # it before grpo's main() set the variable, its INFO lines ("Create SQLAlchemy engine ...") would reach
    # the terminal; main() sets the level of the logger itself. --verbose brings them back.
    import logging

    import mlflow  # noqa: F401  (imported first, at MLflow's default INFO level)

    from conftest import CACHE, run_grpo_here

    # as a sweep earlier in the process leaves it: MLflow then logs its pool options at INFO per new store
    monkeypatch.setenv("MLFLOW_SQLALCHEMYSTORE_POOLCLASS", "NullPool")
    logger = logging.getLogger("mlflow")
    before = logger.level
    try:
        logger.setLevel(logging.INFO)
        args = [
            "train",
            "--no-progress",
            "--set",
            f"cache_dir={CACHE}",
            "--set",
            "baseline_prompts=8",
            "--set",
            "max_steps=1",
            "--set",
            "stl_window=1",
        ]
        res = run_grpo_here(
            *args, "--set", f"mlflow_tracking_uri=sqlite:///{tmp_path / 'q.db'}", "--out", str(tmp_path / "q")
        )
        assert res.returncode == 0, res.stderr
        assert "INFO mlflow" not in res.stderr, res.stderr
        logger.setLevel(logging.INFO)
        res = run_grpo_here(
            *args,
            "--set",
            f"mlflow_tracking_uri=sqlite:///{tmp_path / 'l.db'}",
            "--out",
            str(tmp_path / "l"),
            "--verbose",
        )  # a new database: MLflow makes one engine per store
        assert res.returncode == 0, res.stderr
        assert "INFO mlflow" in res.stderr
    finally:
        logger.setLevel(before)


def test_a_store_given_elsewhere_keeps_its_artifacts_beside_it(tmp_path, monkeypatch):
    """A SQLite store named outside the working folder gets its artifacts beside it, not in
    ./results/local/mlartifacts of whatever folder the command ran in; the default store keeps the
    default place, and a server its own."""
    from grpo_core.mlflow_store import artifact_root_for, ui_command
    from grpo_core.util import defaults

    monkeypatch.chdir(tmp_path)
    store = tmp_path / "elsewhere" / "mlflow.db"
    assert artifact_root_for(f"sqlite:///{store}") == (tmp_path / "elsewhere" / "mlartifacts").as_uri()
    assert artifact_root_for(defaults.TRACKING_URI) == (tmp_path / defaults.ARTIFACT_ROOT).as_uri()
    assert artifact_root_for("http://127.0.0.1:5000") is None
    store.parent.mkdir()
    command = ui_command(f"sqlite:///{store}", 5999)
    assert command[command.index("--default-artifact-root") + 1] == (tmp_path / "elsewhere" / "mlartifacts").as_uri()
    assert not (tmp_path / "results").exists()  # nothing written in the working folder


@pytest.mark.parametrize("cut", [40000, 8192])  # mid-page, and at a page boundary short of the header's count
def test_a_store_cut_short_is_named_in_one_line_before_anything_trains(tmp_path, cut):
    """A SQLite store that a full disk cut short: one line naming the file and what to do, exit 2,
    no run folder (it trained and then lost the record, or printed two tracebacks)."""
    import sqlite3

    from conftest import run_grpo_here

    store = tmp_path / "mlflow.db"
    with sqlite3.connect(store) as db:
        db.execute("create table t (x)")
        db.executemany("insert into t values (?)", [(i,) for i in range(50000)])
    os.truncate(store, cut)
    done = run_grpo_here(
        "train",
        "--set",
        "max_steps=1",
        "--set",
        f"mlflow_tracking_uri=sqlite:///{store}",
        "--out",
        str(tmp_path / "run"),
        cwd=tmp_path,
    )
    assert done.returncode == 2 and len(done.stderr.strip().splitlines()) == 1, done.stderr
    assert f"{store} is damaged" in done.stderr and "Traceback" not in done.stderr
    assert not (tmp_path / "run").exists()


def test_a_store_write_that_fails_mid_run_costs_one_line_not_mlflows_traceback(tmp_path):
    """The store's metrics table broken under a run (as a locked or damaged SQLite file fails a
    write): the run finishes, and grpo says in one line, naming the database's own error, that its
    record is incomplete; MLflow's traceback for each failed write is dropped, and shown again
    with --verbose, which asks for MLflow's own log lines."""
    import sqlite3

    from conftest import CACHE, run_grpo_here

    store = tmp_path / "mlflow.db"
    make_client(f"sqlite:///{store}")  # a whole store, then its metrics table replaced by one without columns
    with sqlite3.connect(store) as db:
        db.execute("drop table metrics")
        db.execute("create table metrics (key varchar(250))")
    args = [
        "train",
        "--no-progress",
        "--set",
        f"cache_dir={CACHE}",
        "--set",
        "baseline_prompts=8",
        "--set",
        "max_steps=2",
        "--set",
        "stl_window=1",
        "--set",
        f"mlflow_tracking_uri=sqlite:///{store}",
    ]
    done = run_grpo_here(*args, "--out", str(tmp_path / "quiet"), cwd=tmp_path)
    assert done.returncode == 1 and "Traceback" not in done.stderr, done.stderr[-2000:]
    [line] = done.stderr.strip().splitlines()
    assert line.startswith(
        f"grpo: the run in {tmp_path / 'quiet'} finished, but its record is incomplete: MLflow: "
        f"OperationalError: table metrics has no column named "
    ), line  # the driver's own words
    assert line.endswith("; `grpo recover` completes an MLflow record from the run folder"), line
    assert (tmp_path / "quiet" / "summary.json").is_file()
    verbose = run_grpo_here(*args, "--out", str(tmp_path / "verbose"), "--verbose", cwd=tmp_path)
    assert verbose.returncode == 1 and "SQLAlchemy database error" in verbose.stderr


@pytest.mark.parametrize("error", ["interrupt", "OSError"])
def test_an_interrupt_while_the_pool_closes_a_connection_leaves_no_traceback(tmp_path, caplog, error):
    """SIGTERM landing while SQLAlchemy's pool closes a connection: the pool logged "Exception closing
    connection" with a traceback before raising the interrupt on, beside grpo's own line that the
    run was killed (caught in a killed search's output). That traceback is dropped; the pool's
    other errors are still logged."""
    import sqlalchemy

    from grpo_core.util.errors import Terminated

    make_client(f"sqlite:///{tmp_path}/mlflow.db")  # (what installs the filters)
    engine = sqlalchemy.create_engine(f"sqlite:///{tmp_path}/other.db", poolclass=sqlalchemy.pool.QueuePool)
    engine.connect().close()  # one connection, back in the pool
    raised = Terminated() if error == "interrupt" else OSError("the disk went away")

    def close(connection):
        connection.close()
        raise raised

    engine.dialect.do_close = close
    if error == "interrupt":
        with pytest.raises(Terminated):  # raised on, as before: grpo records the run as killed
            engine.dispose()
    else:
        engine.dispose()  # (an Exception is logged, not raised)
    closing = [r for r in caplog.records if r.getMessage().startswith("Exception closing connection")]
    assert len(closing) == (0 if error == "interrupt" else 1), closing
