"""`grpo ui` in a real browser that has never seen MLflow (Debian's chromium, headless, a fresh
profile): the printed address lands on the sweep's runs in the model-training view, grouped by
grid point, with the summary columns; the charts address shows the reward curves per group first;
a run's page shows what the model wrote (its completions as a table).
The screenshots are kept under results/local/test-artifacts/."""

import contextlib
import json
import os
import re
import signal
import subprocess
import sys
import time
import urllib.request

import pytest
import yaml

from conftest import CACHE, ROOT, run_grpo_here
from browser import browse, chromium as chromium_path, evaluate
from servers import free_port

ARTIFACTS = ROOT / "results" / "local" / "test-artifacts"


@contextlib.contextmanager
def serving_ui(store: str, cwd):
    """`grpo ui` on `store` in a process of its own, once its server answers: the lines it printed
    (the sweep's links); the server is stopped on the way out."""
    port = free_port()
    env = {**os.environ, "PYTHONPATH": f"{ROOT / 'tests'}{os.pathsep}{ROOT}"}
    ui = subprocess.Popen(
        [sys.executable, "-m", "grpo_lab", "ui", "--port", str(port), "--tracking-uri", store],
        cwd=cwd,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
        start_new_session=True,
    )
    try:
        lines = "".join(ui.stdout.readline() for _ in range(3))
        deadline = time.monotonic() + 120
        while True:  # the server is up when its health check answers
            try:
                urllib.request.urlopen(f"http://127.0.0.1:{port}/health", timeout=2).read()
                break
            except OSError:
                assert time.monotonic() < deadline, "the MLflow UI did not start"
                time.sleep(0.5)
        yield lines
    finally:
        os.killpg(ui.pid, signal.SIGTERM)
        ui.wait(timeout=60)


