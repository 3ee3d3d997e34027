"""`import grpo_lab`: the Python entry points a notebook uses (grpo_lab/api.py), end to end on the tiny
model, with nothing else imported; and the README's example."""

import re

import pytest

from conftest import CACHE, ROOT


def test_config_train_read_back_sweep_and_verdicts(tmp_path, monkeypatch):
    import grpo_lab

    monkeypatch.chdir(tmp_path)
    cfg = grpo_lab.config(cache_dir=str(CACHE), max_steps=4, stl_window=2, baseline_prompts=8)
    assert isinstance(cfg, grpo_lab.GRPOConfig) and cfg.max_steps == 4
    run = grpo_lab.train(cfg, out=tmp_path / "run", loss_type="dr_grpo")  # keys override a config
    assert run.summary["status"] == "finished" and run.config["loss_type"] == "dr_grpo"
    assert [m["step"] for m in run.metrics] == [1, 2, 3, 4] and len(run.completions) == 4 * 8
    frame = run.dataframe()
    assert list(frame.index) == [1, 2, 3, 4] and frame["reward"].tolist() == [m["reward"] for m in run.metrics]
    assert grpo_lab.read_run(tmp_path / "run").summary == run.summary
    with pytest.raises(Exception, match="loss_type.*allowed"):  # a bad key: one line, nothing trained
        grpo_lab.config(loss_type="token_mean")
    assert not (tmp_path / "results").exists()

    spec = tmp_path / "grid.yaml"
    spec.write_text(f"name: api-grid\nclaim: C2\nbase: {{cache_dir: {CACHE}, max_steps: 4, stl_window: 2, "
                    "baseline_prompts: 8}\ngrid: {warmup_ratio: [0.0, 0.5]}\nseeds: [0]\nreplication_seeds: [1]\nobjective: steps_to_learn\n"
                    "report: {figures: [], tests: [{kind: paired, statement: warmup off learns sooner, metric: "
                    "steps_to_learn, axis: warmup_ratio, treatment: [0.0], control: 0.5, direction: lower}]}\n")
    sweep = grpo_lab.sweep(spec, storage=f"journal:///{tmp_path}/j.log", tracking_uri=f"sqlite:///{tmp_path}/m.db",
                           out_root=tmp_path / "runs")
    assert sweep.exit_code == 0 and [t["state"] for t in sweep.trials] == ["COMPLETE"] * 4
    assert len(sweep.runs()) == 4 and all(r.summary["status"] == "finished" for r in sweep.runs())
    assert grpo_lab.trials(spec, storage=f"journal:///{tmp_path}/j.log").trials == sweep.trials
    verdict, auc = grpo_lab.verdicts(spec, tmp_path / "runs")  # steps_to_learn, and its reward-AUC twin
    assert verdict.statement == "warmup off learns sooner" and verdict.verdict.startswith("inconclusive")  # 1 + 1 seeds
    assert auc.statement.startswith("warmup off learns sooner (reward AUC") and auc.verdict.startswith("inconclusive")
    experiments = tmp_path / "experiments"
    experiments.mkdir()
    spec.rename(experiments / spec.name)
    path = grpo_lab.report(experiments, out=tmp_path)  # from the sweep's folders (tmp_path/runs), training nothing
    assert path == tmp_path / "REPORT.md" and "## C2 — grid" in path.read_text() and "4 finished" in path.read_text()


def test_the_readme_example_runs(tmp_path, monkeypatch):
    # the README's Python example, as written there, with a shorter run
    readme = (ROOT / "README.md").read_text()
    code = re.search(r"```python\n(import grpo_lab\n.*?)```", readme, re.DOTALL).group(1)
    assert "import grpo_lab" in code and "from grpo_core" not in code and "import sweeps" not in code
    monkeypatch.chdir(tmp_path)
    code = code.replace("max_steps=30", f"max_steps=4, stl_window=2, baseline_prompts=8, cache_dir={str(CACHE)!r}")
    namespace = {}
    exec(compile(code, "README.md", "exec"), namespace)
    assert namespace["run"].summary["status"] == "finished"
