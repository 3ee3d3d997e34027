"""Searches on the tiny model: pruning (recorded as pruned in the run folder, MLflow and Optuna;
never retried; two workers on one storage; never in a grid), several objectives with their Pareto
front, parameter importance and the search report."""

import json

import pytest
import yaml

from conftest import CACHE, run_grpo as grpo, run_grpo_here as grpo_here

BASE = {"cache_dir": str(CACHE), "task": "addition", "max_steps": 6, "baseline_prompts": 8, "stl_window": 2}


def write_spec(tmp_path, name, **fields):
    path = tmp_path / f"{name}.yaml"
    path.write_text(yaml.safe_dump({"name": name, "base": BASE, **fields}, sort_keys=False))
    return path


def study_of(tmp_path, name):
    from sweeps.driving.trials import load_sweep_study

    return load_sweep_study(tmp_path / f"{name}.yaml", f"journal:///{tmp_path}/results/local/optuna-journal.log")


class FakeTrial:
    def __init__(self, prune_at=None):
        self.reports, self.prune_at = [], prune_at

    def report(self, value, step):
        self.reports.append((step, value))

    def should_prune(self):
        return self.prune_at is not None and self.reports[-1][0] >= self.prune_at


def test_the_pruner_sees_the_smoothed_reward_at_the_trials_step_in_the_studys_direction():
    from grpo_core.util.errors import RunPruned
    from sweeps.driving.search import PruneCheck

    # second seed of a 10-step run (offset 10), window 2, objective minimized: −(moving average)
    check = PruneCheck(FakeTrial(), window=2, offset=10, sign=-1.0)
    for step, reward in ((1, 0.2), (2, 0.4), (3, 1.0)):
        check({"step": step, "reward": reward})
    assert check.trial.reports == [(11, pytest.approx(-0.2)), (12, pytest.approx(-0.3)), (13, pytest.approx(-0.7))]
    pruned = PruneCheck(FakeTrial(prune_at=12), window=3, offset=10, sign=1.0)  # maximized: the average itself
    pruned({"step": 1, "reward": 0.5})
    with pytest.raises(RunPruned, match="pruned after step 2: smoothed reward 0.3 .* step 12") as info:
        pruned({"step": 2, "reward": 0.1})
    assert info.value.step == 2 and pruned.trial.reports[-1] == (12, pytest.approx(0.3))


@pytest.mark.parametrize(
    "fields, needle",
    [
        ({"grid": {"learning_rate": [1e-4, 3e-4]}, "pruner": "median"}, "pruner: only for a search"),
        ({"search": {"learning_rate": {"low": 1e-5, "high": 1e-3}}, "n_trials": 2, "pruner": "asha"}, "pruner: 'asha'"),
        (
            {
                "search": {"learning_rate": {"low": 1e-5, "high": 1e-3}},
                "n_trials": 2,
                "pruner": {"type": "median", "patience": 3},
            },
            "pruner.patience: unknown key",
        ),
        (
            {
                "search": {"learning_rate": {"low": 1e-5, "high": 1e-3}},
                "n_trials": 2,
                "pruner": {"type": "median", "warmup_steps": -1},
            },
            "pruner.warmup_steps",
        ),
        (
            {
                "search": {"learning_rate": {"low": 1e-5, "high": 1e-3}},
                "n_trials": 2,
                "pruner": "median",
                "objective": ["steps_to_learn", "final_reward"],
            },
            "pruner: only with one objective",
        ),
        ({"grid": {"learning_rate": [1e-4]}, "objective": ["steps_to_learn", "final_reward"]}, "a list of objectives"),
        (
            {
                "search": {"learning_rate": {"low": 1e-5, "high": 1e-3}},
                "n_trials": 2,
                "objective": ["steps_to_learn", "steps_to_learn"],
            },
            "names one twice",
        ),
        (
            {
                "search": {"learning_rate": {"low": 1e-5, "high": 1e-3}},
                "n_trials": 2,
                "objective": ["steps_to_learn", "final_reward"],
                "direction": ["minimize"],
            },
            "direction",
        ),
    ],
)
def test_a_pruner_or_objectives_a_spec_cannot_have_are_one_line_exit_2(tmp_path, fields, needle):
    write_spec(tmp_path, "bad", seeds=[0], **fields)
    res = grpo_here("sweep", "bad.yaml", cwd=tmp_path)
    assert res.returncode == 2 and needle in res.stderr and res.stderr.count("\n") == 1, res.stderr
    assert not (tmp_path / "results").exists()  # nothing written


