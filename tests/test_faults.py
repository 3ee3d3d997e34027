"""Nothing a user ran is lost when a disk fills, a store or a reward misbehaves, or input is hostile
(the third reliability round): a fault is recorded as failed with its real cause, in the run folder
first and in MLflow and Optuna after; bad input is one line, exit 2, nothing written."""

import contextlib
import json
import os
import platform
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
import reward_helpers
import yaml

from conftest import CACHE, ROOT, run_grpo as grpo, run_grpo_here as grpo_here
from grpo_core.run import RESERVE, read_metrics

TRAIN = ["--no-progress", "--set", f"cache_dir={CACHE}", "--set", "baseline_prompts=8"]


@contextlib.contextmanager
def small_disk(path: Path, size: str, options: str = ""):
    """A tmpfs of `size` mounted at `path` (a full disk on demand); skipped where mounting is not allowed."""
    path.mkdir(parents=True, exist_ok=True)
    done = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", f"size={size}{',' + options if options else ''}", "tmpfs", str(path)],
        capture_output=True,
        text=True,
    )
    if done.returncode != 0:
        pytest.skip(f"cannot mount a small filesystem here: {done.stderr.strip()}")
    try:
        yield path
    finally:
        subprocess.run(["umount", "-l", str(path)], capture_output=True)


def _mlflow_runs(db: Path):
    from mlflow.tracking import MlflowClient

    client = MlflowClient(tracking_uri=f"sqlite:///{db}")
    return client, [r for e in client.search_experiments() for r in client.search_runs([e.experiment_id])]


def _one_line(res) -> str:
    lines = res.stderr.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in res.stderr, res.stderr[-3000:]
    return lines[0]


# ---- a full disk ------------------------------------------------------------------------------------
def test_a_full_disk_during_a_checkpoint_is_recorded_as_failed_everywhere(tmp_path):
    db = tmp_path / "m.db"
    with small_disk(tmp_path / "disk", "1500k") as disk:  # room for the run folder, not for a 5 MB checkpoint
        res = grpo_here(
            "train",
            *TRAIN,
            "--set",
            "max_steps=20",
            "--set",
            "save_steps=5",
            "--set",
            "stl_window=5",
            "--set",
            f"mlflow_tracking_uri=sqlite:///{db}",
            "--out",
            str(disk / "run"),
        )
        assert res.returncode == 1
        line = _one_line(res)
        assert line.startswith("grpo: run failed: cannot write") and "No space left on device" in line
        summary = json.loads((disk / "run" / "summary.json").read_text())
        assert summary["status"] == "failed" and "No space left" in summary["error"]
        assert summary["steps_completed"] == 5
        leftovers = sorted(p.name for p in (disk / "run").iterdir())
        assert not [n for n in leftovers if n.endswith(".tmp") or n.startswith(".checkpoint") or n == RESERVE], (
            leftovers
        )
        assert [r["step"] for r in read_metrics(disk / "run" / "metrics.jsonl")] == [1, 2, 3, 4, 5]
    client, (run,) = _mlflow_runs(db)
    assert run.info.status == "FAILED" and "No space left on device" in run.data.tags["error"]


# ---- memory -----------------------------------------------------------------------------------------
def test_an_address_space_limit_too_low_to_start_is_one_line_before_anything_is_written(tmp_path):
    # under ulimit -v 1,000,000 KiB the tokenizer's allocator aborted the process (exit 134, no word, no record)
    import resource

    spec = tmp_path / "s.yaml"
    spec.write_text(yaml.safe_dump({"name": "s", "base": {"max_steps": 2}, "grid": {"beta": [0.0]}, "seeds": [0]}))
    limit = 1_000_000 * 1024
    for args in (
        ["train", *TRAIN, "--out", str(tmp_path / "run")],
        [
            "sweep",
            str(spec),
            "--storage",
            f"journal:///{tmp_path}/j.log",
            "--tracking-uri",
            f"sqlite:///{tmp_path}/m.db",
            "--out-root",
            str(tmp_path / "runs"),
        ],
    ):
        res = subprocess.run(
            [sys.executable, "-m", "grpo_lab", *args],
            capture_output=True,
            text=True,
            cwd=tmp_path,
            preexec_fn=lambda: resource.setrlimit(resource.RLIMIT_AS, (limit, limit)),
        )
        assert res.returncode == 2, res.stderr[-2000:]
        line = _one_line(res)
        assert line.startswith("grpo: error: ulimit -v: 977 MiB of address space") and "at least 2048 MiB" in line
    assert sorted(p.name for p in tmp_path.iterdir()) == ["s.yaml"]  # no run folder, store or journal


def test_an_allocation_that_fails_mid_run_is_one_line_and_recorded_as_failed(tmp_path, monkeypatch):
    # what torch's CPU allocator raised at ulimit -v 1,200,000 KiB, from inside a step's sampling (a traceback)
    from grpo_core.trainer import GRPOTrainer

    real, calls = GRPOTrainer._sample, {"n": 0}

    def runs_out(self, *args, **kwargs):
        calls["n"] += 1
        if calls["n"] == 3:
            raise RuntimeError(
                "[enforce fail at alloc_cpu.cpp:127] err == 0. DefaultCPUAllocator: can't allocate "
                "memory: you tried to allocate 393216 bytes. Error code 12 (Cannot allocate memory)"
            )
        return real(self, *args, **kwargs)

    monkeypatch.setattr(GRPOTrainer, "_sample", runs_out)
    res = grpo_here(
        "train", *TRAIN, "--no-mlflow", "--set", "max_steps=4", "--set", "stl_window=1", "--out", str(tmp_path / "run")
    )
    assert res.returncode == 1
    line = _one_line(res)
    assert line.startswith("grpo: run failed: out of memory ([enforce fail at alloc_cpu.cpp:127]"), line
    summary = json.loads((tmp_path / "run" / "summary.json").read_text())
    assert summary["status"] == "failed" and summary["error"].startswith("out of memory") and "traceback" not in summary
    assert summary["steps_completed"] == len(read_metrics(tmp_path / "run" / "metrics.jsonl"))


def test_grad_step_bytes_by_hand():
    from types import SimpleNamespace

    from grpo_core.util.memory import grad_step_bytes

    config = SimpleNamespace(num_hidden_layers=2, hidden_size=4, intermediate_size=8, vocab_size=10)
    # 3 positions × 2 layers × (12·4 + 3·8) floats, 2 logits rows × 3 × 10 floats, 4 bytes each
    assert grad_step_bytes(config, positions=3, logit_rows=2) == 4 * (3 * 2 * 72 + 2 * 30) == 1968


def _hold_then_release(path, events, after, delay_s=0.0):
    """Take the gate's lock from another open file (as another process would), and release it
    `delay_s` after `after` is set; `events` records the release."""
    import fcntl

    f = open(path, "a")
    fcntl.flock(f, fcntl.LOCK_EX)

    def release():
        after.wait(60)
        time.sleep(delay_s)
        events.append("released")
        f.close()

    thread = threading.Thread(target=release)
    thread.start()
    return thread


def test_the_memory_gate_waits_for_the_holder_only_above_its_share(tmp_path):
    from grpo_core.util.memory import GATE_SHARE, memory_gate

    path, total = str(tmp_path / "gate.lock"), 1000 * GATE_SHARE
    small, big = memory_gate(1000, total=total, path=path), memory_gate(1001, total=total, path=path)
    assert not small.held and big.held  # a step takes the gate only above total / GATE_SHARE

    events, go = [], threading.Event()
    thread = _hold_then_release(path, events, go)
    with small:  # below the share: never waits, even while another step holds the gate
        events.append("small step")
    go.set()
    thread.join()
    assert events == ["small step", "released"]

    events, go = [], threading.Event()
    thread = _hold_then_release(path, events, go, delay_s=0.5)
    go.set()
    with big:  # above the share: runs only once the holder has let go
        events.append("big step")
    thread.join()
    assert events == ["released", "big step"] and big.waited > 0
    with open(path, "a") as f:  # and lets go itself when its block ends
        import fcntl

        fcntl.flock(f, fcntl.LOCK_EX | fcntl.LOCK_NB)


def test_a_gated_block_or_a_grown_process_hands_its_freed_memory_back_before_the_next_holder_gets_in(
    tmp_path, monkeypatch
):
    import fcntl

    import grpo_core.util.memory as memory

    path, seen = str(tmp_path / "gate.lock"), []

    def release():  # the gate must still be held when the block's memory goes back
        with open(path, "a") as f:
            try:
                fcntl.flock(f, fcntl.LOCK_EX | fcntl.LOCK_NB)
                seen.append("gate free")
            except BlockingIOError:
                seen.append("gate held")
        return True

    resident = [10 * memory.TRIM_GROWTH]
    monkeypatch.setattr(memory, "release_freed_memory", release)
    monkeypatch.setattr(memory, "_resident", lambda: resident[0])
    monkeypatch.setattr(memory, "_resident_at_release", 0)  # restored after the test
    with memory.memory_gate(2, total=memory.GATE_SHARE, path=path) as big:
        pass
    assert big.held and big.released and seen == ["gate held"]
    with memory.memory_gate(1, total=memory.GATE_SHARE, path=path) as small:  # below the share, no growth
        resident[0] += memory.TRIM_GROWTH  # grown by exactly the threshold: not past it
    assert not small.held and not small.released and seen == ["gate held"]
    with memory.memory_gate(1, total=memory.GATE_SHARE, path=path) as grown:  # below the share, grown past it
        resident[0] += 1
    assert not grown.held and grown.released and seen == ["gate held", "gate free"]


_HEAP_PROBE = """
import torch
from grpo_core.util.memory import release_freed_memory, status_kib
def rss():
    return status_kib("VmRSS") * 1024
start = rss()
held, small = [], []
for _ in range(200):  # 800 MiB in 4 MiB tensors, each followed by a small live one
    held.append(torch.ones(1 << 20)); small.append(torch.ones(16))
del held
kept = rss()
print(start, kept, release_freed_memory(), rss())
"""


