"""`grpo sweep` end to end on the tiny model: grids with parallel workers, resume, search with
seeds inside the objective, failing trials, separate stores, bad input."""

import signal
import os
import subprocess
import sys
import urllib.request

import pytest
import yaml

from conftest import CACHE, ROOT, run_grpo as grpo, run_grpo_here as grpo_here

BASE = {"cache_dir": str(CACHE), "max_steps": 4, "baseline_prompts": 8, "stl_window": 2}


def write_spec(tmp_path, name="spec", **fields):
    path = tmp_path / f"{name}.yaml"
    path.write_text(yaml.safe_dump({"name": name, "base": BASE, **fields}, sort_keys=False))
    return path


def load(tmp_path, name):
    import optuna

    from sweeps.driving.search import make_sampler
    from sweeps.spec import load_spec

    spec = load_spec(tmp_path / f"{name}.yaml")
    storage = optuna.storages.JournalStorage(
        optuna.storages.journal.JournalFileBackend(str(tmp_path / "results/local/optuna-journal.log"))
    )
    return spec, optuna.load_study(study_name=name, storage=storage, sampler=make_sampler(spec))


def mlflow_runs(tmp_path, experiment):
    from mlflow.tracking import MlflowClient

    client = MlflowClient(tracking_uri=f"sqlite:///{tmp_path}/results/local/mlflow.db")
    exp = client.get_experiment_by_name(experiment)
    return client, client.search_runs([exp.experiment_id], max_results=1000)


def test_grid_two_workers_complete_once_and_rerun_adds_nothing(tmp_path):
    from optuna.trial import TrialState

    from sweeps.spec import point_key

    write_spec(
        tmp_path,
        "grid",
        question="smoke",
        grid={"loss_type": ["grpo", "bnpo"], "learning_rate": [1e-4, 3e-4]},
        seeds=[0, 1],
    )
    res = grpo("sweep", "grid.yaml", "--workers", "2", cwd=tmp_path)
    assert res.returncode == 0, res.stderr[-3000:]
    assert "COMPLETE" in res.stdout and "steps_to_learn" in res.stdout  # the trial table
    spec, study = load(tmp_path, "grid")
    trials = study.get_trials()
    assert len(trials) == 8 and all(t.state == TrialState.COMPLETE for t in trials)
    points = {point_key(t.params) for t in trials}
    assert points == {point_key(p) for p in spec.grid_points()}  # every point exactly once
    for t in trials:
        assert t.value == (t.user_attrs["steps_to_learn"] or 4)  # censored at max_steps

    client, runs = mlflow_runs(tmp_path, "grid")
    parents = [r for r in runs if r.data.tags.get("sweep_role") == "parent"]
    children = [r for r in runs if r.data.tags.get("mlflow.parentRunId")]
    assert len(parents) == 1 and len(children) == 8 and len(runs) == 9
    assert all(c.data.tags["mlflow.parentRunId"] == parents[0].info.run_id for c in children)
    for child in children:
        assert child.info.status == "FINISHED"
        for key in ("reward", "loss"):
            assert [m.step for m in client.get_metric_history(child.info.run_id, key)] == [1, 2, 3, 4]
        for key in ("learned", "final_reward", "baseline_reward", "reward_auc"):
            assert key in child.data.metrics
        tags = child.data.tags
        assert tags["sweep"] == "grid" and tags["git_commit"] and "variant.loss_type" in tags and "seed" in tags
        assert child.data.params["loss_type"] == tags["variant.loss_type"]
        assert child.data.params["mlflow_experiment"] == "grid"  # the logged value is the one used
        artifacts = {a.path for a in client.list_artifacts(child.info.run_id)}
        assert {"config.yaml", "metrics.jsonl", "summary.json", "reward_curve.png"} <= artifacts

    again = grpo_here("sweep", "grid.yaml", "--workers", "2", cwd=tmp_path)
    assert again.returncode == 0 and "nothing to run" in again.stdout
    assert len(load(tmp_path, "grid")[1].get_trials()) == 8
    assert len(mlflow_runs(tmp_path, "grid")[1]) == 9

    listing = grpo_here("trials", "grid.yaml", cwd=tmp_path)
    assert listing.returncode == 0 and listing.stdout.count("COMPLETE") == 8

    # the two stores are different files, both under results/local/
    local = tmp_path / "results" / "local"
    assert (local / "mlflow.db").is_file() and (local / "optuna-journal.log").is_file()
    assert (local / "mlflow.db").read_bytes()[:15] == b"SQLite format 3"
    assert b"SQLite" not in (local / "optuna-journal.log").read_bytes()[:100]