def pruned_search(tmp_path, n_trials):
    """Temperature 4 samples noise from the first step (reward about 0, against about 0.15 at
    temperature 1): the median pruner, from the first step once one trial is complete, stops it
    when the median of the complete trials is a temperature-1 one."""
    return write_spec(
        tmp_path,
        "pruned",
        search={"temperature": {"choices": [1.0, 4.0]}},
        seeds=[0, 1],
        n_trials=n_trials,
        sampler="random",
        pruner={"type": "median", "startup_trials": 1, "warmup_steps": 0},
    )


def check_records(tmp_path, spec, trials):
    """Each trial's run folders, its MLflow runs and its Optuna state say the same."""
    from mlflow.tracking import MlflowClient

    client = MlflowClient(tracking_uri=f"sqlite:///{tmp_path}/results/local/mlflow.db")
    for t in trials:
        folders = sorted((tmp_path / "results/local/sweeps" / spec.name / f"trial-{t.number:04d}").iterdir())
        statuses = [json.loads((f / "summary.json").read_text())["status"] for f in folders]
        run = client.get_run(t.user_attrs["mlflow_run_id"])  # the trial's run, parent of its seeds' runs
        if t.state.name == "PRUNED":  # stopped in its last seed: the seeds before it finished
            assert statuses[:-1] == ["finished"] * (len(folders) - 1) and statuses[-1] == "pruned"
            last = json.loads((folders[-1] / "summary.json").read_text())
            assert 1 <= last["pruned_after_step"] == last["steps_completed"] <= BASE["max_steps"]
            assert run.info.status == "KILLED" and run.data.tags["status"] == "pruned"
            seed_run = client.get_run((folders[-1] / ".grpo-mlflow-run").read_text().strip())
            assert seed_run.info.status == "KILLED" and seed_run.data.tags["status"] == "pruned"
        else:
            assert t.state.name == "COMPLETE" and statuses == ["finished"] * len(spec.seeds)
            assert run.info.status == "FINISHED"


def test_pruned_trials_agree_in_folder_mlflow_and_optuna_and_are_never_retried(tmp_path):
    """One worker: the random sampler's draws (4, 1, 4, 4, 1, 1) make trials 2 and 3 the pruned
    ones. A rerun (the search resumed) runs nothing: a pruned trial is spent budget."""
    pruned_search(tmp_path, 6)
    res = grpo_here("sweep", "pruned.yaml", cwd=tmp_path)
    assert res.returncode == 0, res.stderr[-3000:]
    spec, study = study_of(tmp_path, "pruned")
    trials = study.get_trials()
    pruned = [t for t in trials if t.state.name == "PRUNED"]
    assert len(trials) == 6 and pruned and all(t.params["temperature"] == 4.0 for t in pruned)
    assert "PRUNED" in res.stdout and "pruned after step" in res.stdout  # the table says why
    check_records(tmp_path, spec, trials)
    again = grpo_here("sweep", "pruned.yaml", cwd=tmp_path)
    assert again.returncode == 0 and "nothing to run" in again.stdout, again.stderr
    assert [t.state for t in study_of(tmp_path, "pruned")[1].get_trials()] == [t.state for t in trials]


def test_a_pruned_search_with_two_workers_on_one_storage_spends_its_budget_once(tmp_path):
    """Two worker processes share the journal: n_trials trials in all, each complete or pruned, each
    recorded alike in its folders, MLflow and Optuna (which trials are pruned depends on the order
    in which the two finish)."""
    pruned_search(tmp_path, 8)
    res = grpo("sweep", "pruned.yaml", "--workers", "2", cwd=tmp_path)
    assert res.returncode == 0, res.stderr[-3000:]
    spec, study = study_of(tmp_path, "pruned")
    trials = study.get_trials()
    assert len(trials) == 8 and {t.state.name for t in trials} <= {"COMPLETE", "PRUNED"}
    assert len({t.user_attrs["mlflow_run_id"] for t in trials}) == 8
    check_records(tmp_path, spec, trials)