@pytest.mark.skipif(
    not Path("/proc/self/status").exists() or platform.libc_ver()[0] != "glibc",
    reason="glibc's malloc_trim on Linux only",
)
def test_released_memory_leaves_the_process(tmp_path):
    # glibc told to keep every freed chunk (no mmap, no trim on free), as it keeps a step's
    # activations under its mmap threshold: only release_freed_memory gives the 800 MiB back
    env = dict(os.environ, MALLOC_MMAP_THRESHOLD_=str(1 << 30), MALLOC_TRIM_THRESHOLD_=str(1 << 34))
    out = subprocess.run(
        [sys.executable, "-c", _HEAP_PROBE], env=env, capture_output=True, text=True, cwd=ROOT, check=True
    ).stdout.split()
    start, kept, released, after = int(out[0]), int(out[1]), out[2] == "True", int(out[3])
    assert kept - start > 700 * 2**20  # freed, yet still the process's
    assert released and after - start < 100 * 2**20


def test_a_step_above_its_share_waits_for_the_host_gate(tmp_path, monkeypatch):
    # a training step whose estimate exceeds the share takes the host's gate for its forward and backward;
    # here every step does (a machine of 1 byte), and another holder keeps the gate until the test lets go
    import grpo_core.util.memory as memory
    from grpo_core.trainer import GRPOTrainer
    from conftest import make_cfg

    path = str(tmp_path / "gate.lock")
    monkeypatch.setattr(memory, "gate_path", lambda: path)
    monkeypatch.setattr(memory, "machine_memory", lambda: 1)
    trainer = GRPOTrainer(make_cfg(max_steps=1, seed=3))
    events, go = [], threading.Event()
    real_optimize = GRPOTrainer.optimize

    def optimize(self, *args, **kwargs):
        events.append("optimize starts")
        go.set()  # the holder lets go only once the step is about to take the gate
        out = real_optimize(self, *args, **kwargs)
        events.append("optimize ends")
        return out

    monkeypatch.setattr(GRPOTrainer, "optimize", optimize)
    thread = _hold_then_release(path, events, go, delay_s=1.0)  # a tiny model's step without the gate: ~0.1 s
    trainer.train_step()
    thread.join()
    assert events == ["optimize starts", "released", "optimize ends"]
    batch, rows = trainer.generate_batch(), slice(0, trainer.local_batch)
    assert trainer._memory_gate(batch, rows, trainer.local_batch).held
    trainer.num_processes = 2  # data parallel: its processes meet in every backward, so none may queue
    assert not isinstance(trainer._memory_gate(batch, rows, trainer.local_batch), memory.memory_gate)


def test_a_line_the_disk_refuses_is_cut_back_and_a_resume_reads_the_folder(tmp_path):
    from grpo_core.run import _MetricsFile, resumed_metrics
    from conftest import make_cfg

    with small_disk(tmp_path / "disk", "64k") as disk:
        f = _MetricsFile(disk / "metrics.jsonl")
        line = json.dumps({"step": 0, "pad": "x" * 900})
        with pytest.raises(OSError):
            for step in range(1, 1000):
                f.write_line(line.replace('"step": 0', f'"step": {step}'))
        f.close()
        text = (disk / "metrics.jsonl").read_text()
        assert text.endswith("\n") and all(json.loads(line) for line in text.splitlines())  # whole lines only
    # a folder whose last line was cut before this fix (or by a crash): a resume keeps the whole lines
    folder = tmp_path / "old"
    (folder / "checkpoint-3").mkdir(parents=True)
    (folder / "metrics.jsonl").write_text(
        "".join(json.dumps({"step": s}) + "\n" for s in (1, 2, 3)) + '{"step": 4, "lo'
    )
    import dataclasses

    cfg = dataclasses.replace(make_cfg(max_steps=6), resume_from_checkpoint=str(folder / "checkpoint-3"))
    assert [m["step"] for m in resumed_metrics(cfg)] == [1, 2, 3]


def test_recover_reports_a_bad_folder_in_one_line_and_ends_the_others(tmp_path):
    from mlflow.tracking import MlflowClient

    db = f"sqlite:///{tmp_path / 'm.db'}"
    client = MlflowClient(tracking_uri=db)
    exp = client.create_experiment("e", artifact_location=(tmp_path / "artifacts").as_uri())  # not ./mlruns
    import socket

    dead = f"{socket.gethostname()}:999999:12345"  # a pid that does not exist on this host
    with small_disk(tmp_path / "disk", "16k") as disk:
        bad, good = disk / "bad", tmp_path / "good"
        for folder in (bad, good):
            folder.mkdir()
            (folder / "metrics.jsonl").write_text(json.dumps({"step": 1, "reward": 0.5}) + "\n")
        (disk / "filler").write_bytes(b"\0" * 8192)
        with contextlib.suppress(OSError):  # fill what is left, so summary.json cannot be written there
            with open(disk / "filler2", "wb") as f:
                while True:
                    f.write(b"\0" * 4096)
                    f.flush()
        runs = {}
        for name, folder in (("bad", bad), ("good", good)):
            runs[name] = client.create_run(exp, run_name=name, tags={"owner": dead, "run_dir": str(folder)}).info.run_id
        res = grpo_here("recover", "--tracking-uri", db)
        assert res.returncode == 0, res.stderr
        assert "2 run(s) ended, 0 left alone" in res.stdout
        bad_run = client.get_run(runs["bad"])
        assert (
            bad_run.info.status == "KILLED"
            and "summary.json could not be written" in bad_run.data.tags["failure_reason"]
        )
    assert client.get_run(runs["good"]).info.status == "KILLED"
    assert json.loads((good / "summary.json").read_text())["status"] == "killed"


def test_a_full_disk_under_the_journal_is_one_line_and_leaves_no_empty_journal(tmp_path):
    spec = tmp_path / "s.yaml"
    spec.write_text(
        yaml.safe_dump(
            {
                "name": "s",
                "base": {"cache_dir": str(CACHE), "max_steps": 2, "stl_window": 1},
                "grid": {"loss_type": ["grpo"]},
                "seeds": [0],
            }
        )
    )
    with small_disk(tmp_path / "disk", "16k") as disk:
        with contextlib.suppress(OSError):
            with open(disk / "filler", "wb") as f:
                while True:
                    f.write(b"\0" * 4096)
                    f.flush()
        res = grpo_here(
            "sweep",
            str(spec),
            "--storage",
            f"journal:///{disk}/journal.log",
            "--tracking-uri",
            f"sqlite:///{tmp_path}/m.db",
            "--out-root",
            str(tmp_path / "runs"),
            cwd=tmp_path,
        )
        assert res.returncode == 2 and "No space left on device" in _one_line(res)
        assert not (disk / "journal.log").exists()