def test_search_keeps_seeds_inside_the_objective(tmp_path):
    from optuna.trial import TrialState

    write_spec(
        tmp_path,
        "search",
        search={"learning_rate": {"low": 1e-5, "high": 1e-3, "log": True}},
        seeds=[0, 1],
        n_trials=3,
        objective="final_reward",
    )
    res = grpo_here("sweep", "search.yaml", cwd=tmp_path)
    assert res.returncode == 0, res.stderr[-3000:]
    spec, study = load(tmp_path, "search")
    trials = study.get_trials()
    assert len(trials) == 3 and all(t.state == TrialState.COMPLETE for t in trials)
    assert all(set(t.params) == {"learning_rate"} for t in trials)  # seed is never a searched knob
    for t in trials:
        seed_values = t.user_attrs["seed_values"]
        assert len(seed_values) == 2 and t.value == pytest.approx(sum(seed_values) / 2)
    client, runs = mlflow_runs(tmp_path, "search")
    trial_runs = [r for r in runs if r.data.tags.get("trial_number") and "seed" not in r.data.tags]
    seed_runs = [r for r in runs if "seed" in r.data.tags]
    assert len(trial_runs) == 3 and len(seed_runs) == 6
    by_id = {r.info.run_id: r for r in trial_runs}
    for r in seed_runs:  # each seed's curves nest under its trial's run
        assert r.data.tags["mlflow.parentRunId"] in by_id
    for t in trials:
        assert by_id[t.user_attrs["mlflow_run_id"]].data.metrics["objective"] == pytest.approx(t.value)
    assert grpo_here("sweep", "search.yaml", cwd=tmp_path).stdout.startswith("sweep search: nothing to run")


def test_failing_trial_is_fail_and_failed_and_the_sweep_goes_on(tmp_path):
    from optuna.trial import TrialState

    write_spec(tmp_path, "fails", grid={"reward_funcs": ["exact_match", "reward_helpers:always_raises"]}, seeds=[0, 1])
    res = grpo("sweep", "fails.yaml", "--workers", "2", cwd=tmp_path)
    assert res.returncode == 1  # some trials failed: said in the exit code and the last line
    assert "2 trial(s) failed" in res.stdout
    _, study = load(tmp_path, "fails")
    states = {(t.params["reward_funcs"], t.params["seed"]): t for t in study.get_trials()}
    assert len(states) == 4
    for (reward, _), t in states.items():
        if reward == "exact_match":
            assert t.state == TrialState.COMPLETE
        else:
            assert t.state == TrialState.FAIL and "always_raises" in t.user_attrs["error"]
    client, runs = mlflow_runs(tmp_path, "fails")
    failed = [r for r in runs if r.info.status == "FAILED"]
    assert len(failed) == 2
    assert all("reward server unavailable" in r.data.tags["error"] for r in failed)
    # a rerun retries the failed points (and only those)
    again = grpo_here("sweep", "fails.yaml", cwd=tmp_path)
    assert again.returncode == 1
    trials = load(tmp_path, "fails")[1].get_trials()
    assert len(trials) == 6 and sum(t.state == TrialState.COMPLETE for t in trials) == 2