def test_two_objectives_give_a_pareto_front_importance_and_a_search_report(tmp_path):
    write_spec(
        tmp_path,
        "two",
        search={"learning_rate": {"low": 1e-5, "high": 3e-3, "log": True}, "beta": {"low": 0.0, "high": 0.1}},
        seeds=[0],
        n_trials=5,
        sampler="random",
        objective=["steps_to_learn", "final_reward"],
    )
    # (6 steps: steps_to_learn may be censored at 6 in every trial; its importance then says so)
    res = grpo_here("sweep", "two.yaml", cwd=tmp_path)
    assert res.returncode == 0, res.stderr[-3000:]
    header = next(line for line in res.stdout.splitlines() if line.startswith("trial"))
    assert header.split()[-2:] == ["steps_to_learn", "final_reward"]
    spec, study = study_of(tmp_path, "two")
    complete = [t for t in study.get_trials() if t.state.name == "COMPLETE"]
    assert len(complete) == 5 and all(len(t.values) == 2 for t in complete)
    front = {t.number for t in study.best_trials}
    for t in complete:  # the front: no trial at least as good on both and better on one
        beaten = any(
            u.values[0] <= t.values[0] and u.values[1] >= t.values[1] and u.values != t.values for u in complete
        )
        assert (t.number in front) == (not beaten)
    trials = grpo_here("trials", "two.yaml", "--importance", cwd=tmp_path)
    assert trials.returncode == 0, trials.stderr
    rows = [line for line in trials.stdout.splitlines() if line.startswith(("| beta", "| learning_rate"))]
    cells = [line.strip("|").split("|")[1:] for line in rows]
    assert len(rows) == 2
    for column, objective in enumerate(spec.all_objectives):
        values = {t.values[column] for t in complete}
        if len(values) > 1:  # shares of the variance: they sum to 1
            assert sum(float(c[column]) for c in cells) == pytest.approx(1.0, abs=2e-3)
        else:
            assert [c[column].strip() for c in cells] == ["–", "–"] and objective in trials.stdout.split("– :")[1]
    assert len({t.values[1] for t in complete}) > 1  # final_reward differs between these learning rates
    report = grpo_here("report", "two.yaml", "--out", str(tmp_path / "rep"), cwd=tmp_path)
    assert report.returncode == 0, report.stderr
    text = (tmp_path / "rep" / "REPORT.md").read_text()
    assert "## Pareto front" in text and "## Parameter importance" in text and "## Best trials" in text
    assert f"({len(front)} of 5)" in text and (tmp_path / "rep" / "pareto.png").stat().st_size > 5000
    assert (tmp_path / "rep" / "curves.png").is_file() and "Runs trained: 5 (30 optimizer steps" in text
    grid = write_spec(tmp_path, "grid", grid={"learning_rate": [1e-4]}, seeds=[0])
    assert grpo_here("sweep", grid.name, cwd=tmp_path).returncode == 0
    refused = grpo_here("report", "grid.yaml", cwd=tmp_path)
    assert refused.returncode == 2 and "a grid; allowed: a search spec" in refused.stderr


