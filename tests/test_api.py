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
    spec.write_text(
        f"name: api-grid\nclaim: C2\nbase: {{cache_dir: {CACHE}, max_steps: 4, stl_window: 2, "
        "baseline_prompts: 8}\ngrid: {warmup_ratio: [0.0, 0.5]}\nseeds: [0]\nreplication_seeds: [1]\nobjective: steps_to_learn\n"
        "report: {figures: [], tests: [{kind: paired, statement: warmup off learns sooner, metric: "
        "steps_to_learn, axis: warmup_ratio, treatment: [0.0], control: 0.5, direction: lower}]}\n"
    )
    sweep = grpo_lab.sweep(
        spec,
        storage=f"journal:///{tmp_path}/j.log",
        tracking_uri=f"sqlite:///{tmp_path}/m.db",
        out_root=tmp_path / "runs",
    )
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


# ---- the API refuses what the command refuses, by the same checks ----------------------------------
def _run_folder(tmp_path):
    folder = tmp_path / "run"
    folder.mkdir()
    (folder / "config.yaml").write_text("max_steps: 2\n")
    (folder / "summary.json").write_text('{"status": "finished", "steps_to_learn": 1}')
    (folder / "metrics.jsonl").write_text('{"step": 1, "reward": 0.5}\n{"step": 2, "reward": 0.7}\n')
    (folder / "completions.jsonl").write_text('{"step": 1, "completion": "4"}\n{"step": 2, "completion": "5"}\n')
    return folder


@pytest.mark.parametrize(
    "name, text",
    [
        ("summary.json", '{"status": "fini'),  # cut mid-write
        ("summary.json", "[1, 2]"),  # JSON, not a mapping
        ("config.yaml", "max_steps: [2\n"),
        ("config.yaml", "x: !!python/object/apply:os.getcwd []\n"),  # a tag: refused, never run
        ("completions.jsonl", '{"step": 1}\n{"step": 2, "comp\n{"step": 3}\n'),  # broken mid-file
        ("metrics.jsonl", '{"step": 1}\n[1]\n{"step": 3}\n'),  # a line that is not an object
        ("completions.jsonl", b"\x80\x81\xfe\xff" * 64),  # random bytes
    ],
)
def test_read_run_names_the_file_it_cannot_read(tmp_path, name, text):
    import grpo_lab
    from grpo_core.util.errors import UserInputError

    folder = _run_folder(tmp_path)
    (folder / name).write_bytes(text if isinstance(text, bytes) else text.encode())
    with pytest.raises(UserInputError) as err:
        grpo_lab.read_run(folder)
    message = str(err.value)
    assert message.startswith(str(folder / name)) and "allowed:" in message and "\n" not in message


def test_read_run_leaves_out_a_last_line_cut_mid_write(tmp_path):
    import grpo_lab

    folder = _run_folder(tmp_path)
    with open(folder / "metrics.jsonl", "a") as f:
        f.write('{"step": 3, "rew')  # a run killed while writing its last step
    assert [m["step"] for m in grpo_lab.read_run(folder).metrics] == [1, 2]


def test_trials_on_a_store_that_is_not_one_is_one_line(tmp_path):
    import grpo_lab
    from grpo_core.util.errors import UserInputError

    notes = tmp_path / "notes.txt"
    notes.write_text("my notes\n")
    with pytest.raises(UserInputError, match="is not a SQLite database") as err:
        grpo_lab.trials(ROOT / "experiments" / "example-grid.yaml", storage=f"sqlite:///{notes}")
    assert "\n" not in str(err.value) and notes.read_text() == "my notes\n"


def test_train_refused_leaves_the_users_folder_as_it_was(tmp_path):
    import grpo_lab
    from grpo_core.util.errors import UserInputError

    mine = tmp_path / "mine"
    mine.mkdir()
    (mine / "notes.txt").write_text("x")
    with pytest.raises(UserInputError, match="not empty"):
        grpo_lab.train(out=mine, cache_dir=str(CACHE), max_steps=1)
    assert sorted(p.name for p in mine.iterdir()) == ["notes.txt"]  # no lock file left behind


@pytest.mark.parametrize(
    "values",
    [
        {"dataset": "MIXED"},  # read by check_inputs: `grpo train` refused it, the API trained on it
        {"learning_rate": "fast"},
        {"lora_r": 10**12, "use_peft": True},
    ],
)
def test_the_api_refuses_what_grpo_train_refuses_with_the_same_line(tmp_path, values):
    import dataclasses

    import grpo_lab
    from conftest import run_grpo_here
    from grpo_core.util.errors import UserInputError

    mixed = tmp_path / "mixed.jsonl"
    mixed.write_text('{"prompt": "1+1=", "answer": 2}\n{"prompt": "2+2=", "answer": "four"}\n')
    values = {k: (str(mixed) if v == "MIXED" else v) for k, v in values.items()}
    res = run_grpo_here(
        "train",
        "--no-mlflow",
        "--set",
        f"cache_dir={CACHE}",
        *[a for k, v in values.items() for a in ("--set", f"{k}={str(v).lower() if v is True else v}")],
        "--out",
        str(tmp_path / "cli"),
    )
    assert res.returncode == 2
    base = grpo_lab.config(cache_dir=str(CACHE))
    with pytest.raises(UserInputError) as err:  # a GRPOConfig changed by hand is checked as a file would be
        grpo_lab.train(dataclasses.replace(base, **values), out=tmp_path / "api")
    assert res.stderr.strip() == f"grpo: error: {err.value}"
    assert not (tmp_path / "cli").exists() and not (tmp_path / "api").exists()