def _bad_specs():
    ok = {"name": "bad", "base": BASE, "grid": {"loss_type": ["grpo"]}, "seeds": [0]}
    return [
        ({**ok, "colour": "red"}, "colour"),
        ({**ok, "grid": {"not_a_knob": [1, 2]}}, "grid.not_a_knob"),
        ({**ok, "objective": "happiness"}, "objective"),
        ({**ok, "grid": {}}, "empty grid"),
        ({**ok, "grid": {"loss_type": []}}, "grid.loss_type"),
        ({**ok, "seeds": []}, "seeds"),
        ({**ok, "grid": {"loss_type": ["grpo", "token_mean"]}}, "loss_type"),
        ({**ok, "search": {"learning_rate": {"low": 1e-3, "high": 1e-5}}, "n_trials": 2}, "search.learning_rate"),
        ({**ok, "search": {"learning_rate": {"low": 1e-5, "high": 1e-3}}}, "n_trials"),
        ({**ok, "base": {**BASE, "beta": -1}}, "beta"),
        ({**ok, "sampler": "random"}, "sampler"),  # a grid has no sampler to choose
        ({**ok, "mlflow_experiment": ["a", "b"]}, "mlflow_experiment"),
        # the whole spec is checked, grid and search by the same rules, before anything exists
        ({**ok, "search": {"learning_rate": {"low": 1e-5, "high": float("inf")}}, "n_trials": 2}, "finite"),
        ({**ok, "search": {"learning_rate": {"low": float("-inf"), "high": 1e-3}}, "n_trials": 2}, "finite"),
        ({**ok, "objective": ["steps_to_learn"]}, "objective"),
        ({**ok, "direction": ["minimize"]}, "direction"),
        ({**ok, "name": "x" * 300}, "at most 100 characters"),
        ({**ok, "name": ".."}, "starting with a letter"),
        ({**ok, "name": "."}, "starting with a letter"),
        ({**ok, "search": {"loss_type": {"choices": ["grpo", "grpo"]}}, "n_trials": 2}, "search.loss_type: repeated"),
        (
            {**ok, "search": {"loss_type": {"choices": ["grpo", "token_mean"]}}, "n_trials": 2},
            "loss_type: unknown value",
        ),
        ({**ok, "search": {"max_steps": {"low": 4.2, "high": 4.8, "type": "int"}}, "n_trials": 2}, "two integers"),
        ({**ok, "search": {"max_steps": {"low": 4, "high": 4.5, "type": "int"}}, "n_trials": 2}, "two integers"),
        (
            {
                **ok,
                "grid": {
                    "learning_rate": [i * 1e-6 + 1e-6 for i in range(1000)],
                    "beta": [i * 1e-3 for i in range(1000)],
                },
            },
            "allowed: at most 10,000",
        ),
        # a later review's cases: a name given empty, seeds named by the spec's own key, and the report
        # section of a plain sweep checked before it trains (not at `grpo reproduce`, after)
        ({**ok, "name": ""}, "name: ''; allowed"),
        ({**ok, "seeds": "0"}, "seeds: '0'; allowed: a list of distinct integers"),
        ({**ok, "seeds": [-1]}, "seeds: -1 in [-1]; allowed"),
        ({**ok, "seeds": [2**40]}, "seeds: 1099511627776 in"),
        ({**ok, "seeds": [0, True]}, "seeds: True in"),
        ({**ok, "replication_seeds": [1.5]}, "replication_seeds: 1.5 in"),
        ({**ok, "replication_seeds": [1, 1]}, "replication_seeds: [1, 1] repeats a seed"),
        ({**ok, "report": {"tests": [{"kind": "nonsense"}]}}, "report.tests[0].kind: 'nonsense'; allowed: paired"),
        ({**ok, "report": {"figures": ["nonsense"]}}, "report.figures: unknown figure 'nonsense'"),
        # searches: a range where only choices make sense, both at once, a float draw for an integer key
        # (every trial failed at its first non-integer value), and a budget no machine finishes
        (
            {**ok, "search": {"use_peft": {"low": 0, "high": 1}}, "n_trials": 2},
            "search.use_peft: a range for a key that",
        ),
        ({**ok, "search": {"loss_type": {"low": 0, "high": 1}}, "n_trials": 2}, "search.loss_type: a range for a key"),
        (
            {**ok, "search": {"learning_rate": {"choices": [1e-4], "low": 1e-5, "high": 1e-3}}, "n_trials": 2},
            "choices and high, low together",
        ),
        (
            {**ok, "search": {"max_steps": {"low": 2, "high": 9, "type": "float"}}, "n_trials": 2},
            "type float for an integer",
        ),
        (
            {**ok, "search": {"learning_rate": {"low": 1e-5, "high": 1e-3}}, "n_trials": 10**11},
            "n_trials: 100,000,000,000 trials × 1 run(s) each",
        ),
        (
            {**ok, "report": {"tests": [{"kind": "paired", "axis": "beta", "statement": "s"}]}},
            "report.tests[0].axis: 'beta' is not a grid",
        ),
        # a typo in `quick` surfaced only at `grpo reproduce --quick`, after the full runs were planned
        ({**ok, "quick": {"max_step": 2}}, "quick.max_step: unknown key; allowed: max_steps, seeds"),
        # a grid axis given one value instead of a list was called empty
        (
            {**ok, "grid": {"learning_rate": 1e-4}},
            "grid.learning_rate: expected a list of values, got 0.0001; allowed: a non-empty list",
        ),
    ]


@pytest.mark.parametrize("spec,needle", _bad_specs(), ids=[f"{i}-{n[:30]}" for i, (_, n) in enumerate(_bad_specs())])
def test_bad_spec_one_line_exit_2_nothing_written(tmp_path, spec, needle):
    (tmp_path / "bad.yaml").write_text(yaml.safe_dump(spec))
    res = grpo_here("sweep", "bad.yaml", cwd=tmp_path)
    assert res.returncode == 2 and needle in res.stderr, res.stderr[-2000:]
    assert res.stderr.count("\n") == 1 and "Traceback" not in res.stderr
    assert not (tmp_path / "results").exists()  # nothing written to any store


def test_bad_spec_message_from_a_process(tmp_path):
    (tmp_path / "bad.yaml").write_text(
        yaml.safe_dump({"name": "bad", "base": BASE, "grid": {"loss_type": ["grpo"]}, "seeds": []})
    )
    res = grpo("sweep", "bad.yaml", cwd=tmp_path)
    assert res.returncode == 2 and res.stderr.count("\n") == 1 and "seeds" in res.stderr
    assert "Traceback" not in res.stderr and not (tmp_path / "results").exists()


