"""Several machines on one sweep: a real PostgreSQL server as the Optuna storage and a real
`mlflow server` as the tracking store, two `grpo sweep` processes started separately (each with
its own working folder, as on two machines: no shared host lock; one of them is the test's own
process) completing one grid."""

import os
import subprocess
import sys
from collections import Counter

import pytest
import yaml

from conftest import CACHE, ROOT, run_grpo_here
from servers import mlflow_server, postgres_bin_or_reason, postgres_server

PG_BIN, WHY_NOT = postgres_bin_or_reason()


@pytest.mark.skipif(PG_BIN is None, reason=WHY_NOT or "PostgreSQL available")
def test_two_machines_share_one_grid_on_postgresql_and_an_mlflow_server(tmp_path):
    import optuna
    from mlflow.tracking import MlflowClient
    from optuna.trial import TrialState

    from sweeps.driving.search import make_sampler
    from sweeps.spec import grid_point_of, point_key
    from sweeps.spec import load_spec
    from sweeps.driving.storage import open_storage

    spec_path = tmp_path / "cluster.yaml"
    # num_threads 1: the two "machines" share this machine's 2 cores (2 × 2 threads oversubscribe)
    base = {"cache_dir": str(CACHE), "max_steps": 30, "baseline_prompts": 8, "stl_window": 5, "num_threads": 1}
    spec_path.write_text(
        yaml.safe_dump(
            {
                "name": "cluster",
                "base": base,
                "mlflow_experiment": "cluster",
                "grid": {"loss_type": ["grpo", "bnpo"], "learning_rate": [1e-4, 3e-4]},
                "seeds": [0, 1],
            },
            sort_keys=False,
        )
    )
    with postgres_server(PG_BIN) as storage, mlflow_server(tmp_path / "mlflow") as tracking:
        env = {**os.environ, "PYTHONPATH": f"{ROOT / 'tests'}{os.pathsep}{ROOT}"}
        for name in ("machine-a", "machine-b"):
            (tmp_path / name).mkdir()
        args = ["sweep", str(spec_path), "--storage", storage, "--tracking-uri", tracking]
        # machine b: a process of its own; machine a: this one (a grpo sweep, one worker), meanwhile
        machine_b = subprocess.Popen(
            [sys.executable, "-m", "grpo_lab", *args, "--out-root", str(tmp_path / "machine-b/runs")],
            cwd=tmp_path / "machine-b",
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        machine_a = run_grpo_here(*args, "--out-root", tmp_path / "machine-a/runs", cwd=tmp_path / "machine-a")
        out, err = machine_b.communicate()
        assert machine_b.returncode == 0, err[-3000:]
        assert machine_a.returncode == 0, machine_a.stderr[-3000:]

        spec = load_spec(spec_path)
        study = optuna.load_study(study_name="cluster", storage=open_storage(storage), sampler=make_sampler(spec))
        trials = study.get_trials(deepcopy=False)
        # two machines asking at the same moment for the last point can both get it; the later trial
        # then ends PRUNED before it runs (test_sweeps.py makes that moment happen on purpose)
        done = [t for t in trials if t.state == TrialState.COMPLETE]
        assert all(
            t.state == TrialState.PRUNED and "claimed at the same moment" in t.user_attrs["error"]
            for t in trials
            if t not in done
        )
        points = Counter(point_key(grid_point_of(spec, t)) for t in done)
        assert sorted(points) == sorted(point_key(p) for p in spec.grid_points()) and set(points.values()) == {1}
        ran = [len(list((tmp_path / n / "runs" / "cluster").glob("trial-*"))) for n in ("machine-a", "machine-b")]
        assert sum(ran) == 8 and min(ran) >= 1  # both machines did part of the grid

        client = MlflowClient(tracking_uri=tracking)  # everything arrived over HTTP
        exp = client.get_experiment_by_name("cluster")
        runs = client.search_runs([exp.experiment_id], max_results=100)
        children = [r for r in runs if r.data.tags.get("mlflow.parentRunId")]
        assert len(children) == 8 and all(r.info.status == "FINISHED" for r in children)
        history = client.get_metric_history(children[0].info.run_id, "reward")
        assert [m.step for m in history] == list(range(1, 31))


def test_a_tag_two_machines_set_at_once_is_written_once_more_not_lost():
    # Two machines that end their sweeps of one grid together both set the shared parent run's
    # wall_time_s: MLflow inserted the second row at the same moment, and the sweep ended in a traceback.
    from mlflow.exceptions import MlflowException

    from sweeps.driving.driver import set_shared_tag

    class Client:  # as MLflow's store answers: the first write meets the other machine's insert
        def __init__(self, errors):
            self.errors, self.tags = list(errors), {}

        def set_tag(self, run_id, key, value):
            if self.errors:
                raise self.errors.pop(0)
            self.tags[run_id, key] = value

    raced = Client(
        [MlflowException("BAD_REQUEST: (sqlite3.IntegrityError) UNIQUE constraint failed: tags.key, tags.run_uuid")]
    )
    set_shared_tag(raced, "r", "wall_time_s", "16.2")
    assert raced.tags == {("r", "wall_time_s"): "16.2"}
    with pytest.raises(MlflowException, match="not found"):  # anything else stands
        set_shared_tag(Client([MlflowException("RESOURCE_DOES_NOT_EXIST: Run 'r' not found")]), "r", "wall_time_s", "1")
    with pytest.raises(MlflowException, match="again"):  # written once more, not retried without end
        set_shared_tag(
            Client(
                [
                    MlflowException("UNIQUE constraint failed: tags.key"),
                    MlflowException("UNIQUE constraint failed again"),
                ]
            ),
            "r",
            "wall_time_s",
            "1",
        )
