"""What `grpo ui` opens: a sweep's runs in MLflow's model-training view, for a browser that has never
seen MLflow. A grid: its runs grouped by the grid axes, with the columns and curves a comparison
needs. A search: one row per trial (its parameters, objective and state, best first; its seeds' runs
nested under it), a parallel-coordinates chart of the searched parameters against the objective,
the best trials' reward curves and, with several objectives, the objectives against each other.

Only MLflow's own public mechanisms (read from the MLflow 3.17 UI):
- the URL parameter `workflowType=machine_learning` selects the model-training view (otherwise the
  UI uses the browser's stored choice, GenAI by default: MLflow issue #24498);
- a shared view: the experiment tag `mlflow.sharedViewState.<key>` holds a runs-page state (search
  filter, order, columns, grouping, chart settings) as JSON, and the URL parameter
  `viewStateShareKey=<key>` applies it, as the UI's own "Share" button does;
- the experiment tag `mlflow.experiment.primaryMetric.name` puts that metric's chart first.
"""

from __future__ import annotations

import hashlib
import json
from typing import Optional
from urllib.parse import urlencode

VIEW_TAG_PREFIX = "mlflow.sharedViewState."
PRIMARY_METRIC_TAG = "mlflow.experiment.primaryMetric.name"
PRIMARY_METRIC = "reward"
SUMMARY_COLUMNS = ("steps_to_learn", "learned", "final_reward")
CHARTED = ("reward", "loss", "grad_norm", "completions/mean_length")  # first, in this order
SECTION = "grpo-lab: the comparison"
SEARCH_SECTION = "grpo-lab: the search"
BEST_TRIALS = 10  # the reward curves of this many trials, best first (MLflow's FIRST_10_RUNS visibility)


def _line_chart(metric: str, section_id: str) -> dict:
    """A line chart card as the MLflow UI stores one (its RunsChartsLineCardConfig fields)."""
    return {
        "uuid": f"grpo-{metric}",
        "type": "LINE",
        "runsCountToCompare": 10,
        "metricSectionId": section_id,
        "deleted": False,
        "isGenerated": True,
        "displayName": metric,
        "metricKey": metric,
        "selectedMetricKeys": [metric],
        "lineSmoothness": 0,
        "xAxisScaleType": "linear",
        "scaleType": "linear",
        "range": {},
        "xAxisKey": "step",
        "selectedXAxisMetricKey": "",
        "yAxisKey": "metric",
        "yAxisExpressions": [],
        "ignoreOutliers": False,
        "useGlobalXaxisKey": True,
        "useGlobalLineSmoothing": True,
    }


def view_state(sweep: str, axes: list[str]) -> dict:
    """The runs page of one sweep: its trial runs (not the parent), newest first, grouped by every
    grid axis (mean over the group's runs, the band from min to max in the charts), with the summary
    metrics and every variant tag as columns."""
    columns = [f"metrics.`{m}`" for m in SUMMARY_COLUMNS]
    columns += [f"tags.`variant.{a}`" for a in axes] + ["tags.`seed`", "tags.`seed_set`"]
    return {
        "searchFilter": f"tags.sweep = '{sweep}' AND tags.trial_number LIKE '%'",
        "orderByKey": "attributes.start_time",
        "orderByAsc": False,
        "selectedColumns": columns,
        "groupBy": {
            "aggregateFunction": "average",
            "groupByKeys": [{"mode": "tag", "groupByData": f"variant.{a}"} for a in axes],
        }
        if axes
        else None,
        "runsHiddenMode": "SHOW_ALL",
        "useGroupedValuesInCharts": True,
        "hideEmptyCharts": True,
        # the reward curves first: one section of the curves a comparison reads, mean and band per group
        "compareRunSections": [
            {
                "uuid": "grpo-section",
                "name": SECTION,
                "display": True,
                "isReordered": False,
                "deleted": False,
                "isGenerated": True,
            }
        ],
        "compareRunCharts": [_line_chart(m, "grpo-section") for m in CHARTED],
        "isAccordionReordered": True,  # keep this section first (MLflow sorts generated sections by name)
        # per-step rewards of a batch of 64 are noisy: MLflow's smoothing (0-100) shows the trend
        "globalLineChartConfig": {"xAxisKey": "step", "lineSmoothness": 70, "selectedXAxisMetricKey": ""},
    }