def test_a_searchs_mlflow_view_lists_its_trials_best_first_with_parallel_coordinates():
    """The view `grpo ui` opens for a search (the browser test renders one): trial runs only, sorted
    by the first objective in its direction, its parameters and objectives as columns; a parallel
    chart of the parameters against the first objective and, with a second objective, the two
    against each other."""
    from sweeps.driving.ui_view import describe_links, search_view_state

    state = search_view_state(
        "s", ["learning_rate", "beta"], ["final_reward", "steps_to_learn"], ["maximize", "minimize"]
    )
    assert state["searchFilter"] == "tags.sweep = 's' AND tags.sweep_role = 'trial'"
    assert state["orderByKey"] == "metrics.`final_reward_mean`" and state["orderByAsc"] is False
    assert state["selectedColumns"][:4] == [
        "params.`learning_rate`",
        "params.`beta`",
        "metrics.`final_reward_mean`",
        "metrics.`steps_to_learn_mean`",
    ]
    assert "tags.`status`" in state["selectedColumns"] and "metrics.`pruned_after_step`" in state["selectedColumns"]
    parallel, curves, scatter = state["compareRunCharts"]
    assert parallel["type"] == "PARALLEL" and parallel["selectedParams"] == ["learning_rate", "beta"]
    assert parallel["selectedMetrics"] == ["final_reward_mean"]
    assert curves["type"] == "LINE" and curves["metricKey"] == "reward"
    assert scatter["type"] == "SCATTER" and (scatter["xaxis"]["key"], scatter["yaxis"]["key"]) == (
        "final_reward_mean",
        "steps_to_learn_mean",
    )
    assert search_view_state("s", ["beta"], ["steps_to_learn"], ["minimize"])["orderByAsc"] is True
    links = {"table": "http://t", "charts": "http://c", "search": True}
    assert "the search's trials" in describe_links("s", links) and "grouped by grid point" not in describe_links(
        "s", links
    )
    assert "grouped by grid point" in describe_links("s", {**links, "search": False})


def _search_study(tmp_path, n_trials=2):
    import optuna
    import yaml

    from sweeps.driving.search import make_sampler
    from sweeps.driving.storage import open_storage
    from sweeps.spec import load_spec

    path = tmp_path / "s.yaml"
    path.write_text(
        yaml.safe_dump(
            {
                "name": "s",
                "base": {"max_steps": 1},
                "seeds": [0],
                "sampler": "random",
                "n_trials": n_trials,
                "search": {"learning_rate": {"low": 1e-5, "high": 1e-3, "log": True}},
            }
        )
    )
    spec = load_spec(path)
    storage = open_storage(f"journal:///{tmp_path}/journal.log")
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    return spec, storage, optuna.create_study(study_name="s", storage=storage, sampler=make_sampler(spec))


def _suggest(trial, spec):
    from sweeps.driving.search import suggest

    return {k: suggest(trial, k, e) for k, e in spec.search.items()}


def test_a_resumed_search_does_not_buy_a_finished_point_again(tmp_path):
    """The seeded sampler starts its sequence again in a resumed search: seeded by the trials already
    in the study, a resumed worker draws new points (seeded as before, it drew the finished ones)."""
    import optuna

    from sweeps.driving.search import make_sampler

    spec, storage, study = _search_study(tmp_path, n_trials=4)
    first = []
    for _ in range(2):  # the first invocation: two trials, then SIGTERM
        trial = study.ask()
        first.append(_suggest(trial, spec))
        study.tell(trial, 1.0)
    again = optuna.load_study(study_name="s", storage=storage, sampler=make_sampler(spec, 0, trials_before=0))
    assert _suggest(again.ask(), spec) == first[0]  # what a resume drew before: the same point, bought twice
    resumed = optuna.load_study(study_name="s", storage=storage, sampler=make_sampler(spec, 0, trials_before=2))
    assert _suggest(resumed.ask(), spec) not in first


def test_a_search_whose_trials_failed_retries_them_at_their_points_on_a_rerun(tmp_path):
    """`rerun to retry them` after a search whose trials all failed: the rerun runs each failed
    trial's point again (once per invocation) within the budget, then stops; failures of the
    running invocation are not retried in it."""
    from optuna.trial import TrialState

    from sweeps.driving.claims import claim_trial

    spec, storage, study = _search_study(tmp_path, n_trials=2)
    lock, points = tmp_path / "lock", []
    for _ in range(2):
        trial = claim_trial(study, storage, spec, lock, "first")
        points.append(_suggest(trial, spec))
        study.tell(trial, state=TrialState.FAIL)
    assert claim_trial(study, storage, spec, lock, "first") is None  # its own failures use its budget
    retried = []
    while (trial := claim_trial(study, storage, spec, lock, "rerun")) is not None:
        retried.append((trial.user_attrs.get("retry_of"), _suggest(trial, spec)))
        study.tell(trial, 1.0)
    assert retried == [(0, points[0]), (1, points[1])]
    assert claim_trial(study, storage, spec, lock, "third") is None  # the budget is spent by runs that finished