def test_unreachable_storage_and_tracking_server(tmp_path):
    write_spec(tmp_path, "ok", grid={"loss_type": ["grpo"]}, seeds=[0])
    res = grpo_here("sweep", "ok.yaml", "--storage", "postgresql://u:p@127.0.0.1:9/none", cwd=tmp_path)
    assert res.returncode == 2 and "--storage" in res.stderr and res.stderr.count("\n") == 1
    res = grpo_here("sweep", "ok.yaml", "--tracking-uri", "http://127.0.0.1:9", cwd=tmp_path)
    assert res.returncode == 2 and "--tracking-uri" in res.stderr and res.stderr.count("\n") == 1
    res = grpo_here(
        "sweep", "ok.yaml", "--storage", "sqlite:///same.db", "--tracking-uri", "sqlite:///same.db", cwd=tmp_path
    )
    assert res.returncode == 2 and "same file" in res.stderr
    assert not (tmp_path / "results").exists() and not (tmp_path / "same.db").exists()


def _start_ui(tmp_path):
    import socket
    import time

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    # as a terminal's foreground job: SIGINT not ignored, even where pytest itself was started in the
    # background by a shell without job control (its children would inherit SIG_IGN, and Ctrl-C then
    # never reaches grpo ui, by design of the shell, not of grpo ui)
    proc = subprocess.Popen(
        [sys.executable, "-m", "grpo_lab", "ui", "--port", str(port)],
        cwd=tmp_path,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        start_new_session=True,
        text=True,
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),
    )
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline and proc.poll() is None:
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/health", timeout=2) as r:
                body = r.read().decode()
        except OSError:
            time.sleep(0.5)
            continue
        # MLflow on loopback, on the default store (created by grpo ui where none was)
        assert "OK" in body and (tmp_path / "results" / "local" / "mlflow.db").exists(), body
        return proc, port
    raise AssertionError(f"grpo ui did not answer: {proc.stdout.read() if proc.poll() is not None else ''}")


def _port_closes(port, within_s=30.0) -> bool:
    import socket
    import time

    deadline = time.monotonic() + within_s
    while time.monotonic() < deadline:
        with socket.socket() as s:
            if s.connect_ex(("127.0.0.1", port)) != 0:
                return True
        time.sleep(0.5)
    return False


