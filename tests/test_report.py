"""Verdicts come from the statistics: hand-made runs with known outcomes, and `grpo reproduce
--quick` (trimmed) producing a report with a section, a verdict and figures per claim."""


import yaml

from conftest import CACHE, ROOT, run_grpo
from sweeps.report import Run, check_better, check_differ, check_zero_loss_step1
from sweeps.spec import SweepSpec


def _spec(grid):
    return SweepSpec(name="t", base={}, grid=grid, seeds=[0, 1, 2, 3, 4, 5])


def _run(point, stl=None, loss1=0.0, grad1=1.0, final=0.3, **config):
    cfg = {"max_steps": 100, "stl_window": 20, "task": "addition", "loss_type": "grpo", "num_iterations": 1,
           "beta": 0.0, **config, **point}
    summary = {"steps_to_learn": stl, "learned": int(stl is not None), "final_reward": final, "baseline_reward": 0.2}
    return Run(point, cfg, summary, [{"loss": loss1, "grad_norm": grad1, "reward": 0.2}])


def test_better_holds_everywhere_only_somewhere_or_nowhere():
    spec = _spec({"warmup_ratio": [0.0, 0.25], "learning_rate": [1e-4, 1e-3]})
    runs = []
    for seed in range(6):
        # lr 1e-4: warmup off learns at 20-25, warmup on never → clear in 12 of 12 pairs (p = 1/924)
        runs.append(_run({"warmup_ratio": 0.0, "learning_rate": 1e-4, "seed": seed}, stl=20 + seed))
        runs.append(_run({"warmup_ratio": 0.25, "learning_rate": 1e-4, "seed": seed}, stl=None))
        # lr 1e-3: no difference
        runs.append(_run({"warmup_ratio": 0.0, "learning_rate": 1e-3, "seed": seed}, stl=50 + seed))
        runs.append(_run({"warmup_ratio": 0.25, "learning_rate": 1e-3, "seed": seed}, stl=50 + seed))
    test = {"statement": "s", "metric": "steps_to_learn", "axis": "warmup_ratio", "treatment": [0.0],
            "control": 0.25, "direction": "lower"}
    v = check_better(spec, runs, test)
    assert v.verdict == "holds only under learning_rate=0.0001"
    only_small = [r for r in runs if r.point["learning_rate"] == 1e-4]
    assert check_better(_spec({"warmup_ratio": [0.0, 0.25], "learning_rate": [1e-4]}), only_small, test).verdict == "holds"
    only_large = [r for r in runs if r.point["learning_rate"] == 1e-3]
    assert check_better(_spec({"warmup_ratio": [0.0, 0.25], "learning_rate": [1e-3]}), only_large, test).verdict == "does not hold"
    # the wrong direction is not evidence for the claim
    reverse = {**test, "treatment": [0.25], "control": 0.0}
    assert check_better(spec, runs, reverse).verdict == "does not hold"


def test_differ_detects_a_spread():
    spec = _spec({"loss_type": ["grpo", "bnpo", "dapo"]})
    runs = [_run({"loss_type": lt, "seed": s}, stl=base + s) for lt, base in (("grpo", 10), ("bnpo", 40), ("dapo", 80))
            for s in range(6)]
    test = {"statement": "s", "metric": "steps_to_learn", "axis": "loss_type"}
    assert check_differ(spec, runs, test).verdict == "holds"
    same = [_run({"loss_type": lt, "seed": s}, stl=30 + s) for lt in ("grpo", "bnpo", "dapo") for s in range(6)]
    assert check_differ(spec, same, test).verdict == "does not hold"


def test_zero_loss_step1_needs_every_condition():
    spec = _spec({"loss_type": ["grpo", "bnpo"]})
    good = [_run({"loss_type": "grpo", "seed": s}, stl=40, loss1=1e-8, grad1=1.5) for s in range(3)]
    bnpo = [_run({"loss_type": "bnpo", "seed": s}, stl=40, loss1=0.01, grad1=1.5) for s in range(3)]
    test = {"statement": "s"}
    assert check_zero_loss_step1(spec, good + bnpo, test).verdict == "holds"
    nonzero = [_run({"loss_type": "grpo", "seed": 9}, stl=40, loss1=1e-3)]
    assert check_zero_loss_step1(spec, good + nonzero + bnpo, test).verdict == "does not hold"
    never = [_run({"loss_type": "grpo", "seed": s}, stl=None, loss1=0.0) for s in range(3)]
    assert check_zero_loss_step1(spec, never + bnpo, test).verdict == "does not hold"


def test_reproduce_quick_writes_a_report_per_claim(tmp_path):
    exp = tmp_path / "experiments"
    exp.mkdir()
    for src in sorted((ROOT / "experiments").glob("c*.yaml")):
        data = yaml.safe_load(src.read_text())
        data["base"]["cache_dir"] = str(CACHE)  # reuse the cached tiny models
        (exp / src.name).write_text(yaml.safe_dump(data, sort_keys=False, allow_unicode=True))
    committed = ROOT / "results" / "REPORT.md"
    before = committed.read_bytes() if committed.exists() else None
    res = run_grpo("reproduce", "--quick", "--max-steps", "6", "--seeds", "2", "--experiments", str(exp),
                   "--out", str(tmp_path / "report"), cwd=tmp_path, timeout=900)
    assert res.returncode == 0, res.stderr[-3000:]
    report = (tmp_path / "report" / "REPORT.md").read_text()
    for claim in ("C1", "C2", "C3", "C4", "C5"):
        assert f"## {claim} — " in report
    assert report.count("**Verdict: ") == 8  # C1 1, C2 2, C3 2, C4 1, C5 2
    assert "Machine:" in report and "torch" in report and "grpo reproduce --quick" in report
    figures = sorted((tmp_path / "report" / "figures").glob("*.png"))
    assert len(figures) >= 10
    for fig in figures:
        assert fig.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and fig.stat().st_size > 5000
        assert f"figures/{fig.name}" in report
    assert (committed.read_bytes() if committed.exists() else None) == before  # never overwritten


def test_too_few_seeds_is_inconclusive_not_a_no():
    # 2 seeds a side: the best one-sided p is 1/C(4, 2) = 1/6 > 0.05 whatever the data
    spec = _spec({"advantage_noise_std": [0.0, 0.01]})
    runs = [_run({"advantage_noise_std": 0.01, "seed": s}, stl=10) for s in range(2)]
    runs += [_run({"advantage_noise_std": 0.0, "seed": s}, stl=None) for s in range(2)]
    test = {"statement": "s", "metric": "steps_to_learn", "axis": "advantage_noise_std", "treatment": [0.01],
            "control": 0.0, "direction": "lower"}
    v = check_better(spec, runs, test)
    assert v.verdict == "inconclusive (too few seeds)" and "0.167" in v.reason
    differ = {"statement": "s", "metric": "steps_to_learn", "axis": "advantage_noise_std"}
    assert check_differ(spec, runs, differ).verdict == "inconclusive (too few seeds)"