def _parallel_chart(params: list[str], objective: str, section_id: str) -> dict:
    """A parallel-coordinates card (RunsChartsParallelCardConfig): one axis per parameter, the
    objective last; a run without the objective (pruned, failed) draws no line."""
    return {
        "uuid": "grpo-parallel",
        "type": "PARALLEL",
        "runsCountToCompare": 100,
        "metricSectionId": section_id,
        "deleted": False,
        "isGenerated": True,
        "displayName": f"the searched parameters against {objective}",
        "selectedParams": params,
        "selectedMetrics": [objective],
        "showAllRuns": True,
    }


def _scatter_chart(x: str, y: str, section_id: str) -> dict:
    """A scatter card (RunsChartsScatterCardConfig) of two metrics: several objectives against each other."""
    return {
        "uuid": f"grpo-scatter-{x}-{y}",
        "type": "SCATTER",
        "runsCountToCompare": 100,
        "metricSectionId": section_id,
        "deleted": False,
        "isGenerated": True,
        "displayName": f"{y} against {x}",
        "xaxis": {"key": x, "type": "METRIC"},
        "yaxis": {"key": y, "type": "METRIC"},
    }


def objective_metric(name: str) -> str:
    """The trial run's metric that holds objective `name`'s mean over the trial's seeds."""
    return f"{name}_mean"


def search_view_state(sweep: str, params: list[str], objectives: list[str], directions: list[str]) -> dict:
    """The runs page of one search: its trial runs, best first by the first objective, each with its
    searched parameters, objective values and state (finished, pruned with the step it stopped at,
    failed) as columns and its seeds' runs nested one click below; charts: the parallel coordinates
    of the parameters against the first objective, the best trials' reward curves (the mean over the
    trial's seeds), and with several objectives each against the first."""
    first = objective_metric(objectives[0])
    columns = [f"params.`{p}`" for p in params] + [f"metrics.`{objective_metric(o)}`" for o in objectives]
    columns += ["tags.`status`", "metrics.`pruned_after_step`", "metrics.`learned_fraction`", "params.`seeds`"]
    charts = [
        _parallel_chart(params, first, "grpo-search"),
        {
            **_line_chart("reward", "grpo-search"),
            "displayName": f"reward, mean over seeds: the first {BEST_TRIALS} trials listed",
        },
    ]
    charts += [_scatter_chart(first, objective_metric(o), "grpo-search") for o in objectives[1:]]
    return {
        "searchFilter": f"tags.sweep = '{sweep}' AND tags.sweep_role = 'trial'",
        "orderByKey": f"metrics.`{first}`",
        "orderByAsc": directions[0] == "minimize",
        "selectedColumns": columns,
        "groupBy": None,
        "runsHiddenMode": "FIRST_10_RUNS",  # the charts' curves: the best trials (the parallel chart shows all)
        "hideEmptyCharts": True,
        "compareRunSections": [
            {
                "uuid": "grpo-search",
                "name": SEARCH_SECTION,
                "display": True,
                "isReordered": False,
                "deleted": False,
                "isGenerated": True,
            }
        ],
        "compareRunCharts": charts,
        "isAccordionReordered": True,
        "globalLineChartConfig": {"xAxisKey": "step", "lineSmoothness": 70, "selectedXAxisMetricKey": ""},
    }