@pytest.mark.parametrize("how", ["SIGKILL", "Ctrl-C"])
def test_the_ui_server_dies_with_grpo_ui_and_stops_quietly(tmp_path, how):
    proc, port = _start_ui(tmp_path)
    try:
        if how == "SIGKILL":  # grpo ui alone: its server must not keep serving the port
            os.kill(proc.pid, signal.SIGKILL)
        else:  # the terminal's Ctrl-C goes to the foreground process group
            os.killpg(proc.pid, signal.SIGINT)
        proc.wait(timeout=60)
        assert _port_closes(port), f"the MLflow server still serves port {port} after {how} of grpo ui"
        out = proc.stdout.read()
        if how == "Ctrl-C":
            assert proc.returncode == 0 and "Traceback" not in out and "stopping the MLflow server" in out, out
            assert "DeprecationWarning" not in out, out  # Starlette's, meant for MLflow's developers
    finally:
        try:
            os.killpg(proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass


def test_bad_sweep_files_and_stores_one_line_exit_2_nothing_written(tmp_path):
    write_spec(tmp_path, "ok", grid={"loss_type": ["grpo"]}, seeds=[0])
    (tmp_path / "binary.yaml").write_bytes(bytes(range(256)) * 4)
    (tmp_path / "README.md").write_text("a file")
    corrupt = tmp_path / "corrupt.log"
    corrupt.write_bytes(b'{"op_code": 0}\n\x00\xff not json\n{"op_code": 1}\n')
    # another program's JSON log, and a binary file with no newline: refused, never cut back as a journal's cut tail
    (tmp_path / "foreign.log").write_text('{"level": "info", "msg": "hi"}\n')
    (tmp_path / "binary.log").write_bytes(b"\x00\x01\xff\xfe")
    # records Optuna cannot replay: an op_code it does not know (its replay asserts), a record that
    # lacks a field (a KeyError): each ended in a traceback
    (tmp_path / "op99.log").write_text('{"op_code": 99}\n')
    (tmp_path / "opname.log").write_text('{"op_code": "create_study"}\n')
    (tmp_path / "nofield.log").write_text('{"op_code": 0}\n')
    cases = [
        (["sweep", "ok.yaml", "--storage", f"journal://{tmp_path}/op99.log"], "line 1 is not an Optuna journal record"),
        (["trials", "ok.yaml", "--storage", f"journal://{tmp_path}/opname.log"], "line 1 is not an Optuna journal"),
        (
            ["sweep", "ok.yaml", "--storage", f"journal://{tmp_path}/nofield.log"],
            "a record Optuna cannot replay (KeyError",
        ),
        (["sweep", "binary.yaml"], "not a text file"),
        (["sweep", "ok.yaml", "--storage", f"journal://{corrupt}"], "line 2 is not an Optuna journal record"),
        (["trials", "ok.yaml", "--storage", f"journal://{corrupt}"], "line 2 is not an Optuna journal record"),
        (["sweep", "ok.yaml", "--storage", "journal:///no/such/folder/j.log"], "does not exist"),
        (["sweep", "ok.yaml", "--storage", f"journal://{tmp_path}/foreign.log"], "line 1 is not an Optuna journal"),
        (["sweep", "ok.yaml", "--storage", f"journal://{tmp_path}/binary.log"], "line 1 is not an Optuna journal"),
        (["sweep", "ok.yaml", "--out-root", "README.md"], "is a file"),
        (["trials", "ok.yaml", "--storage", f"sqlite:///{tmp_path}/none.db"], "no such database file"),
        (["sweep", "ok.yaml", "--workers", "0"], "--workers"),
        (["sweep", "ok.yaml", "--storage", f"sqlite:///{tmp_path}/README.md"], "is not a SQLite database"),
        (["trials", "ok.yaml", "--storage", f"sqlite:///{tmp_path}/README.md"], "is not a SQLite database"),
        # a folder, and a place nobody can write: Optuna's 40-line traceback before
        (["sweep", "ok.yaml", "--storage", f"sqlite:///{tmp_path}/results"], "is a folder; allowed: a SQLite"),
        (["sweep", "ok.yaml", "--storage", "sqlite:////proc/grpo.db"], "allowed: a SQLite file in a writable folder"),
        # a relative SQLite path's hint names the file itself (it said journal:///README.md: /README.md)
        (["sweep", "ok.yaml", "--storage", "sqlite:///README.md"], f"or journal://{tmp_path}/README.md if it is"),
        # one file in both spellings of an absolute journal path ('//x' and '/x' were two files to the check)
        (
            [
                "sweep",
                "ok.yaml",
                "--storage",
                f"journal:///{tmp_path}/same.log",
                "--tracking-uri",
                f"sqlite:///{tmp_path}/same.log",
            ],
            "name the same file",
        ),
    ]
    (tmp_path / "results" / "local").mkdir(parents=True)
    (tmp_path / "results" / "local" / "optuna-journal.log").write_text("")  # `trials` needs a machine that ran sweeps
    before = sorted(p.relative_to(tmp_path) for p in tmp_path.rglob("*"))
    for args, needle in cases:
        res = grpo_here(*args, cwd=tmp_path)
        assert res.returncode == 2 and len(res.stderr.strip().splitlines()) == 1 and needle in res.stderr, (
            args,
            res.stderr,
        )
        assert "Traceback" not in res.stderr
    assert sorted(p.relative_to(tmp_path) for p in tmp_path.rglob("*")) == before  # nothing written anywhere
    assert corrupt.read_bytes().startswith(b'{"op_code": 0}')
    assert (tmp_path / "binary.log").read_bytes() == b"\x00\x01\xff\xfe"


def test_trials_show_never_learned_runs_as_not_learned(tmp_path):
    write_spec(tmp_path, "nl", grid={"learning_rate": [1e-12]}, seeds=[0])  # a placebo: cannot learn
    assert grpo_here("sweep", "nl.yaml", cwd=tmp_path).returncode == 0
    res = grpo_here("trials", "nl.yaml", cwd=tmp_path)
    assert res.returncode == 0 and "not learned (counted as 4)" in res.stdout


@pytest.mark.parametrize(
    "args, needle",
    [
        (["--port", "99999"], "1-65535"),
        (["--tracking-uri", "ftp://x"], "unknown tracking store"),
    ],
)
def test_ui_bad_input_one_line_exit_2(tmp_path, args, needle):
    res = grpo("ui", *args, cwd=tmp_path)
    assert res.returncode == 2 and needle in res.stderr and len(res.stderr.strip().splitlines()) == 1


def test_ui_on_a_busy_port_exits_2(tmp_path):
    import socket

    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        res = grpo("ui", "--port", str(busy.getsockname()[1]), cwd=tmp_path)
    assert res.returncode == 2 and "allowed: a free port" in res.stderr


def _two_point_study(tmp_path):
    import optuna

    from sweeps.driving.search import make_sampler
    from sweeps.spec import load_spec
    from sweeps.driving.storage import open_storage

    path = tmp_path / "race.yaml"
    path.write_text(
        yaml.safe_dump(
            {"name": "race", "base": {"max_steps": 1}, "grid": {"loss_type": ["grpo", "bnpo"]}, "seeds": [0]}
        )
    )
    spec = load_spec(path)
    storage = open_storage(f"journal:///{tmp_path}/race-journal.log")
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    return spec, storage, optuna.create_study(study_name="race", storage=storage, sampler=make_sampler(spec))


def test_a_point_claimed_by_two_machines_at_once_runs_once(tmp_path, monkeypatch):
    """The claim lock is per host: two machines past the first pass can both find point P free and
    enqueue it. The later trial sees the earlier one on P (by its params, or its fixed params while
    it is being asked for) and ends as PRUNED, saying so; nothing is left to claim then."""
    from optuna.trial import TrialState

    import sweeps.driving.claims as driver
    from sweeps.driving.trials import trials_table

    spec, storage, study = _two_point_study(tmp_path)
    lock = tmp_path / "a.lock"
    study.tell(driver.claim_trial(study, storage, spec, lock, "i1"), 1.0)  # point 0 done
    failed = driver.claim_trial(study, storage, spec, lock, "i1")  # point 1 failed: free again next invocation
    study.tell(failed, state=TrialState.FAIL)
    point = driver.grid_point_of(spec, failed)
    real = driver._claim_once
    study.enqueue_trial(point)  # machine A enqueues P and asks (its params not suggested yet) ...
    asked = study.ask()
    assert driver.grid_point_of(spec, study.trials[asked.number]) is None
    calls = []

    def machine_b(*args):  # ... while machine B, which read the trials before that, enqueues and asks too
        calls.append(1)
        if len(calls) > 1:
            return real(*args)
        study.enqueue_trial(point)
        trial = study.ask()
        for name, choices in driver.grid_space(spec).items():
            trial.suggest_categorical(name, choices)
        return trial

    monkeypatch.setattr(driver, "_claim_once", machine_b)
    assert driver.claim_trial(study, storage, spec, tmp_path / "b.lock", "i2") is None  # B's duplicate, then nothing
    states = {t.number: t.state.name for t in study.trials}
    assert states == {0: "COMPLETE", 1: "FAIL", 2: "RUNNING", 3: "PRUNED"}
    assert "claimed at the same moment by trial 2" in study.trials[3].user_attrs["error"]
    assert "PRUNED" in trials_table(study, spec) and "claimed at the same moment" in trials_table(study, spec)


def test_a_claim_waits_for_a_trial_another_machine_is_asking_for(tmp_path, monkeypatch):
    """A trial asked for without an enqueued point shows it only once suggested: earlier_claim reads
    again until then (at most SETTLE_S), so a point is not taken twice in that moment."""
    import threading
    import time

    import sweeps.driving.claims as driver

    spec, storage, study = _two_point_study(tmp_path)
    done = driver.claim_trial(study, storage, spec, tmp_path / "a.lock", "i1")
    study.tell(done, 1.0)
    other = study.ask()  # trial 1 on another machine, between its ask and its suggest
    point = next(p for p in spec.grid_points() if p != driver.grid_point_of(spec, done))
    monkeypatch.setattr(driver, "SETTLE_S", 0.3)
    started = time.monotonic()
    assert driver.earlier_claim(study, spec, 2, point) is None and time.monotonic() - started >= 0.3  # never shown
    timer = threading.Timer(0.1, lambda: [other.suggest_categorical(n, c) for n, c in driver.grid_space(spec).items()])
    timer.start()
    monkeypatch.setattr(driver, "SETTLE_S", 10.0)
    assert driver.earlier_claim(study, spec, 2, point) == 1  # shown 0.1 s later: found
    timer.join()
    assert driver.grid_point_of(spec, study.trials[1]) == point  # the first pass's other point


def test_a_new_journal_resumes_from_the_finished_run_folders(tmp_path):
    # the committed real-model runs are resumed this way (grpo reproduce --real-cpu): the run folders
    # decide what is done, whatever journal the machine has
    import json
    import shutil

    from optuna.trial import TrialState

    write_spec(tmp_path, "adopt", grid={"learning_rate": [1e-4, 3e-4]}, seeds=[0, 1])
    assert grpo_here("sweep", "adopt.yaml", cwd=tmp_path).returncode == 0
    root = tmp_path / "results/local/sweeps/adopt"
    folders = sorted(root.iterdir())
    assert [f.name for f in folders] == [f"trial-{n:04d}" for n in range(4)]
    configs = {f.name: yaml.safe_load((f / "config.yaml").read_text()) for f in folders}
    shutil.rmtree(folders[1])  # a lost run
    killed = json.loads((folders[2] / "summary.json").read_text())
    (folders[2] / "summary.json").write_text(json.dumps({**killed, "status": "killed"}))  # a killed run
    old_config = yaml.safe_load((folders[3] / "config.yaml").read_text())
    del old_config["log_completions"]  # a run from before the key existed: it behaved as its default
    (folders[3] / "config.yaml").write_text(yaml.safe_dump(old_config))
    before = {f.name: (f / "metrics.jsonl").read_bytes() for f in (folders[0], folders[3])}
    for journal in (tmp_path / "results/local").glob("optuna-journal.log*"):
        journal.unlink()  # a fresh clone: no journal

    res = grpo_here("sweep", "adopt.yaml", cwd=tmp_path)
    assert res.returncode == 0, res.stderr[-3000:]
    assert "2 finished run folder(s)" in res.stdout
    spec, study = load(tmp_path, "adopt")
    trials = study.get_trials()
    adopted = [t for t in trials if t.user_attrs.get("adopted")]
    trained = [t for t in trials if not t.user_attrs.get("adopted")]
    assert sorted(t.user_attrs["run_dir"].rsplit("/", 1)[1] for t in adopted) == ["trial-0000", "trial-0003"]
    assert all(t.state == TrialState.COMPLETE for t in trials) and len(trained) == 2
    lost = {(configs[n]["learning_rate"], configs[n]["seed"]) for n in ("trial-0001", "trial-0002")}
    assert {(t.params["learning_rate"], t.params["seed"]) for t in trained} == lost  # only those were trained
    for t in trained:  # new folders never overwrite a kept one (trial numbers restart in a new journal)
        folder = tmp_path / t.user_attrs["run_dir"]  # (relative to the sweep's folder, or absolute)
        assert json.loads((folder / "summary.json").read_text())["status"] == "finished"
    assert {f.name: (f / "metrics.jsonl").read_bytes() for f in (folders[0], folders[3])} == before
    assert json.loads((folders[2] / "summary.json").read_text())["status"] == "killed"  # kept as it was

    # a folder made from another base is not taken for this spec's point
    write_spec(tmp_path, "adopt", grid={"learning_rate": [1e-4, 3e-4]}, seeds=[0, 1], base={**BASE, "max_steps": 5})
    for journal in (tmp_path / "results/local").glob("optuna-journal.log*"):
        journal.unlink()
    from sweeps.driving.adopt import finished_folders
    from sweeps.spec import load_spec

    assert finished_folders(tmp_path / "results/local/sweeps", load_spec(tmp_path / "adopt.yaml")) == {}


def test_a_run_that_another_sweep_already_trained_is_copied_not_trained_again(tmp_path):
    # two claims sharing an arm (a control at lr 1e-4): the second sweep takes the first's runs of it
    import json

    write_spec(tmp_path, "first", grid={"learning_rate": [1e-4, 3e-4]}, seeds=[0, 1])
    assert grpo_here("sweep", "first.yaml", cwd=tmp_path).returncode == 0
    write_spec(tmp_path, "second", grid={"learning_rate": [1e-4, 5e-4]}, seeds=[0, 1])
    res = grpo_here("sweep", "second.yaml", cwd=tmp_path)
    assert res.returncode == 0, res.stderr[-3000:]
    assert "2 finished run(s) of other sweeps" in res.stdout
    root = tmp_path / "results/local/sweeps"
    shared = sorted(f for f in (root / "second").iterdir() if f.name.startswith("trial-shared-first-"))
    assert len(shared) == 2 and not any((f / ".grpo-run.lock").exists() for f in shared)
    originals = {
        yaml.safe_load((f / "config.yaml").read_text())["seed"]: f
        for f in (root / "first").iterdir()
        if yaml.safe_load((f / "config.yaml").read_text())["learning_rate"] == 1e-4
    }
    for f in shared:  # the same run, byte for byte
        seed = yaml.safe_load((f / "config.yaml").read_text())["seed"]
        assert (f / "metrics.jsonl").read_bytes() == (originals[seed] / "metrics.jsonl").read_bytes()
    _, study = load(tmp_path, "second")
    trained = [t for t in study.get_trials() if not t.user_attrs.get("adopted")]
    assert sorted((t.params["learning_rate"], t.params["seed"]) for t in trained) == [(5e-4, 0), (5e-4, 1)]
    finished = [
        f for f in (root / "second").iterdir() if json.loads((f / "summary.json").read_text())["status"] == "finished"
    ]
    assert len(finished) == 4
    # a run of another base (more steps) is never taken: a third spec trains its own
    write_spec(tmp_path, "third", grid={"learning_rate": [1e-4]}, seeds=[0], base={**BASE, "max_steps": 5})
    res = grpo_here("sweep", "third.yaml", cwd=tmp_path)
    assert res.returncode == 0 and "of other sweeps" not in res.stdout
    assert not any(f.name.startswith("trial-shared-") for f in (root / "third").iterdir())
    # the sweep that trained a run is its source wherever it still holds it; a copy of a copy keeps the
    # copy's name (it names that sweep) instead of nesting one name in another
    import shutil

    shutil.rmtree(originals[1])  # seed 1 at lr 1e-4 is now only second's copy of it
    write_spec(tmp_path, "fourth", grid={"learning_rate": [1e-4]}, seeds=[0, 1])
    res = grpo_here("sweep", "fourth.yaml", cwd=tmp_path)
    assert res.returncode == 0 and "2 finished run(s) of other sweeps" in res.stdout, res.stdout[-2000:]
    copies = {yaml.safe_load((f / "config.yaml").read_text())["seed"]: f.name for f in (root / "fourth").iterdir()}
    assert copies == {
        0: f"trial-shared-first-{originals[0].name}",
        1: next(f.name for f in shared if yaml.safe_load((f / "config.yaml").read_text())["seed"] == 1),
    }


def test_a_journal_whose_last_record_was_cut_is_repaired_before_anything_is_appended(tmp_path):
    journal = tmp_path / "j.log"
    storage = ["--storage", f"journal:///{journal}", "--tracking-uri", f"sqlite:///{tmp_path}/m.db"]
    write_spec(tmp_path, "first", grid={"loss_type": ["grpo"]}, seeds=[0])
    write_spec(tmp_path, "second", grid={"loss_type": ["bnpo"]}, seeds=[0])
    assert grpo_here("sweep", "first.yaml", *storage, cwd=tmp_path).returncode == 0
    whole = journal.read_bytes()
    journal.write_bytes(whole[:-25])  # its writer died in the middle of the last record
    assert grpo_here("trials", "first.yaml", "--storage", f"journal:///{journal}", cwd=tmp_path).returncode == 0
    res = grpo_here("sweep", "second.yaml", *storage, cwd=tmp_path)  # appends to the journal
    assert res.returncode == 0 and "last record was cut off" in res.stderr, res.stderr[-2000:]
    assert journal.read_bytes().startswith(whole[: whole[:-25].rfind(b"\n") + 1])
    # the whole journal still reads: the first sweep lost the record that was cut (its trial's end:
    # RUNNING, which its next run fails and retries, its owner being gone), the second is complete
    first = grpo_here("trials", "first.yaml", "--storage", f"journal:///{journal}", cwd=tmp_path)
    second = grpo_here("trials", "second.yaml", "--storage", f"journal:///{journal}", cwd=tmp_path)
    assert first.returncode == 0 and "RUNNING  grpo" in first.stdout, first.stderr
    assert second.returncode == 0 and "COMPLETE  bnpo" in second.stdout, second.stderr


def test_a_workers_threads_are_its_share_of_the_cpus_at_most_omp_num_threads(monkeypatch):
    """8 CPUs: 8 ÷ --workers threads each (at least 1); with OMP_NUM_THREADS=2, at most 2 (an empty or
    bad value is no cap). Two threads beside a busy core made a tiny step ~50× slower here."""
    from sweeps.driving import driver

    monkeypatch.setattr(driver, "usable_cpus", lambda: 8)
    cases = {None: [8, 4, 2, 1], "2": [2, 2, 2, 1], "": [8, 4, 2, 1], "two": [8, 4, 2, 1], "0": [8, 4, 2, 1]}
    for value, threads in cases.items():
        if value is None:
            monkeypatch.delenv("OMP_NUM_THREADS", raising=False)
        else:
            monkeypatch.setenv("OMP_NUM_THREADS", value)
        assert [driver.threads_per_worker(w) for w in (1, 2, 3, 16)] == threads, value


def test_workers_beyond_the_sweeps_runs_are_not_started_and_threads_follow_the_flag(tmp_path):
    """--workers 1000 on a one-run grid forked 1000 processes (24 s for a 1-step run). Only as many
    start as there are runs; each run's num_threads, part of its numbers, is still the one the
    flag gives (cores ÷ --workers), so a resumed sweep trains its last point as it would have."""
    from grpo_core.util import defaults

    write_spec(tmp_path, "one", grid={"loss_type": ["grpo"]}, seeds=[0])
    res = grpo("sweep", "one.yaml", "--workers", "6", cwd=tmp_path)
    assert res.returncode == 0, res.stderr[-2000:]
    threads = max(1, len(os.sched_getaffinity(0)) // 6)
    assert f"sweep one: 1 worker(s) (of --workers 6: no more trials to share; {threads} thread(s) each" in res.stdout
    (config,) = (tmp_path / defaults.SWEEPS / "one").glob("trial-*/config.yaml")
    assert yaml.safe_load(config.read_text())["num_threads"] == threads
