"""What `grpo ui` opens: a sweep's runs in MLflow's model-training view, grouped by the sweep's grid
axes, with the columns and curves a comparison needs, for a browser that has never seen MLflow.

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


def _line_chart(metric: str, section_id: str) -> dict:
    """A line chart card as the MLflow UI stores one (its RunsChartsLineCardConfig fields)."""
    return {"uuid": f"grpo-{metric}", "type": "LINE", "runsCountToCompare": 10, "metricSectionId": section_id,
            "deleted": False, "isGenerated": True, "displayName": metric, "metricKey": metric,
            "selectedMetricKeys": [metric], "lineSmoothness": 0, "xAxisScaleType": "linear", "scaleType": "linear",
            "range": {}, "xAxisKey": "step", "selectedXAxisMetricKey": "", "yAxisKey": "metric",
            "yAxisExpressions": [], "ignoreOutliers": False, "useGlobalXaxisKey": True,
            "useGlobalLineSmoothing": True}


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
        "groupBy": {"aggregateFunction": "average",
                    "groupByKeys": [{"mode": "tag", "groupByData": f"variant.{a}"} for a in axes]} if axes else None,
        "runsHiddenMode": "SHOW_ALL",
        "useGroupedValuesInCharts": True,
        "hideEmptyCharts": True,
        # the reward curves first: one section of the curves a comparison reads, mean and band per group
        "compareRunSections": [{"uuid": "grpo-section", "name": SECTION, "display": True, "isReordered": False,
                                "deleted": False, "isGenerated": True}],
        "compareRunCharts": [_line_chart(m, "grpo-section") for m in CHARTED],
        "isAccordionReordered": True,  # keep this section first (MLflow sorts generated sections by name)
        # per-step rewards of a batch of 64 are noisy: MLflow's smoothing (0-100) shows the trend
        "globalLineChartConfig": {"xAxisKey": "step", "lineSmoothness": 70, "selectedXAxisMetricKey": ""},
    }


def publish_view(client, experiment_id: str, sweep: str, axes: list[str]) -> str:
    """Store the sweep's view on its experiment (idempotent); returns the share key."""
    state = view_state(sweep, axes)
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
        found += client.search_runs(experiments[i:i + 100], filter_string=query, order_by=["attributes.start_time DESC"],
                                    max_results=1)
    return max(found, key=lambda r: r.info.start_time, default=None)


def sweep_links(client, parent_run, base: str) -> dict[str, str]:
    """Publish the view of the sweep that `parent_run` heads; its addresses by mode (table, charts)."""
    axes = list(json.loads(parent_run.data.params.get("grid", "{}") or "{}"))
    key = publish_view(client, parent_run.info.experiment_id, parent_run.data.tags["sweep"], axes)
    return {mode: sweep_url(base, parent_run.info.experiment_id, key, mode) for mode in MODES}


def describe_links(name: str, links: dict[str, str], note: str = "") -> str:
    """Two lines: where the sweep's comparison is, as a table and as charts."""
    return (f"sweep {name}: its runs grouped by grid point in MLflow{note}: {links['table']}\n"
            f"sweep {name}: reward curves per group (mean and band): {links['charts']}")