def publish_view(client, experiment_id: str, sweep: str, axes: list[str], state: Optional[dict] = None) -> str:
    """Store the sweep's view (`state`, else the grid's view of `axes`) on its experiment
    (idempotent); returns the share key."""
    state = view_state(sweep, axes) if state is None else state
    key = "grpo-" + hashlib.sha256(json.dumps(state, sort_keys=True).encode()).hexdigest()[:16]
    client.set_experiment_tag(experiment_id, VIEW_TAG_PREFIX + key, json.dumps(state))
    client.set_experiment_tag(experiment_id, PRIMARY_METRIC_TAG, PRIMARY_METRIC)
    return key


MODES = {"table": "TABLE", "charts": "CHART"}  # the runs table (columns) or the charts (curves per group)


def sweep_url(base: str, experiment_id: str, key: str, mode: str = "table") -> str:
    """The address of the sweep's view on a UI or tracking server at `base` (http://host:port), as
    its table (grouped runs with the summary columns) or its charts (curves per group)."""
    query = urlencode({"workflowType": "machine_learning", "viewStateShareKey": key, "compareRunsMode": MODES[mode]})
    return f"{base.rstrip('/')}/#/experiments/{experiment_id}/runs?{query}"


def find_sweep(client, name: Optional[str] = None):
    """The parent run of the named sweep, or of the sweep started last; None when there is none."""
    experiments = [e.experiment_id for e in client.search_experiments()]
    query = "tags.sweep_role = 'parent'" + (f" AND tags.sweep = '{name}'" if name else "")
    found = []
    for i in range(0, len(experiments), 100):
        found += client.search_runs(
            experiments[i : i + 100], filter_string=query, order_by=["attributes.start_time DESC"], max_results=1
        )
    return max(found, key=lambda r: r.info.start_time, default=None)


def tag_trial_runs(client, parent_run) -> None:
    """Mark a search's trial runs (not its seeds' runs) with sweep_role = trial, which the search's
    view filters on, where a search recorded before that tag existed left them unmarked."""
    sweep = parent_run.data.tags["sweep"]
    query = f"tags.sweep = '{sweep}' AND tags.trial_number LIKE '%'"
    token = None
    while True:
        page = client.search_runs(
            [parent_run.info.experiment_id], filter_string=query, max_results=1000, page_token=token
        )
        for run in page:
            if "seed" not in run.data.tags and "sweep_role" not in run.data.tags:
                client.set_tag(run.info.run_id, "sweep_role", "trial")
        token = page.token
        if not token:
            return


def sweep_links(client, parent_run, base: str) -> dict[str, str]:
    """Publish the view of the sweep that `parent_run` heads; its addresses by mode (table, charts),
    and "search": True for a search's view."""
    params = parent_run.data.params
    axes = list(json.loads(params.get("grid", "{}") or "{}"))
    state = None
    if parent_run.data.tags.get("mode") == "search":
        tag_trial_runs(client, parent_run)
        searched = list(json.loads(params.get("search", "{}") or "{}"))
        state = search_view_state(
            parent_run.data.tags["sweep"],
            searched + axes,
            params.get("objective", "steps_to_learn").split(","),
            params.get("direction", "minimize").split(","),
        )
    key = publish_view(client, parent_run.info.experiment_id, parent_run.data.tags["sweep"], axes, state)
    links = {mode: sweep_url(base, parent_run.info.experiment_id, key, mode) for mode in MODES}
    return {**links, "search": state is not None}


def describe_links(name: str, links: dict, note: str = "") -> str:
    """Two lines: where the sweep's comparison is, as a table and as charts (a search's: its trials,
    and the parallel coordinates with the best trials' curves)."""
    if links.get("search"):
        return (
            f"sweep {name}: the search's trials in MLflow (parameters, objective, state; best first){note}: "
            f"{links['table']}\n"
            f"sweep {name}: parallel coordinates of the searched parameters against the objective, and the best "
            f"trials' reward curves: {links['charts']}"
        )
    return (
        f"sweep {name}: its runs grouped by grid point in MLflow{note}: {links['table']}\n"
        f"sweep {name}: reward curves per group (mean and band): {links['charts']}"
    )
