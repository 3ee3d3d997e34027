"""`grpo ui` in a real browser that has never seen MLflow (Debian's chromium, headless, a fresh
profile): the printed address lands on the sweep's runs in the model-training view, grouped by
grid point, with the summary columns; the charts address shows the reward curves per group first;
a run's page shows what the model wrote (its completions as a table).
The screenshots are kept under results/local/test-artifacts/."""

import json
import os
import re
import shutil
import signal
import subprocess
import sys
import time
import urllib.request

import pytest
import yaml

from conftest import CACHE, ROOT, run_grpo_here
from servers import free_port

ARTIFACTS = ROOT / "results" / "local" / "test-artifacts"


def _chromium() -> str:
    found = shutil.which("chromium") or shutil.which("chromium-browser")
    if found is None and os.geteuid() == 0 and shutil.which("apt-get"):
        subprocess.run(["apt-get", "install", "-y", "-q", "-o", "DPkg::Lock::Timeout=600", "chromium"], capture_output=True,
                       env={**os.environ, "DEBIAN_FRONTEND": "noninteractive"})
        found = shutil.which("chromium")
    if found is None:
        pytest.skip("Debian's chromium is not installed and could not be installed here")
    return found


def _browse(chromium: str, url: str, profile, screenshot=None) -> tuple[str, str]:
    """The page after its scripts ran, in a fresh profile: its HTML and its text (and a screenshot
    of that same state, taken by the same browser run after it wrote the HTML)."""
    args = [chromium, "--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
            f"--user-data-dir={profile}", "--window-size=1600,1000", "--virtual-time-budget=60000", "--dump-dom"]
    if screenshot is not None:
        args.append(f"--screenshot={screenshot}")
    dom = subprocess.run([*args, url], capture_output=True, text=True, timeout=300).stdout
    return dom, re.sub(r"\s+", " ", re.sub(r"<[^>]+>", " ", dom))


def test_grpo_ui_opens_the_sweep_comparison_in_a_fresh_browser(tmp_path):
    chromium = _chromium()
    spec = yaml.safe_load((ROOT / "experiments" / "example-grid.yaml").read_text())
    spec["base"].update(max_steps=6, stl_window=2, cache_dir=str(CACHE), baseline_prompts=16)
    (tmp_path / "grid.yaml").write_text(yaml.safe_dump(spec, sort_keys=False))
    store = f"sqlite:///{tmp_path}/mlflow.db"
    done = run_grpo_here("sweep", "grid.yaml", "--storage", f"journal:///{tmp_path}/journal.log",
                         "--tracking-uri", store, "--out-root", str(tmp_path / "runs"), cwd=tmp_path)
    assert done.returncode == 0, done.stderr[-3000:]
    assert "sweep example-grid: its runs grouped by grid point in MLflow" in done.stdout  # the sweep prints it too

    port = free_port()
    env = {**os.environ, "PYTHONPATH": f"{ROOT / 'tests'}{os.pathsep}{ROOT}"}
    ui = subprocess.Popen([sys.executable, "-m", "grpo_lab", "ui", "--port", str(port), "--tracking-uri", store],
                          cwd=tmp_path, env=env, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True,
                          start_new_session=True)
    try:
        lines = [ui.stdout.readline() for _ in range(3)]
        links = dict(re.findall(r"(grouped by grid point|reward curves per group).*?(http://\S+)", "".join(lines)))
        table, charts = links["grouped by grid point"], links["reward curves per group"]
        assert "workflowType=machine_learning" in table and "viewStateShareKey=" in table
        deadline = time.monotonic() + 120
        while True:  # the server is up when its health check answers
            try:
                urllib.request.urlopen(f"http://127.0.0.1:{port}/health", timeout=2).read()
                break
            except OSError:
                assert time.monotonic() < deadline, "the MLflow UI did not start"
                time.sleep(0.5)
        ARTIFACTS.mkdir(parents=True, exist_ok=True)
        _, page = _browse(chromium, table, tmp_path / "profile-table", ARTIFACTS / "ui-table.png")
        assert "Overview" not in page and "Detect issues" not in page  # not the GenAI view
        assert "Runs" in page and "Model training" in page
        names = set(re.findall(r"example-grid-t\d+-\S+-seed\d", page))
        assert len(names) == 8  # every child run, by name
        assert "steps_to_learn" in page and "final_reward" in page and "learned" in page
        assert page.count("Group: variant.loss_type") == 4  # one group per grid point (2 × 2)
        chart_html, chart_page = _browse(chromium, charts, tmp_path / "profile-charts", ARTIFACTS / "ui-charts.png")
        assert "grpo-lab: the comparison" in chart_page
        assert chart_page.index("reward") < chart_page.index("grad_norm")  # the reward curves come first
        assert chart_html.count('class="main-svg"') >= 4  # the four charts were drawn (plotly), not still loading
        assert (ARTIFACTS / "ui-charts.png").stat().st_size > 20_000
        # what the model wrote: a run's page shows its completions.jsonl rows as a table (completions.json)
        from mlflow.tracking import MlflowClient

        client = MlflowClient(tracking_uri=store)
        child = next(r for r in client.search_runs([client.get_experiment_by_name("example-grid").experiment_id])
                     if r.data.tags.get("mlflow.parentRunId"))
        folder = tmp_path / child.data.tags["run_dir"]  # (relative to the sweep's folder, or absolute)
        first = json.loads((folder / "completions.jsonl").read_text().splitlines()[0])
        run_page = f"{table.split('/runs?')[0]}/runs/{child.info.run_id}/artifacts/completions.json"
        html, text = _browse(chromium, run_page, tmp_path / "profile-run", ARTIFACTS / "ui-completions.png")
        assert "View as table" in text and "completion" in text and "advantage" in text
        assert first["prompt"] in text and first["completion"] in text, (first, text[:2000])
        # the control: the same experiment without the address's parameters opens the GenAI view here
        plain = table.split("/runs?")[0]
        assert "Overview" in _browse(chromium, plain, tmp_path / "profile-plain")[1]
    finally:
        os.killpg(ui.pid, signal.SIGTERM)
        ui.wait(timeout=60)