def test_grpo_ui_opens_the_sweep_comparison_in_a_fresh_browser(tmp_path):
    chromium = chromium_path()
    spec = yaml.safe_load((ROOT / "experiments" / "example-grid.yaml").read_text())
    spec["base"].update(max_steps=6, stl_window=2, cache_dir=str(CACHE), baseline_prompts=16)
    (tmp_path / "grid.yaml").write_text(yaml.safe_dump(spec, sort_keys=False))
    store = f"sqlite:///{tmp_path}/mlflow.db"
    done = run_grpo_here(
        "sweep",
        "grid.yaml",
        "--storage",
        f"journal:///{tmp_path}/journal.log",
        "--tracking-uri",
        store,
        "--out-root",
        str(tmp_path / "runs"),
        cwd=tmp_path,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    assert "sweep example-grid: its runs grouped by grid point in MLflow" in done.stdout  # the sweep prints it too

    with serving_ui(store, tmp_path) as lines:
        links = dict(re.findall(r"(grouped by grid point|reward curves per group).*?(http://\S+)", lines))
        table, charts = links["grouped by grid point"], links["reward curves per group"]
        assert "workflowType=machine_learning" in table and "viewStateShareKey=" in table
        ARTIFACTS.mkdir(parents=True, exist_ok=True)
        _, page = browse(chromium, table, tmp_path / "profile-table", ARTIFACTS / "ui-table.png")
        assert "Overview" not in page and "Detect issues" not in page  # not the GenAI view
        assert "Runs" in page and "Model training" in page
        names = set(re.findall(r"example-grid-t\d+-\S+-seed\d", page))
        assert len(names) == 8  # every child run, by name
        assert "steps_to_learn" in page and "final_reward" in page and "learned" in page
        assert page.count("Group: variant.loss_type") == 4  # one group per grid point (2 × 2)
        chart_html, chart_page = browse(chromium, charts, tmp_path / "profile-charts", ARTIFACTS / "ui-charts.png")
        assert "grpo-lab: the comparison" in chart_page
        assert chart_page.index("reward") < chart_page.index("grad_norm")  # the reward curves come first
        assert chart_html.count('class="main-svg"') >= 4  # the four charts were drawn (plotly), not still loading
        assert (ARTIFACTS / "ui-charts.png").stat().st_size > 20_000
        # what the model wrote: a run's page shows its completions.jsonl rows as a table (completions.json)
        from mlflow.tracking import MlflowClient

        client = MlflowClient(tracking_uri=store)
        child = next(
            r
            for r in client.search_runs([client.get_experiment_by_name("example-grid").experiment_id])
            if r.data.tags.get("mlflow.parentRunId")
        )
        folder = tmp_path / child.data.tags["run_dir"]  # (relative to the sweep's folder, or absolute)
        first = json.loads((folder / "completions.jsonl").read_text().splitlines()[0])
        run_page = f"{table.split('/runs?')[0]}/runs/{child.info.run_id}/artifacts/completions.json"
        html, text = browse(chromium, run_page, tmp_path / "profile-run", ARTIFACTS / "ui-completions.png")
        assert "View as table" in text and "completion" in text and "advantage" in text
        assert first["prompt"] in text and first["completion"] in text, (first, text[:2000])
        # the control: the same experiment without the address's parameters opens the GenAI view here
        plain = table.split("/runs?")[0]
        assert "Overview" in browse(chromium, plain, tmp_path / "profile-plain")[1]


# the parallel-coordinates chart once drawn: MLflow draws it with parcoord-es (SVG axes, lines on canvases) from
# its React component's props (one row per line), read here from the component that holds them
PARCOORDS = """(() => { const el = document.querySelector('.parcoords'); if (!el) return null;
  const key = Object.keys(el).find(k => k.startsWith('__reactFiber$')); let f = key && el[key];
  while (f && !(f.memoizedProps && f.memoizedProps.selectedParams && f.memoizedProps.data)) f = f.return;
  const axes = [...el.querySelectorAll('.dimension .label')].length;
  if (!f || !axes) return null;
  return {params: f.memoizedProps.selectedParams, metrics: f.memoizedProps.selectedMetrics, axes: axes,
          canvases: el.querySelectorAll('canvas').length, rows: f.memoizedProps.data}; })()"""


@pytest.mark.longest  # ~35 s
def test_grpo_ui_opens_a_search_as_its_trials_and_a_parallel_coordinates_chart(tmp_path):
    """A search's view: one row per trial (not per seed) with its searched parameters, objective and
    state, best first; pruned trials shown as pruned with the step they stopped at; the parallel
    coordinates of the parameters against the objective with one line per finished trial."""
    import optuna

    chromium = chromium_path()
    spec = yaml.safe_load((ROOT / "experiments" / "search_lr_beta.yaml").read_text())
    spec["base"].update(max_steps=8, stl_window=4, cache_dir=str(CACHE), baseline_prompts=16)
    spec.update(n_trials=6, seeds=[0], pruner={"type": "median", "warmup_steps": 4, "startup_trials": 2})
    (tmp_path / "search.yaml").write_text(yaml.safe_dump(spec, sort_keys=False))
    store, journal = f"sqlite:///{tmp_path}/mlflow.db", f"{tmp_path}/journal.log"
    done = run_grpo_here(
        "sweep",
        "search.yaml",
        "--storage",
        f"journal:///{journal}",
        "--tracking-uri",
        store,
        "--out-root",
        str(tmp_path / "runs"),
        cwd=tmp_path,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    assert "sweep search-lr-beta: the search's trials in MLflow" in done.stdout
    assert "grouped by grid point" not in done.stdout
    from optuna.storages import JournalStorage
    from optuna.storages.journal import JournalFileBackend

    trials = optuna.load_study(study_name="search-lr-beta", storage=JournalStorage(JournalFileBackend(journal))).trials
    finished = [t for t in trials if t.state == optuna.trial.TrialState.COMPLETE]
    pruned = [t for t in trials if t.state == optuna.trial.TrialState.PRUNED]
    assert len(trials) == 6 and len(finished) >= 2 and pruned  # the view has both kinds to show

    with serving_ui(store, tmp_path) as lines:
        links = dict(re.findall(r"(the search's trials|parallel coordinates).*?(http://\S+)", lines))
        table, charts = links["the search's trials"], links["parallel coordinates"]
        ARTIFACTS.mkdir(parents=True, exist_ok=True)
        _, page = browse(chromium, table, tmp_path / "profile-table", ARTIFACTS / "ui-search-table.png")
        names = re.findall(r"search-lr-beta-t(\d+)-\S+", page)
        assert sorted(set(map(int, names))) == list(range(6))  # one row per trial
        assert "seed0" not in page  # the seeds' runs are one click below, not rows
        for column in ("learning_rate", "beta", "steps_to_learn_mean", "pruned_after_step", "status"):
            assert column in page, column
        assert page.count(" pruned ") >= len(pruned)  # each pruned trial's state
        listed = sorted(trials, key=lambda t: page.index(f"search-lr-beta-t{t.number}-"))
        assert [t.value for t in listed[: len(finished)]] == sorted(t.value for t in finished)  # best first
        assert all(t.state != optuna.trial.TrialState.COMPLETE for t in listed[len(finished) :])  # then the rest
        chart = evaluate(chromium, charts, tmp_path / "profile-charts", PARCOORDS, ARTIFACTS / "ui-search-charts.png")
        assert chart is not None, "the parallel-coordinates chart was not drawn"
        assert chart["params"] == ["learning_rate", "beta"] and chart["metrics"] == ["steps_to_learn_mean"]
        assert chart["axes"] == 3 and chart["canvases"] > 0
        # one line per finished trial, at its parameters and objective (a pruned trial has none)
        lines = sorted((float(r["learning_rate"]), float(r["beta"]), r["steps_to_learn_mean"]) for r in chart["rows"])
        expected = sorted((t.params["learning_rate"], t.params["beta"], t.value) for t in finished)
        assert len(lines) == len(expected) and all(a == pytest.approx(b) for a, b in zip(lines, expected)), lines