# ---- recovery never misattributes -------------------------------------------------------------------
def test_recover_leaves_a_resumed_folder_to_the_run_that_resumed_it(tmp_path):
    db = tmp_path / "m.db"
    run = tmp_path / "run"
    args = [
        *TRAIN,
        "--set",
        "max_steps=60",
        "--set",
        "save_steps=10",
        "--set",
        "stl_window=5",
        "--set",
        f"mlflow_tracking_uri=sqlite:///{db}",
        "--set",
        "reward_funcs=reward_helpers:held_exact_match",
    ]
    hold = tmp_path / "hold"  # the task's exact_match, held while it exists: killed mid-run however slow the machine
    env = {**os.environ, "PYTHONPATH": f"{ROOT / 'tests'}{os.pathsep}{ROOT}", "GRPO_TEST_HOLD": str(hold)}
    proc = subprocess.Popen(
        [sys.executable, "-m", "grpo_lab", "train", *args, "--out", str(run)],
        cwd=ROOT,
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    while proc.poll() is None and not (
        (run / "checkpoint-10").is_dir() and len((run / "metrics.jsonl").read_text().splitlines()) >= 12
    ):
        time.sleep(0.05)
    assert proc.poll() is None, "the run ended before it could be killed"
    reward_helpers.hold_at_next_reward(hold, lambda: proc.poll() is None)
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait()
    hold.unlink()
    res = grpo_here("train", *args, "--set", f"resume_from_checkpoint={run / 'checkpoint-10'}")  # to step 60 in run/
    assert res.returncode == 0, res.stderr[-2000:]
    res = grpo_here("recover", "--tracking-uri", f"sqlite:///{db}")
    assert res.returncode == 0 and "1 run(s) ended" in res.stdout, res.stderr
    client, runs = _mlflow_runs(db)
    (killed,) = [r for r in runs if r.info.status == "KILLED"]
    (finished,) = [r for r in runs if r.info.status == "FINISHED"]
    assert f"taken over by MLflow run {finished.info.run_id}" in killed.data.tags["failure_reason"]
    assert (
        max((m.step for m in client.get_metric_history(killed.info.run_id, "reward")), default=0) < 60
    )  # none of the resume's steps
    assert max(m.step for m in client.get_metric_history(finished.info.run_id, "reward")) == 60
    assert json.loads((run / "summary.json").read_text())["status"] == "finished"  # the resumed run's, untouched


# ---- sweeps -------------------------------------------------------------------------------------------
def _spec(tmp_path, name, grid, **base):
    path = tmp_path / f"{name}-{len(list(tmp_path.glob('*.yaml')))}.yaml"
    path.write_text(
        yaml.safe_dump(
            {
                "name": name,
                "base": {"cache_dir": str(CACHE), "max_steps": 3, "stl_window": 1, "baseline_prompts": 8, **base},
                "grid": grid,
                "seeds": [0],
            }
        )
    )
    return path


def _stores(tmp_path):
    return [
        "--storage",
        f"journal:///{tmp_path}/journal.log",
        "--tracking-uri",
        f"sqlite:///{tmp_path}/m.db",
        "--out-root",
        str(tmp_path / "runs"),
    ]


def test_two_sweeps_of_one_name_with_different_grids_started_together_one_is_refused(tmp_path):
    a = _spec(tmp_path, "same", {"loss_type": ["grpo", "bnpo"]})
    b = _spec(tmp_path, "same", {"learning_rate": [1e-4, 3e-4]})
    env = {**os.environ, "PYTHONPATH": f"{ROOT / 'tests'}{os.pathsep}{ROOT}"}
    procs = [
        subprocess.Popen(
            [sys.executable, "-m", "grpo_lab", "sweep", str(p), *_stores(tmp_path)],
            cwd=tmp_path,
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for p in (a, b)
    ]
    results = [(p.wait(), *p.communicate()) for p in procs]
    codes = sorted(code for code, _, _ in results)
    assert codes == [0, 2], results
    refused = next(err for code, _, err in results if code == 2)
    assert "already exists" in refused and "different spec" in refused
    import optuna

    study = optuna.load_study(
        study_name="same",
        storage=optuna.storages.JournalStorage(
            optuna.storages.journal.JournalFileBackend(str(tmp_path / "journal.log"))
        ),
    )
    assert len(study.trials) == 2 and len({tuple(t.params) for t in study.trials}) == 1  # one grid only


@pytest.mark.parametrize(
    "base, flag, needle",
    [
        ({"model": "EMPTY"}, None, "holds no config.json"),
        ({"cache_dir": "/proc/grpo-no-cache", "tiny_pretrain_steps": 3}, None, "cache_dir"),
        ({}, "/proc/grpo-runs", "--out-root"),
    ],
)
def test_a_spec_that_cannot_run_is_refused_before_any_store_is_touched(tmp_path, base, flag, needle):
    if base.get("model") == "EMPTY":
        (tmp_path / "empty-model").mkdir()
        base = {"model": str(tmp_path / "empty-model")}
    spec = _spec(tmp_path, "bad", {"loss_type": ["grpo"]}, **base)
    stores = _stores(tmp_path)
    if flag:
        stores[-1] = flag
    res = grpo_here("sweep", str(spec), *stores, cwd=tmp_path)
    assert res.returncode == 2 and needle in _one_line(res)
    assert not (tmp_path / "journal.log").exists() and not (tmp_path / "m.db").exists()


def test_a_dead_tracking_server_does_not_undo_a_finished_trial(tmp_path):
    from servers import mlflow_server

    spec = _spec(tmp_path, "srv", {"loss_type": ["grpo", "bnpo"]}, max_steps=40)
    env = {
        **os.environ,
        "PYTHONPATH": f"{ROOT / 'tests'}{os.pathsep}{ROOT}",
        "MLFLOW_HTTP_REQUEST_MAX_RETRIES": "0",
        "MLFLOW_HTTP_REQUEST_TIMEOUT": "5",
    }
    with mlflow_server(tmp_path / "server") as url:
        cmd = [
            sys.executable,
            "-m",
            "grpo_lab",
            "sweep",
            str(spec),
            "--workers",
            "1",
            "--storage",
            f"journal:///{tmp_path}/journal.log",
            "--tracking-uri",
            url,
            "--out-root",
            str(tmp_path / "runs"),
        ]
        proc = subprocess.Popen(cmd, cwd=tmp_path, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        first = tmp_path / "runs" / "srv" / "trial-0000" / "metrics.jsonl"
        while proc.poll() is None and not (first.exists() and len(first.read_text().splitlines()) >= 5):
            time.sleep(0.05)
    # the server is gone while trial 0 trains; trial 1 cannot start its MLflow run
    out, err = proc.communicate()
    assert proc.returncode == 1, err[-3000:]
    assert json.loads((first.parent / "summary.json").read_text())["status"] == "finished"
    import optuna

    study = optuna.load_study(
        study_name="srv",
        storage=optuna.storages.JournalStorage(
            optuna.storages.journal.JournalFileBackend(str(tmp_path / "journal.log"))
        ),
    )
    states = {t.number: t.state.name for t in study.trials}
    assert states == {0: "COMPLETE", 1: "FAIL"}, states
    assert "record is incomplete" in study.trials[0].user_attrs["record_error"]


# ---- rewards -------------------------------------------------------------------------------------------
@pytest.mark.parametrize("workers", [0, 2])
@pytest.mark.parametrize("reward, says", [("exit_three", "SystemExit"), ("os_exit_zero", "called os._exit(0)")])
def test_a_reward_that_ends_the_process_fails_the_run_naming_it(tmp_path, workers, reward, says):
    # os._exit in a reward ended `grpo train` with exit 0, no summary.json and the MLflow run RUNNING
    res = grpo(
        "train",
        *TRAIN,
        "--set",
        f"reward_funcs=reward_helpers:{reward}",
        "--set",
        "max_steps=2",
        "--set",
        "stl_window=1",
        "--set",
        f"reward_workers={workers}",
        "--set",
        f"mlflow_tracking_uri=sqlite:///{tmp_path}/m.db",
        "--out",
        str(tmp_path / "run"),
    )
    assert res.returncode == 1
    line = _one_line(res)
    # in a reward worker, os._exit ends that worker: the pool names the function whose call it died in
    ended = says if (workers == 0 or reward == "exit_three") else "crashed its worker process"
    assert f"reward function {reward}" in line and ended in line, line
    assert json.loads((tmp_path / "run" / "summary.json").read_text())["status"] == "failed"
    client, (run,) = _mlflow_runs(tmp_path / "m.db")
    assert run.info.status == "FAILED" and reward in run.data.tags["error"]


@pytest.mark.parametrize("extra", [[], ["--set", "reward_timeout=2"]])
def test_a_reward_whose_values_cannot_come_back_fails_the_run(tmp_path, extra):
    res = grpo(
        "train",
        *TRAIN,
        "--no-mlflow",
        "--set",
        "reward_funcs=reward_helpers:unpicklable",
        "--set",
        "reward_workers=2",
        "--set",
        "max_steps=2",
        "--set",
        "stl_window=1",
        *extra,
        "--out",
        str(tmp_path / "run"),
        timeout=300,
    )
    assert res.returncode == 1
    line = _one_line(res)
    assert "reward function unpicklable returned" in line and "cannot be sent back" in line


def test_a_run_never_finishes_on_timeouts_alone(tmp_path):
    res = grpo(
        "train",
        *TRAIN,
        "--no-mlflow",
        "--set",
        "reward_funcs=reward_helpers:sleepy",
        "--set",
        "reward_workers=2",
        "--set",
        "reward_timeout=0.2",
        "--set",
        "max_steps=2",
        "--set",
        "stl_window=1",
        "--set",
        "prompts_per_step=2",
        "--set",
        "num_generations=2",
        "--out",
        str(tmp_path / "run"),
        timeout=300,
    )
    assert res.returncode == 1
    import re

    assert re.search(r"reward function sleepy timed out on (\d+) of \1 completions of a step", _one_line(res))


# ---- models and stores ---------------------------------------------------------------------------------
def _tiny_folder(tmp_path, name="model") -> Path:
    import shutil

    folder = tmp_path / name
    shutil.copytree(ROOT / "grpo_core" / "tiny_bases" / "addition", folder)
    return folder


def test_a_tokenizer_without_a_pad_token_trains(tmp_path):
    folder = _tiny_folder(tmp_path)
    config = json.loads((folder / "tokenizer_config.json").read_text())
    del config["pad_token"]  # transformers then appends '<|endoftext|>' past the model's embeddings
    (folder / "tokenizer_config.json").write_text(json.dumps(config))
    res = grpo_here(
        "train",
        *TRAIN,
        "--no-mlflow",
        "--set",
        f"model={folder}",
        "--set",
        "max_steps=2",
        "--set",
        "stl_window=1",
        "--out",
        str(tmp_path / "run"),
    )
    assert res.returncode == 0, res.stderr[-3000:]


def test_truncated_or_pickled_weights_are_one_line_and_run_no_code(tmp_path):
    truncated = _tiny_folder(tmp_path, "truncated")
    data = (truncated / "model.safetensors").read_bytes()
    (truncated / "model.safetensors").write_bytes(data[: len(data) // 2])
    pickled = _tiny_folder(tmp_path, "pickled")
    (pickled / "model.safetensors").unlink()
    planted = tmp_path / "pickle-ran"

    class Evil:
        def __reduce__(self):
            return (os.system, (f"touch {planted}",))

    import pickle

    (pickled / "pytorch_model.bin").write_bytes(pickle.dumps(Evil()))
    for folder in (truncated, pickled):
        res = grpo_here(
            "train",
            *TRAIN,
            "--no-mlflow",
            "--set",
            f"model={folder}",
            "--set",
            "max_steps=2",
            "--out",
            str(tmp_path / f"run-{folder.name}"),
        )
        assert res.returncode == 2 and f"model: cannot load '{folder}'" in _one_line(res)
        assert not (tmp_path / f"run-{folder.name}").exists()
    assert not planted.exists()  # the pickle was never executed


def test_a_sweep_whose_places_are_all_given_writes_nothing_in_the_working_folder(tmp_path):
    """--storage, --tracking-uri and --out-root elsewhere, cache_dir left at its default: the cache
    (measured baselines, tiny bases) goes beside the SQLite store, as its artifacts do, and the run's
    config.yaml says so (before, ./results/local/cache of the working folder took it)."""
    work, elsewhere = tmp_path / "work", tmp_path / "elsewhere"
    work.mkdir()
    elsewhere.mkdir()  # (a store's folder must exist)
    spec = tmp_path / "places.yaml"
    spec.write_text(
        yaml.safe_dump(
            {
                "name": "places",
                "base": {"max_steps": 2, "baseline_prompts": 8, "stl_window": 1, "stl_delta": 8},
                "grid": {"beta": [0.0]},
                "seeds": [0],
            }
        )
    )
    res = grpo_here(
        "sweep",
        str(spec),
        "--storage",
        f"journal:///{elsewhere}/j.log",
        "--tracking-uri",
        f"sqlite:///{elsewhere}/mlflow.db",
        "--out-root",
        str(elsewhere / "runs"),
        cwd=work,
    )
    assert res.returncode == 0, res.stderr[-3000:]
    assert list(work.iterdir()) == []
    assert list((elsewhere / "cache" / "baselines").glob("*.json"))  # the baseline it measured, kept there
    config = yaml.safe_load((elsewhere / "runs" / "places" / "trial-0000" / "config.yaml").read_text())
    assert config["cache_dir"] == str(elsewhere / "cache")  # the logged setting is the one used


def test_an_mlflow_store_that_cannot_be_written_is_refused_before_training(tmp_path):
    text = tmp_path / "notes.txt"
    text.write_text("not a database\n")
    res = grpo_here("train", *TRAIN, "--set", f"mlflow_tracking_uri=sqlite:///{text}", "--out", str(tmp_path / "run"))
    assert res.returncode == 2 and "is not a SQLite database" in _one_line(res)
    assert not (tmp_path / "run").exists() and text.read_text() == "not a database\n"
    with small_disk(tmp_path / "ro", "64k", "ro") as ro:
        res = grpo_here(
            "train", *TRAIN, "--set", f"mlflow_tracking_uri=sqlite:///{ro}/m.db", "--out", str(tmp_path / "run")
        )
        assert res.returncode == 2 and "cannot write there (Read-only file system)" in _one_line(res)
    assert not (tmp_path / "run").exists()


def test_one_baseline_prompt_is_allowed_and_trains(tmp_path):
    res = grpo_here(
        "train",
        "--no-progress",
        "--no-mlflow",
        "--set",
        f"cache_dir={tmp_path / 'cache'}",
        "--set",
        "baseline_prompts=1",
        "--set",
        "max_steps=2",
        "--set",
        "stl_window=1",
        "--out",
        str(tmp_path / "run"),
    )
    assert res.returncode == 0, res.stderr[-3000:]
    summary = json.loads((tmp_path / "run" / "summary.json").read_text())
    assert summary["baseline_prompts_used"] >= 2


# ---- values and parsing --------------------------------------------------------------------------------
@pytest.mark.parametrize(
    "setting, needle",
    [
        ("learning_rate=1e400", "not a finite number"),
        (f"learning_rate={10**400}", "not a finite number"),
        ("adam_epsilon=1e300", "(0, 1)"),  # accepted before: Adam's steps vanished and the run exited 0
        ("max_steps=1000000000000000000000000000000", "below 2^63"),
        ("num_threads=99999999999999999999", "below 2^63"),
    ],
)
def test_numbers_that_overflow_are_refused(tmp_path, setting, needle):
    res = grpo_here("train", *TRAIN, "--no-mlflow", "--set", setting, "--out", str(tmp_path / "run"))
    assert res.returncode == 2
    line = _one_line(res)
    assert needle in line and len(line) < 300
    assert not (tmp_path / "run").exists()


def test_parsing_errors_say_what_is_wrong(tmp_path):
    bomb = tmp_path / "bomb.yaml"
    levels = ["a0: &a0 [exact_match, exact_match]"] + [f"a{i}: &a{i} [*a{i - 1}, *a{i - 1}]" for i in range(1, 30)]
    bomb.write_text("\n".join(levels) + "\nreward_funcs: *a29\n")
    nul = tmp_path / "nul.yaml"
    nul.write_bytes(b"loss_type: g\0po\n")
    cases = [
        (["train", str(bomb)], "an alias (*name)"),
        (["train", "--set", "loss_type=grpo", "--set", "loss_type=bnpo"], "--set loss_type: given twice"),
        (["train", str(nul)], "character #x0000 at position"),
        (["train", str(tmp_path)], "is a folder; allowed: a YAML file"),
    ]
    for args, needle in cases:
        started = time.monotonic()
        res = grpo_here(*args, "--no-mlflow", "--out", str(tmp_path / "run"))
        assert res.returncode == 2 and needle in _one_line(res), (args, res.stderr)
        assert time.monotonic() - started < 60  # the alias bomb is refused, not expanded
        assert not (tmp_path / "run").exists()


def test_a_csv_with_a_byte_order_mark_loads_and_a_huge_prompt_is_named(tmp_path):
    bom = tmp_path / "bom.csv"
    bom.write_bytes("\ufeffprompt,answer\n".encode() + "".join(f"{a}+{a}=,{2 * a}\n" for a in range(50)).encode())
    res = grpo_here(
        "train",
        *TRAIN,
        "--no-mlflow",
        "--set",
        f"dataset={bom}",
        "--set",
        "reward_funcs=exact_match",
        "--set",
        "max_steps=2",
        "--set",
        "stl_window=1",
        "--out",
        str(tmp_path / "run"),
    )
    assert res.returncode == 0, res.stderr[-2000:]
    huge = tmp_path / "huge.jsonl"
    # 1 MB (the review's was 10 MB: the same path, a tenth of the tokenizing time)
    huge.write_text(
        "".join(
            json.dumps({"prompt": ("1+1=" * 260_000 if i == 3 else "1+1="), "answer": "2"}) + "\n" for i in range(20)
        )
    )
    res = grpo_here(
        "train",
        *TRAIN,
        "--no-mlflow",
        "--set",
        f"dataset={huge}",
        "--set",
        "reward_funcs=exact_match",
        "--set",
        "max_steps=2",
        "--out",
        str(tmp_path / "run2"),
    )
    assert res.returncode == 2
    line = _one_line(res)
    assert (
        "the longest prompt has 1040000 tokens, and the model has 64 positions" in line
        and "-" not in line.split("allowed:")[1]
    )


# ---- secrets --------------------------------------------------------------------------------------------
@pytest.mark.parametrize(
    "url, secret",
    [
        ("postgresql://grpo:s3/cr3t@db:5432/optuna", "s3/cr3t"),
        ("postgresql://grpo:p@ss@db:5432/optuna", "p@ss"),
        ("postgresql://db:5432/optuna?user=grpo&password=hunter2", "hunter2"),
        ("http://alice:wonder/land@127.0.0.1:1", "wonder/land"),
    ],
)
def test_passwords_are_never_printed(tmp_path, url, secret):
    from grpo_core.util.errors import mask_secrets

    assert secret not in mask_secrets(f"error about '{url}': it failed")
    flag = "--tracking-uri" if url.startswith("http") else "--storage"
    spec = _spec(tmp_path, "s", {"loss_type": ["grpo"]})
    res = grpo_here("sweep", str(spec), flag, url, cwd=tmp_path)
    assert res.returncode == 2 and secret not in res.stderr + res.stdout and "***" in _one_line(res)


def test_basic_auth_in_a_tracking_uri_reaches_the_server(tmp_path):
    from servers import mlflow_server

    with mlflow_server(tmp_path / "server") as url:
        authed = url.replace("http://", "http://alice:s3@cret@")
        res = grpo_here(
            "train",
            *TRAIN,
            "--set",
            "max_steps=2",
            "--set",
            "stl_window=1",
            "--set",
            f"mlflow_tracking_uri={authed}",
            "--out",
            str(tmp_path / "run"),
        )
    assert res.returncode == 0, res.stderr[-2000:]
    assert "s3@cret" not in res.stderr + res.stdout and "Name or service not known" not in res.stderr


def test_a_store_creation_stopped_half_way_leaves_no_broken_store(tmp_path, monkeypatch):
    # MLflow creates its tables in place: stopped half-way (ctrl-C in a first sweep's first seconds),
    # every later open failed on "table logged_models already exists". Now a new SQLite store is built
    # beside its path (from an empty template, itself built beside its path) and linked into place in one step.
    import mlflow.store.db.utils as db_utils
    from mlflow.store.tracking.sqlalchemy_store import SqlAlchemyStore

    from grpo_core.mlflow_store import make_client

    cache = tmp_path / "cache"
    monkeypatch.setenv("XDG_CACHE_HOME", str(cache))  # no template yet: the first store builds it
    stores = tmp_path / "stores"
    stores.mkdir()
    path = stores / "m.db"
    real = db_utils._initialize_tables

    def stopped(engine):  # the first tables made, then the interrupt
        from mlflow.store.db.base_sql_model import Base

        Base.metadata.tables["experiments"].create(engine)
        raise KeyboardInterrupt

    monkeypatch.setattr(db_utils, "_initialize_tables", stopped)
    with pytest.raises(KeyboardInterrupt):  # stopped while the template is built
        make_client(f"sqlite:///{path}").search_experiments()
    assert list(stores.iterdir()) == [] and list((cache / "grpo-lab").iterdir()) == []  # nothing half-made
    monkeypatch.setattr(db_utils, "_initialize_tables", real)
    monkeypatch.setattr(
        SqlAlchemyStore, "_initialize_store_state", lambda self: (_ for _ in ()).throw(KeyboardInterrupt)
    )
    with pytest.raises(KeyboardInterrupt):  # stopped while MLflow opens the copy of the template
        make_client(f"sqlite:///{path}").search_experiments()
    assert list(stores.iterdir()) == []
    monkeypatch.undo()
    monkeypatch.setenv("XDG_CACHE_HOME", str(cache))
    client = make_client(f"sqlite:///{path}")
    assert client.search_experiments()[0].name == "Default"
    assert [p.name for p in (cache / "grpo-lab").iterdir()] == [f"mlflow-{__import__('mlflow').__version__}-empty.db"]


def test_a_store_made_from_the_template_is_the_store_mlflow_makes(tmp_path, monkeypatch):
    import sqlite3

    from mlflow.tracking import MlflowClient

    from grpo_core.mlflow_store import make_client

    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    MlflowClient(tracking_uri=f"sqlite:///{tmp_path / 'by-mlflow.db'}").search_experiments()
    for name in ("first.db", "second.db"):  # the first builds the template, the second copies it
        make_client(f"sqlite:///{tmp_path / name}").search_experiments()

    def schema(path):  # each statement's lines as a set: MLflow's own migrations order a table's CHECK
        with contextlib.closing(sqlite3.connect(path)) as db:  # constraints differently from run to run
            return (
                sorted(
                    (kind, name, sorted(sql.strip().rstrip(")").replace(", \n", "\n").splitlines()) if sql else None)
                    for kind, name, sql in db.execute("SELECT type, name, sql FROM sqlite_master")
                ),
                list(db.execute("SELECT version_num FROM alembic_version")),
                list(db.execute("SELECT experiment_id, name, artifact_location FROM experiments")),
            )

    assert schema(tmp_path / "first.db") == schema(tmp_path / "second.db") == schema(tmp_path / "by-mlflow.db")


def test_recover_ends_a_run_whose_metrics_have_a_malformed_line_before_the_last(tmp_path):
    from mlflow.tracking import MlflowClient
    import socket

    db = f"sqlite:///{tmp_path / 'm.db'}"
    client = MlflowClient(tracking_uri=db)
    exp = client.create_experiment("e", artifact_location=(tmp_path / "artifacts").as_uri())
    folder = tmp_path / "run"
    folder.mkdir()
    (folder / "metrics.jsonl").write_text(
        json.dumps({"step": 1, "reward": 0.5})
        + "\n"
        + '{"step": 2, "rew\n'
        + json.dumps({"step": 3, "reward": 0.7})
        + "\n"
    )
    dead = f"{socket.gethostname()}:999999:12345"
    run_id = client.create_run(exp, run_name="r", tags={"owner": dead, "run_dir": str(folder)}).info.run_id
    res = grpo_here("recover", "--tracking-uri", db)
    assert res.returncode == 0 and "1 run(s) ended, 0 left alone" in res.stdout, res.stdout + res.stderr
    run = client.get_run(run_id)
    assert (
        run.info.status == "KILLED"
        and "1 malformed line(s) of metrics.jsonl skipped" in run.data.tags["failure_reason"]
    )
    assert [m.step for m in client.get_metric_history(run_id, "reward")] == [1, 3]
    assert json.loads((folder / "summary.json").read_text())["status"] == "killed"


def test_recover_after_a_sigkilled_sweep_ends_its_parent_run_too(tmp_path):
    from mlflow.tracking import MlflowClient

    spec = tmp_path / "s.yaml"
    spec.write_text(
        yaml.safe_dump(
            {
                "name": "s",
                "base": {"cache_dir": str(CACHE), "max_steps": 400, "stl_window": 2, "baseline_prompts": 8},
                "grid": {"loss_type": ["grpo"]},
                "seeds": [0],
            }
        )
    )
    db = f"sqlite:///{tmp_path / 'm.db'}"
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "grpo_lab",
            "sweep",
            str(spec),
            "--tracking-uri",
            db,
            "--storage",
            f"journal:///{tmp_path}/j.log",
            "--out-root",
            str(tmp_path / "runs"),
        ],
        cwd=tmp_path,
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
    )
    metrics = tmp_path / "runs" / "s" / "trial-0000" / "metrics.jsonl"
    deadline = time.monotonic() + 180
    while time.monotonic() < deadline and not (metrics.is_file() and metrics.read_text().count("\n") >= 2):
        time.sleep(0.5)
    os.killpg(proc.pid, signal.SIGKILL)
    proc.wait()
    res = grpo_here("recover", "--tracking-uri", db)
    assert res.returncode == 0 and "2 run(s) ended, 0 left alone" in res.stdout, res.stdout + res.stderr
    client = MlflowClient(tracking_uri=db)
    runs = client.search_runs([client.get_experiment_by_name("s").experiment_id])
    assert sorted(r.data.tags.get("sweep_role", "trial") for r in runs) == ["parent", "trial"]
    assert all(r.info.status == "KILLED" for r in runs)


def test_recover_names_a_run_whose_process_is_alive_and_leaves_it_running(tmp_path):
    """A run in progress is never ended; `grpo recover` says it saw it (it said "0 left alone")."""
    from mlflow.tracking import MlflowClient

    from grpo_core.record.provenance import owner_id

    db = f"sqlite:///{tmp_path / 'm.db'}"
    client = MlflowClient(tracking_uri=db)
    exp = client.create_experiment("e", artifact_location=(tmp_path / "artifacts").as_uri())
    run = client.create_run(exp, run_name="live", tags={"owner": owner_id(), "run_dir": str(tmp_path)}).info.run_id
    res = grpo_here("recover", "--tracking-uri", db)
    assert res.returncode == 0, res.stderr
    assert f"left RUNNING: live: still running (pid {os.getpid()} on this host)" in res.stdout
    assert "0 run(s) ended, 1 left alone" in res.stdout and client.get_run(run).info.status == "RUNNING"


# ---- values that passed validation and failed later ---------------------------------------
@pytest.mark.parametrize(
    "settings, key",
    [
        (["loss_type=sapo", "sapo_temperature_pos=1e308"], "sapo_temperature_pos"),  # a 39-line overflow traceback
        (["temperature=1e-308"], "temperature"),  # below float32's smallest normal: 0 in a tensor
        (["use_peft=true", f"lora_r={10**12}"], "lora_r"),  # the allocator's traceback
        (["use_peft=true", "lora_r=129"], "lora_r"),  # past the tiny model's hidden size (128)
    ],
)
def test_values_past_what_can_work_are_refused(tmp_path, settings, key):
    res = grpo_here(
        "train", *TRAIN, "--no-mlflow", *[a for s in settings for a in ("--set", s)], "--out", str(tmp_path / "run")
    )
    assert res.returncode == 2
    assert _one_line(res).startswith(f"grpo: error: {key}: got ") and not (tmp_path / "run").exists()


def test_a_model_that_is_not_a_causal_lm_is_refused_before_anything_starts(tmp_path):
    folder = tmp_path / "bert"
    folder.mkdir()
    (folder / "config.json").write_text(
        json.dumps({"model_type": "bert", "architectures": ["BertForMaskedLM"], "hidden_size": 32})
    )
    res = grpo_here("train", *TRAIN, "--no-mlflow", "--set", f"model={folder}", "--out", str(tmp_path / "run"))
    assert res.returncode == 2 and "not a causal language model" in _one_line(res)
    assert not (tmp_path / "run").exists()


# ---- datasets -----------------------------------------------------------------------------------
@pytest.mark.parametrize(
    "rows, kinds",
    [
        ('{"prompt": "1+1=", "answer": 2}\n{"prompt": "2+2=", "answer": "four"}\n', "numbers (row 1), text (row 2)"),
        ('{"prompt": "1+1=", "answer": 2}\n{"prompt": "2+2=", "answer": true}\n', "true/false (row 2)"),
        ('{"prompt": "1+1=", "answer": [2]}\n{"prompt": "2+2=", "answer": [4]}\n', "lists (row 1)"),
    ],
)
def test_answers_of_mixed_kinds_are_named(tmp_path, rows, kinds):
    data = tmp_path / "rows.jsonl"
    data.write_text(rows)
    res = grpo_here("train", *TRAIN, "--no-mlflow", "--set", f"dataset={data}", "--out", str(tmp_path / "run"))
    assert res.returncode == 2
    line = _one_line(res)
    assert line.startswith("grpo: error: answer_column:") and kinds in line


def test_a_json_file_keeps_its_types(tmp_path):
    from grpo_core.tasks.catalog import load_dataset_rows

    data = tmp_path / "rows.json"  # datasets' loader cast the column to one type: "007" became 7
    data.write_text('[{"prompt": "a", "answer": "007"}, {"prompt": "b", "answer": "12"}]')
    assert [r["answer"] for r in load_dataset_rows(str(data), "prompt", "answer")] == ["007", "12"]


@pytest.mark.parametrize("key", ["dataset", "model"])
def test_a_hub_id_where_the_hub_cannot_be_reached_fails_at_once(tmp_path, monkeypatch, key):
    from servers import free_port

    monkeypatch.setenv("HF_ENDPOINT", f"http://127.0.0.1:{free_port()}")  # nothing listens there
    for var in (
        "HF_HUB_OFFLINE",
        "HF_DATASETS_OFFLINE",
        "TRANSFORMERS_OFFLINE",
        "HTTPS_PROXY",
        "https_proxy",
        "ALL_PROXY",
        "all_proxy",
    ):
        monkeypatch.delenv(var, raising=False)
    started = time.perf_counter()
    res = grpo_here(
        "train", *TRAIN, "--no-mlflow", "--set", f"{key}=someone/nothing-here", "--out", str(tmp_path / "run")
    )
    assert res.returncode == 2 and time.perf_counter() - started < 20  # the libraries' retries took ~30 s
    line = _one_line(res)
    assert line.startswith(f"grpo: error: {key}: 'someone/nothing-here' is a hub id") and "cannot be reached" in line


# ---- checkpoints and run folders that point outside ---------------------------------------------
@pytest.fixture(scope="module")
def checkpointed_run(tmp_path_factory):
    """A finished 2-step run with its checkpoint, copied by each test that changes it."""
    folder = tmp_path_factory.mktemp("ckpt") / "run"
    res = grpo_here(
        "train",
        *TRAIN,
        "--no-mlflow",
        "--set",
        "max_steps=2",
        "--set",
        "save_steps=2",
        "--set",
        "stl_window=1",
        "--out",
        str(folder),
    )
    assert res.returncode == 0, res.stderr[-3000:]
    return folder


def _resume(run: Path):
    return grpo_here(
        "train",
        *TRAIN,
        "--no-mlflow",
        "--set",
        "max_steps=2",
        "--set",
        "save_steps=2",
        "--set",
        "stl_window=1",
        "--set",
        f"resume_from_checkpoint={run / 'checkpoint-2'}",
        "--out",
        str(run),
    )


def test_a_checkpoint_config_with_a_python_tag_is_one_line_naming_it(tmp_path, checkpointed_run):
    import shutil

    run = Path(shutil.copytree(checkpointed_run, tmp_path / "run"))
    marker = tmp_path / "ran"
    with open(run / "checkpoint-2" / "config.yaml", "a") as f:
        f.write(f"x: !!python/object/apply:os.system ['touch {marker}']\n")
    res = _resume(run)
    assert res.returncode == 2
    line = _one_line(res)
    assert str(run / "checkpoint-2" / "config.yaml") in line and not marker.exists()


@pytest.mark.parametrize("link", ["metrics.jsonl", "completions.jsonl", "checkpoint-2"])
def test_a_run_folder_with_a_link_pointing_outside_is_refused(tmp_path, checkpointed_run, link):
    import shutil

    run = Path(shutil.copytree(checkpointed_run, tmp_path / "run"))
    outside = tmp_path / "outside"
    shutil.move(str(run / link), str(outside))
    (run / link).symlink_to(outside)
    before = sorted((p.name, p.stat().st_mtime_ns) for p in tmp_path.rglob("*") if not p.is_symlink())
    res = _resume(run)
    assert res.returncode == 2
    assert f"{link} is a symbolic link" in _one_line(res)
    assert sorted((p.name, p.stat().st_mtime_ns) for p in tmp_path.rglob("*") if not p.is_symlink()) == before


def test_a_lock_file_that_is_a_link_is_refused_in_a_new_run(tmp_path):
    outside = tmp_path / "outside.txt"
    outside.write_text("mine\n")
    (tmp_path / "run").mkdir()
    (tmp_path / "run" / ".grpo-run.lock").symlink_to(outside)
    res = grpo_here("train", *TRAIN, "--no-mlflow", "--set", "max_steps=1", "--out", str(tmp_path / "run"))
    assert res.returncode == 2 and "is a symbolic link" in _one_line(res) and outside.read_text() == "mine\n"


# ---- a spec's quick section --------------------------------------------------------------------
@pytest.mark.parametrize(
    "quick, needle",
    [
        ("{grid: [1]}", "quick.grid: [1]; allowed: a mapping"),
        ("{grid: {learning_rate: [0.5]}}", "quick.grid.learning_rate: [0.5]; allowed: a non-empty sub-list"),
        ("{grid: {beta: [0.0]}}", "quick.grid.beta: not a grid axis"),
        ("{max_steps: two}", "quick.max_steps: 'two'"),
        ("{seeds: 3}", "quick.seeds: 3"),
    ],
)
def test_a_bad_quick_section_is_one_line(tmp_path, quick, needle):
    experiments = tmp_path / "experiments"
    experiments.mkdir()
    (experiments / "c.yaml").write_text(
        f"name: q\nclaim: C2\nbase: {{max_steps: 4}}\ngrid: {{learning_rate: [1.0e-4, 1.0e-3]}}\nseeds: [0]\n"
        f"replication_seeds: [1]\nreport: {{tests: [{{kind: paired, statement: s, axis: learning_rate, "
        f"treatment: [1.0e-3], control: 1.0e-4, direction: lower}}]}}\nquick: {quick}\n"
    )
    for args in (["reproduce", "--quick"], ["reproduce", "--report-only"]):
        res = grpo_here(*args, "--experiments", str(experiments), "--out", str(tmp_path / "out"))
        assert res.returncode == 2 and needle in _one_line(res), res.stderr
    assert not (tmp_path / "out").exists()


def _children(pid: int) -> list[int]:
    """The processes whose parent is `pid` (Linux /proc)."""
    found = []
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if int(fields[1]) == pid:
            found.append(int(stat.parent.name))
    return found


def _alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return False
    return state != "Z"


@pytest.mark.longest  # ~35 s
@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="Linux's parent-death signal and /proc")
def test_a_sigterm_while_a_run_is_recorded_is_held_not_lost(monkeypatch):
    """The SIGTERM a worker gets when its sweep dies (parent-death signal) can come while it writes a
    finished run's record. It was ignored there, and lost: the worker went on claiming trials as an
    orphan (the killed-search test below caught one claiming a trial 60 s after the kill)."""
    from grpo_core.run import _sigterm_held, take_held_sigterm
    from grpo_core.util.errors import Terminated, handle_sigterm

    before = signal.getsignal(signal.SIGTERM)
    monkeypatch.setattr(sys, "unraisablehook", sys.unraisablehook)  # (handle_sigterm sets its own)
    try:
        handle_sigterm()
        take_held_sigterm()
        with _sigterm_held():
            os.kill(os.getpid(), signal.SIGTERM)
            time.sleep(0.05)  # (the handler runs here, in this thread)
        assert take_held_sigterm() is True and take_held_sigterm() is False
        with pytest.raises(Terminated):  # outside the record, SIGTERM acts at once, as before
            os.kill(os.getpid(), signal.SIGTERM)
            time.sleep(0.05)
    finally:
        signal.signal(signal.SIGTERM, before)


def test_a_sigterm_after_a_peer_died_is_ignored_until_the_next_command(monkeypatch):
    """A data-parallel run's survivor that found its peer dead records the run as killed, naming it,
    and leaves with 1; the launcher's SIGTERM to it, which can come after the record, had ended it
    as Terminated (143) instead."""
    from grpo_core.run import _sigterm_held, take_held_sigterm
    from grpo_core.util.errors import Terminated, handle_sigterm, ignore_sigterm

    before = signal.getsignal(signal.SIGTERM)
    monkeypatch.setattr(sys, "unraisablehook", sys.unraisablehook)  # (handle_sigterm sets its own)
    try:
        handle_sigterm()
        with _sigterm_held():  # as the run does: the peer is found under the hold
            ignore_sigterm()
        assert signal.getsignal(signal.SIGTERM) is not signal.SIG_IGN  # the hold put the handler back
        for _ in range(2):  # during the record, and after it (the handler was put back)
            with _sigterm_held():
                pass
            os.kill(os.getpid(), signal.SIGTERM)
            time.sleep(0.05)  # (the handler runs here, in this thread: it raises nothing)
        take_held_sigterm()
        handle_sigterm()  # a new command: SIGTERM acts again
        with pytest.raises(Terminated):
            os.kill(os.getpid(), signal.SIGTERM)
            time.sleep(0.05)
    finally:
        handle_sigterm()  # (the flag cleared for the tests after this one)
        signal.signal(signal.SIGTERM, before)


def _terminated_at_commit(call, monkeypatch, after: str = "") -> None:
    """Run `call` with SIGTERM sent (once) as SQLAlchemy's `_do_commit` starts, after a call of a
    function named `after` in MLflow's SQL store when given; it must raise Terminated there."""
    from grpo_core.util.errors import Terminated, handle_sigterm

    sent, armed = [], [not after]

    def send_at(frame, event, arg):  # the signal's handler runs in there
        if event == "call" and frame.f_code.co_name == after and "sqlalchemy_store" in frame.f_code.co_filename:
            armed.append(True)
        if event == "call" and frame.f_code.co_name == "_do_commit" and any(armed) and not sent:
            sent.append(frame.f_code.co_filename)
            os.kill(os.getpid(), signal.SIGTERM)

    before, tracer = signal.getsignal(signal.SIGTERM), sys.gettrace()
    monkeypatch.setattr(sys, "unraisablehook", sys.unraisablehook)  # (handle_sigterm sets its own)
    try:
        handle_sigterm()
        with pytest.raises(Terminated):
            sys.settrace(send_at)
            try:
                call()
            finally:
                sys.settrace(tracer)
    finally:
        handle_sigterm()  # (the first SIGTERM set it to be ignored while a record is written)
        signal.signal(signal.SIGTERM, before)
    assert sent and "sqlalchemy" in sent[0], sent  # it came where aimed


def test_a_sigterm_during_a_store_call_is_raised_when_the_call_returns(tmp_path, monkeypatch):
    """SIGTERM landing inside SQLAlchemy during an MLflow call, at the start of a transaction's
    commit, was turned into MlflowException (an AssertionError in SQLAlchemy's error handling): the
    interrupt was lost and a killed trial recorded as failed (likely how a search's was, with
    "database is locked", in a fresh-clone CI run of 2026-11-30). The client's calls run whole: the
    signal is raised when the call returns, its write done, and the store free for other writers."""
    import sqlite3

    from grpo_core.mlflow_store import make_client

    db = tmp_path / "mlflow.db"
    client = make_client(f"sqlite:///{db}")
    experiment = client.create_experiment("interrupted")
    interrupt = signal.getsignal(signal.SIGINT)
    _terminated_at_commit(lambda: client.create_run(experiment), monkeypatch)
    assert [r.info.status for r in client.search_runs([experiment])] == ["RUNNING"]  # the call ran whole
    probe = sqlite3.connect(db, timeout=0.5)
    try:
        probe.execute("BEGIN EXCLUSIVE")  # no lock kept by the interrupted call
        probe.rollback()
    finally:
        probe.close()
    assert signal.getsignal(signal.SIGINT) is interrupt  # Ctrl-C's handler put back after the call


def test_a_sigterm_while_a_run_is_created_ends_that_run(tmp_path, monkeypatch):
    """SIGTERM that comes while the logger creates its MLflow run (inside the store's commit) is
    raised once the logger keeps the run's id, so the run is ended as KILLED at once; it had been
    raised as the call returned, before the id was kept, leaving the run RUNNING until `grpo recover`."""
    from grpo_core.mlflow_store import make_client
    from grpo_core.mlflow_logging import MlflowRunLogger

    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    experiment = make_client(uri).create_experiment("interrupted")  # (only the run's commit is aimed at)
    _terminated_at_commit(
        lambda: MlflowRunLogger(uri, "interrupted", "run", {"max_steps": 4}), monkeypatch, after="create_run"
    )
    runs = make_client(uri).search_runs([experiment])
    assert [(r.info.status, r.data.tags.get("status")) for r in runs] == [("KILLED", "killed")]
    assert not [t for t in threading.enumerate() if t.name.startswith("mlflow-writer")]  # its writer ended


def test_a_sweep_stopped_while_its_parent_run_is_created_ends_that_run_and_resumes(tmp_path, monkeypatch):
    """SIGTERM that comes while a sweep creates its MLflow parent run is raised once the sweep keeps
    the run's id: the parent is ended KILLED, nothing is trained, and the rerun makes a new parent and
    finishes (the signal had been raised as the call returned, leaving the parent RUNNING)."""
    import mlflow

    real_create, sent = mlflow.MlflowClient.create_run, []

    def create_run(self, *args, **kwargs):  # the signal comes during the call, as it returns
        run = real_create(self, *args, **kwargs)
        if (kwargs.get("tags") or {}).get("sweep_role") == "parent" and not sent:
            sent.append(run.info.run_id)
            os.kill(os.getpid(), signal.SIGTERM)
        return run

    monkeypatch.setattr(sys, "unraisablehook", sys.unraisablehook)  # (handle_sigterm sets its own)
    monkeypatch.setattr(mlflow.MlflowClient, "create_run", create_run)
    spec = tmp_path / "spec.yaml"
    spec.write_text(
        yaml.safe_dump(
            {
                "name": "stopped-parent",
                "grid": {"beta": [0.0]},
                "seeds": [0],
                "base": {"cache_dir": str(CACHE), "max_steps": 2, "stl_window": 1, "baseline_prompts": 8},
            }
        )
    )
    done = grpo_here("sweep", spec, "--workers", "1", *_stores(tmp_path), cwd=tmp_path)
    assert sent and done.returncode == 143, done.stderr[-2000:]
    assert done.stderr.count("grpo sweep: interrupted; run the same command again to resume") == 1, done.stderr[-2000:]
    client = mlflow.MlflowClient(f"sqlite:///{tmp_path}/m.db")
    experiments = [e.experiment_id for e in client.search_experiments()]
    assert [(r.info.run_id, r.info.status) for r in client.search_runs(experiments)] == [(sent[0], "KILLED")]
    again = grpo_here("sweep", spec, "--workers", "1", *_stores(tmp_path), cwd=tmp_path)
    assert again.returncode == 0, again.stderr[-2000:]
    runs = client.search_runs(experiments)
    parents = {r.info.run_id: r.info.status for r in runs if r.data.tags.get("sweep_role") == "parent"}
    assert len(parents) == 2 and parents.pop(sent[0]) == "KILLED" and list(parents.values()) == ["FINISHED"], parents
    assert {r.info.status for r in runs} == {"KILLED", "FINISHED"}


@pytest.mark.parametrize("how", ["SIGKILL", "SIGTERM"])
def test_a_random_search_killed_and_resumed_trains_no_point_twice_and_leaves_no_worker(tmp_path, how):
    """SIGKILL (or SIGTERM, as kill, Slurm and docker send) to a random search's main process
    mid-trial: its workers end with it (after SIGKILL they had run on as orphans, claiming new
    trials beside the resume); the resume retries the killed trials at their points and draws new
    ones for the rest (the seeded sampler had drawn the finished points again), so no parameter
    point is trained twice and the budget is spent once. Once a trial has finished, the others are held
    at their next reward (reward_helpers:held_exact_match) until both workers wait there: the kill lands
    mid-trial however slowly the machine runs the test (a CI run whose test process was descheduled past
    a whole 16-step trial had sent it after the budget was spent, and nothing was left to resume)."""
    import datetime

    import optuna
    from optuna.trial import TrialState

    spec = tmp_path / "search.yaml"
    spec.write_text(
        yaml.safe_dump(
            {
                "name": "killed",
                "base": {
                    "cache_dir": str(CACHE),
                    "max_steps": 16,
                    "stl_window": 2,
                    "baseline_prompts": 8,
                    "reward_funcs": ["reward_helpers:held_exact_match"],
                },
                "search": {"learning_rate": {"low": 1e-5, "high": 1e-3, "log": True}},
                "sampler": "random",
                "n_trials": 5,
                "seeds": [0],
            }
        )
    )
    hold = tmp_path / "hold"  # while it exists, each reward call waits (and marks its process: hold.<pid>)
    env = {**os.environ, "PYTHONPATH": f"{ROOT / 'tests'}{os.pathsep}{ROOT}", "GRPO_TEST_HOLD": str(hold)}
    cmd = [sys.executable, "-m", "grpo_lab", "sweep", str(spec), "--workers", "2", *_stores(tmp_path)]
    log = open(tmp_path / "first.log", "w")  # what the stopped invocation said (shown if the test fails)
    main = subprocess.Popen(cmd, cwd=tmp_path, env=env, stdout=log, stderr=subprocess.STDOUT)
    journal = optuna.storages.JournalStorage(optuna.storages.journal.JournalFileBackend(str(tmp_path / "journal.log")))
    workers: list[int] = []
    try:
        deadline = time.monotonic() + 300
        states: list = []
        while TrialState.COMPLETE not in states:  # one trial finished: the others are held at their next reward
            try:
                states = [t.state for t in optuna.load_study(study_name="killed", storage=journal).trials]
            except KeyError:  # the sweep has not created its study yet
                pass
            assert main.poll() is None and time.monotonic() < deadline, states
            time.sleep(0.2)
        held = reward_helpers.hold_at_next_reward(hold, lambda: main.poll() is None, count=2)  # both, mid-trial
        trials = optuna.load_study(study_name="killed", storage=journal).trials
        states = [t.state for t in trials]
        assert states.count(TrialState.COMPLETE) >= 1 and states.count(TrialState.RUNNING) == 2, states
        running = {t.number for t in trials if t.state == TrialState.RUNNING}
        workers = [p for p in _children(main.pid) if "python" in Path(f"/proc/{p}/cmdline").read_text(errors="replace")]
        assert len(workers) >= 2 and held <= set(workers), (held, workers)
        killed_at = datetime.datetime.now()
        main.send_signal(getattr(signal, how))
        main.wait()
        # a worker ends once it has recorded its trial as failed; that record may wait for the journal's lock,
        # which a main process killed while it appended to the journal holds until its grace period (30 s) runs out
        deadline = time.monotonic() + 75
        while any(_alive(p) for p in workers):
            assert time.monotonic() < deadline, "a worker outlived its sweep"
            time.sleep(0.5)
        trials = optuna.load_study(study_name="killed", storage=journal).trials
        before = len(trials)  # no trial claimed after the kill (an orphan finishes its trial and claims the next)
        late = [
            (t.number, t.state.name, (t.datetime_start - killed_at).total_seconds(), t.user_attrs.get("owner"))
            for t in trials
            if t.datetime_start > killed_at + datetime.timedelta(seconds=1)
        ]
        assert not late, (late, workers, (tmp_path / "first.log").read_text()[-3000:])
        said = (tmp_path / "first.log").read_text()
        # each worker's end says one line: no traceback (a signal during its exit), and its killed trial is
        # recorded as killed, not failed by the store (a read the kill interrupted held SQLite's lock)
        assert "Traceback" not in said and "database is locked" not in said, said[-3000:]
        hold.unlink()  # the resume trains unheld
        done = subprocess.run(cmd, cwd=tmp_path, env=env, capture_output=True, text=True)
        assert done.returncode == 0, done.stderr[-2000:]
    finally:
        if main.poll() is None:
            main.kill()
        for pid in workers:  # never leave a worker behind, whatever failed
            with contextlib.suppress(OSError):
                os.kill(pid, signal.SIGKILL)
        log.close()
    trials = optuna.load_study(study_name="killed", storage=journal).trials
    ran = [t for t in trials if t.state in (TrialState.COMPLETE, TrialState.PRUNED)]
    # (what a failure needs to be read: each trial as the journal holds it, and what both invocations said)
    told = (
        [(t.number, t.state.name, t.params, t.user_attrs, str(t.datetime_start)) for t in trials],
        (tmp_path / "first.log").read_text()[-2000:],
        done.stderr[-2000:],
    )
    assert len(ran) == 5 and len(trials) > before, told  # the budget spent once, by trials that ran
    points = [t.params["learning_rate"] for t in ran]
    assert len(set(points)) == len(points), points  # no point bought twice
    killed = [t for t in trials if t.state == TrialState.FAIL]
    # the kill fails the trials that were running (one at its last step may be recorded complete by its worker
    # just after the kill, before the worker notices: it is kept, not trained again); each killed trial runs
    # again, at its own point; one killed in its claim, before it drew a point, has none to run again (its
    # budget was not spent: a new point is drawn instead)
    # (a trial may also start between the test's last look and the kill, or be claimed by a worker as the
    # signal reaches it: the same second of slack as `late` above allows)
    started = running | {
        t.number for t in trials if t.datetime_start and t.datetime_start <= killed_at + datetime.timedelta(seconds=1)
    }
    assert killed and {t.number for t in killed} <= started
    assert all(
        t.state in (TrialState.FAIL, TrialState.COMPLETE, TrialState.PRUNED) for t in trials if t.number in running
    )
    assert sorted(t.user_attrs.get("retry_of") for t in ran if "retry_of" in t.user_attrs) == sorted(
        t.number for t in killed if t.params
    )
    for t in ran:  # each trial that ran has its run folder, as its state says
        summary = json.loads(
            (tmp_path / "runs" / "killed" / f"trial-{t.number:04d}" / "seed-0" / "summary.json").read_text()
        )
        assert summary["status"] == ("finished" if t.state == TrialState.COMPLETE else "pruned")


@pytest.mark.parametrize("when", ["before", "after"])
@pytest.mark.parametrize("mode", ["search", "grid"])
def test_a_trial_killed_while_reading_the_store_is_recorded_as_killed_and_stops_the_sweep(
    tmp_path, monkeypatch, mode, when
):
    """SIGTERM (or Ctrl-C) raised inside a read from the SQLite store as a seed's run is being
    created, before or just after the run exists: the interrupted read's cursor, still referenced by
    the exception's frames, kept SQLite's shared lock, so every record written after it waited out
    the busy timeout (20 s) and failed with "database is locked": a search's trial was recorded as
    failed, that error replaced the interrupt and the worker went on to its next trial; a grid's
    sweep ended in a traceback, its parent run left running. A run stopped just after it was
    created was left running (until `grpo recover`)."""
    import threading

    import mlflow
    import optuna
    import sqlalchemy
    from optuna.trial import TrialState

    from grpo_core.mlflow_logging import MlflowRunLogger
    from grpo_core.util.errors import Terminated
    from sweeps.driving.storage import open_storage

    armed, made = [None], []  # armed: None, "any read", or "after" (the run's creation)

    def interrupt(conn, cursor, statement, *rest):  # in the main thread, where a signal's handler runs
        if (
            armed[0] == "any read"
            and threading.current_thread() is threading.main_thread()
            and statement.lstrip().upper().startswith("SELECT")
        ):  # mid-result, as a signal lands
            armed[0] = None
            raise Terminated()

    real_create = mlflow.MlflowClient.create_run

    def create_run(self, *args, **kwargs):
        run = real_create(self, *args, **kwargs)
        if armed[0] == "after":
            armed[0] = "any read"
        return run

    real_init = MlflowRunLogger.__init__
    first_seed_run = 2 if mode == "search" else 1  # a search's trial has its own MLflow run, made first

    def init(self, *args, **kwargs):
        made.append(kwargs.get("run_name"))
        if len(made) == first_seed_run:  # killed as the first seed's run is created
            armed[0] = "any read" if when == "before" else "after"
        real_init(self, *args, **kwargs)

    monkeypatch.setattr(MlflowRunLogger, "__init__", init)
    monkeypatch.setattr(mlflow.MlflowClient, "create_run", create_run)
    base = {"cache_dir": str(CACHE), "max_steps": 2, "stl_window": 1, "baseline_prompts": 8}
    space = (
        {
            "search": {"learning_rate": {"low": 1e-5, "high": 1e-3, "log": True}},
            "sampler": "random",
            "n_trials": 2,
            "seeds": [0, 1],
        }
        if mode == "search"
        else {"grid": {"beta": [0.0, 0.04]}, "seeds": [0]}
    )
    spec = tmp_path / "spec.yaml"
    spec.write_text(yaml.safe_dump({"name": "killed-read", "base": base, **space}))
    sqlalchemy.event.listen(sqlalchemy.engine.Engine, "after_cursor_execute", interrupt)
    try:
        done = grpo_here("sweep", spec, "--workers", "1", *_stores(tmp_path), cwd=tmp_path)
    finally:
        sqlalchemy.event.remove(sqlalchemy.engine.Engine, "after_cursor_execute", interrupt)
    assert len(made) == first_seed_run and armed[0] is None, made  # it came where aimed; no other trial started
    assert done.returncode == 143, done.stderr[-2000:]
    assert "database is locked" not in done.stderr and "not logged to MLflow" not in done.stderr, done.stderr[-2000:]
    trials = optuna.load_study(
        study_name="killed-read", storage=open_storage(f"journal:///{tmp_path}/journal.log")
    ).trials
    assert [(t.state, t.user_attrs.get("error")) for t in trials] == [(TrialState.FAIL, "interrupted (SIGTERM)")]
    client = mlflow.MlflowClient(f"sqlite:///{tmp_path}/m.db")
    runs = client.search_runs([e.experiment_id for e in client.search_experiments()])
    roles = sorted(r.data.tags.get("sweep_role", "seed") for r in runs)
    assert roles == sorted(["parent", *(["trial"] if mode == "search" else []), *(["seed"] if when == "after" else [])])
    assert all(r.info.status == "KILLED" for r in runs), [(r.info.run_name, r.info.status) for r in runs]


def test_a_read_cursor_left_in_a_reference_cycle_is_freed_before_the_record(tmp_path):
    """The cursor of a read that an interrupt stopped can outlive the exception's cleared frames in
    a reference cycle (an SQLAlchemy execution context and its result held it, in 2 of 16 kills
    of a two-worker search): its shared lock then made the record wait out SQLite's busy timeout
    and fail with "database is locked". release_frames frees it before the record is written."""
    import gc
    import sqlite3

    from grpo_core.util.errors import Terminated, release_frames

    store = tmp_path / "store.db"
    with contextlib.closing(sqlite3.connect(store)) as setup:
        setup.execute("create table t (x)")
        setup.executemany("insert into t values (?)", [(1,), (2,)])
        setup.commit()

    class Context:  # in a cycle with itself, as the execution context and its result are
        pass

    def read():
        context = Context()
        context.me = context
        context.cursor = sqlite3.connect(store).execute("select x from t")
        context.cursor.fetchone()  # mid-result: the read holds SQLite's shared lock
        raise Terminated()

    writer = sqlite3.connect(store, timeout=0.05, isolation_level=None)  # each write commits at once
    gc.disable()  # (an automatic collection at the wrong moment would hide what is tested)
    try:
        with pytest.raises(Terminated) as stopped:
            read()
        with pytest.raises(sqlite3.OperationalError, match="database is locked"):  # the lock the record met
            writer.execute("insert into t values (3)")
        release_frames(stopped.value)
        writer.execute("insert into t values (3)")
    finally:
        gc.enable()
        writer.close()


def test_a_sigterm_that_lands_while_release_frames_collects_is_raised_after_it_not_lost(monkeypatch):
    """release_frames runs the garbage collector; a SIGTERM whose handler raises, landing in a
    finalizer the collector runs, was printed as "Exception ignored" and lost (a data-parallel
    launcher's, in a test). It is held during the collection and raised after it."""
    import gc

    from grpo_core.util.errors import Terminated, handle_sigterm, release_frames

    lost = []
    armed = [True]

    class Finalized:  # garbage in a cycle: its finalizer runs inside the collection
        def __del__(self):
            if armed[0]:  # (not once the test is over: a later collection would end pytest)
                os.kill(os.getpid(), signal.SIGTERM)
                time.sleep(0.05)  # (the signal's handler runs here, in this thread, unless it is held)

    before, interrupt = signal.getsignal(signal.SIGTERM), signal.getsignal(signal.SIGINT)
    monkeypatch.setattr(sys, "unraisablehook", sys.unraisablehook)  # (put back after the test, as it was)
    gc.disable()
    try:
        handle_sigterm()
        monkeypatch.setattr(sys, "unraisablehook", lost.append)  # (not handle_sigterm's, which sends it again)
        garbage = Finalized()
        garbage.me = garbage
        del garbage
        with pytest.raises(Terminated):
            release_frames(ValueError("a run failed"))
        assert lost == []
        assert signal.getsignal(signal.SIGINT) is interrupt  # the handlers put back
    finally:
        armed[0] = False
        gc.enable()
        signal.signal(signal.SIGTERM, before)


_LOST_IN_A_FINALIZER = """
import gc, os, signal, sys, time
from grpo_core.util.errors import Terminated, handle_sigterm
handle_sigterm()
signal.signal(signal.SIGINT, signal.default_int_handler)  # (a parent that ignores Ctrl-C, pytest-xdist's worker, passes that on)
class Finalized:  # garbage in a cycle: its finalizer runs inside the collection
    def __del__(self):
        if self.signum:
            os.kill(os.getpid(), self.signum)
            time.sleep(0.05)  # (the signal's handler runs here, inside the finalizer)
        else:
            raise ValueError("a finalizer's own error")
garbage = Finalized()
garbage.signum, garbage.me = int(sys.argv[1]), garbage
del garbage
try:
    gc.collect()
    deadline = time.monotonic() + 5
    while time.monotonic() < deadline:
        time.sleep(0.01)
    print("went on")
except KeyboardInterrupt as exc:
    print("interrupted by", type(exc).__name__)
"""


@pytest.mark.parametrize(
    "signum,raised",
    [(signal.SIGTERM, "Terminated"), (signal.SIGINT, "KeyboardInterrupt"), (0, None)],
    ids=["SIGTERM", "SIGINT", "not_an_interrupt"],
)
def test_an_interrupt_raised_inside_a_finalizer_is_raised_again_after_it_not_lost(signum, raised):
    """A signal whose handler raises, landing in a finalizer (a weakref's callback during an automatic
    collection, in a killed search's orphaned worker in CI), was printed as "Exception ignored" with
    a traceback and lost: the process went on. It is sent again once the finalizer is done, and
    nothing is printed. A finalizer's own error is still printed, as Python prints it."""
    res = subprocess.run(
        [sys.executable, "-c", _LOST_IN_A_FINALIZER, str(int(signum))],
        capture_output=True,
        text=True,
        cwd=ROOT,
        timeout=60,
    )
    if raised is None:
        assert res.stdout.strip() == "went on"
        assert "Exception ignored" in res.stderr and "a finalizer's own error" in res.stderr
    else:
        assert res.stdout.strip() == f"interrupted by {raised}", res.stderr
        assert res.stderr == ""


def test_a_sweep_folder_that_is_a_link_is_refused_before_anything_is_written(tmp_path):
    # its trial folders would have been written through the link, outside --out-root
    spec = _spec(tmp_path, "linked", {"loss_type": ["grpo"]})
    outside = tmp_path / "outside"
    outside.mkdir()
    (tmp_path / "runs").mkdir()
    (tmp_path / "runs" / "linked").symlink_to(outside)
    res = grpo_here("sweep", str(spec), *_stores(tmp_path), cwd=tmp_path)
    assert res.returncode == 2
    assert "the sweep folder linked is a symbolic link" in _one_line(res)
    assert not any(outside.iterdir()) and not (tmp_path / "journal.log").exists()


def test_a_checkpoint_whose_config_was_edited_is_refused_by_the_digest_it_was_written_with(tmp_path, checkpointed_run):
    # the edited config.yaml agrees with the resuming config (learning rate 0.003 in both), but the
    # checkpoint's steps were trained at the run's own rate: resumed, the run would be recorded at
    # 0.003; the digest written with the checkpoint says the file is not what it trained with
    import shutil

    run = Path(shutil.copytree(checkpointed_run, tmp_path / "run"))
    config = yaml.safe_load((run / "checkpoint-2" / "config.yaml").read_text())
    assert config["learning_rate"] != 0.003
    config["learning_rate"] = 0.003
    (run / "checkpoint-2" / "config.yaml").write_text(yaml.safe_dump(config))
    res = grpo_here(
        "train",
        *TRAIN,
        "--no-mlflow",
        "--set",
        "max_steps=2",
        "--set",
        "save_steps=2",
        "--set",
        "stl_window=1",
        "--set",
        "learning_rate=0.003",
        "--set",
        f"resume_from_checkpoint={run / 'checkpoint-2'}",
        "--out",
        str(run),
    )
    assert res.returncode == 2
    assert "is not the config the checkpoint was trained with" in _one_line(res)
