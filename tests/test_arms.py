"""Named arms (sweeps/arms.py): a grid of variants that differ in several keys, without their product.
The spec is read and checked; a sweep trains each arm once per seed; its run folders tell their arm
back, so a new journal adopts them and a report compares arms as it compares an axis's values."""

import pytest
import yaml

from conftest import CACHE, ROOT, run_grpo_here as grpo_here

BASE = {"cache_dir": str(CACHE), "max_steps": 2, "baseline_prompts": 8, "stl_window": 2}
ARMS = {
    "warmup": {"warmup_steps": 2, "learning_rate": 3e-4},
    "no_warmup": {"warmup_steps": 0, "learning_rate": 3e-4},
    "lr_matched": {"warmup_steps": 0, "learning_rate": 1.5e-4},
}


def _write(tmp_path, name="arms", **fields):
    data = {"name": name, "base": BASE, "arms": ARMS, "seeds": [0], **fields}
    (tmp_path / f"{name}.yaml").write_text(yaml.safe_dump(data, sort_keys=False))
    return tmp_path / f"{name}.yaml"


def test_arms_are_a_grid_axis_whose_points_carry_each_arms_values(tmp_path):
    from sweeps.spec import load_spec, point_key

    spec = load_spec(_write(tmp_path, grid={"beta": [0.0, 0.04]}, replication_seeds=[1]))
    assert list(spec.grid) == ["arm", "beta"] and spec.grid["arm"] == ["warmup", "no_warmup", "lr_matched"]
    points = spec.grid_points()
    assert len(points) == 3 * 2 * 2 and len({point_key(p) for p in points}) == 12  # no product of the arms' keys
    cfg = spec.config_for({"arm": "lr_matched", "beta": 0.04, "seed": 1})
    assert (cfg.warmup_steps, cfg.learning_rate, cfg.beta, cfg.seed) == (0, 1.5e-4, 0.04, 1)
    for point in points:  # a run's config tells its point back
        assert spec.point_of(yaml.safe_load(yaml.safe_dump(spec.config_for(point).to_dict()))) == point
    assert spec.point_of({**spec.config_for(points[0]).to_dict(), "learning_rate": 2e-4})["arm"] is None
    assert load_spec(_write(tmp_path, grid={"arm": ["lr_matched", "warmup"]})).grid == {"arm": ["lr_matched", "warmup"]}


@pytest.mark.parametrize(
    "fields,needle",
    [
        (
            {"arms": {"a": {"warmup_steps": 1}, "b": {"learning_rate": 1e-4}}},
            "arms.b.learning_rate: every arm sets the same keys",
        ),
        ({"arms": {"a": {"warmup_steps": 1}, "b": {"warmup_steps": 1}}}, "arms.b: sets what arms.a sets"),
        ({"arms": {"a": {"max_steps": 3}, "b": {"max_steps": 4}}}, "arms.a.max_steps: is also in base, grid or search"),
        ({"arms": {"a": {"seed": 3}}}, "arms.a.seed: unknown key"),
        ({"arms": {"a": {"warmup_step": 3}}}, "arms.a.warmup_step: unknown key"),
        ({"arms": {"a": {"warmup_steps": "x"}}}, "arms.a.warmup_steps:"),
        ({"arms": []}, "arms: []; allowed: a mapping of arm names"),
        ({"arms": {"a b": {"warmup_steps": 1}}}, "arms.a b: allowed: a name of letters"),
        (
            {"grid": {"arm": ["warmup", "nope"]}},
            "grid.arm: 'nope' is not an arm; allowed: warmup, no_warmup, lr_matched",
        ),
        ({"arms": None, "grid": {"arm": ["a"]}}, "grid.arm: names arms the spec does not define"),
    ],
)
def test_a_bad_arm_is_named_in_one_line(tmp_path, fields, needle):
    from grpo_core.util.errors import UserInputError
    from sweeps.spec import load_spec

    path = _write(tmp_path, **fields)
    if fields.get("arms", 0) is None:  # no arms at all
        data = yaml.safe_load(path.read_text())
        del data["arms"]
        path.write_text(yaml.safe_dump(data))
    with pytest.raises(UserInputError) as exc:
        load_spec(path)
    assert needle in str(exc.value) and "\n" not in str(exc.value)


def test_a_sweep_of_arms_trains_each_once_and_a_new_journal_adopts_them(tmp_path):
    import optuna

    from sweeps.deciding.verdicts import check_paired
    from sweeps.driving.adopt import adopt_run_folders, finished_folders
    from sweeps.reporting.report_inputs import collect_runs
    from sweeps.spec import load_spec

    _write(
        tmp_path,
        report={
            "tests": [
                {
                    "kind": "paired",
                    "statement": "s",
                    "axis": "arm",
                    "treatment": ["no_warmup", "lr_matched"],
                    "control": "warmup",
                    "direction": "lower",
                }
            ]
        },
    )
    res = grpo_here("sweep", "arms.yaml", cwd=tmp_path)
    assert res.returncode == 0, res.stderr[-3000:]
    root = tmp_path / "results/local/sweeps"
    spec = load_spec(tmp_path / "arms.yaml")
    found = finished_folders(root, spec)
    assert len(found) == 3
    runs, left_out = collect_runs(root, spec)
    assert sorted(r.point["arm"] for r in runs) == ["lr_matched", "no_warmup", "warmup"] and not left_out
    for run in runs:  # each folder holds its arm's values, as trained
        assert {k: run.config[k] for k in ARMS[run.point["arm"]]} == ARMS[run.point["arm"]]
    verdict = check_paired(spec, runs, spec.report["tests"][0])  # arms compared as an axis's values
    assert [c.label for c in verdict.comparisons] == ["all runs (arm=no_warmup)", "all runs (arm=lr_matched)"]
    assert all(c.n_pairs == 1 for c in verdict.comparisons)

    # a fresh clone (no journal): the run folders decide what is done, each adopted at its arm's point
    study = optuna.create_study(study_name="arms", storage=optuna.storages.InMemoryStorage())
    assert adopt_run_folders(study, spec, root) == 3
    assert sorted((t.params["arm"], t.params["seed"]) for t in study.get_trials()) == [
        ("lr_matched", 0),
        ("no_warmup", 0),
        ("warmup", 0),
    ]


def test_the_long_c2_specs_lr_matched_arm_runs_at_its_ramps_mean_rate():
    # r2_warmup_long_cpu.yaml: the LR-matched arm withholds what the ramp withholds, spread over the run
    from grpo_core.algo.schedule import lr_multiplier
    from sweeps.spec import load_spec

    spec = load_spec(ROOT / "experiments/real/cpu/r2_warmup_long_cpu.yaml", check_points=False)
    ramp, matched = spec.config_for({"arm": "warmup", "seed": 20}), spec.config_for({"arm": "lr_matched", "seed": 20})
    mean = (
        sum(
            ramp.learning_rate * lr_multiplier(s, ramp.effective_warmup_steps, ramp.max_steps, ramp.lr_scheduler_type)
            for s in range(ramp.max_steps)
        )
        / ramp.max_steps
    )
    assert matched.effective_warmup_steps == 0 and matched.learning_rate == pytest.approx(mean, rel=1e-12)
    assert spec.config_for({"arm": "no_warmup", "seed": 20}).learning_rate == ramp.learning_rate


def test_the_long_c2_specs_early_matched_arm_runs_at_its_ramps_mean_over_the_first_50_steps():
    # the arm matched up to learning: the ramp's mean rate over the ~50 updates before the
    # warmup arm learns, so that by then it has delivered what the ramp delivered (40 peak-steps)
    from grpo_core.algo.schedule import lr_multiplier
    from sweeps.spec import load_spec

    spec = load_spec(ROOT / "experiments/real/cpu/r2_warmup_long_cpu.yaml", check_points=False)
    ramp, early = (
        spec.config_for({"arm": "warmup", "seed": 20}),
        spec.config_for({"arm": "lr_matched_early", "seed": 20}),
    )
    delivered = sum(
        ramp.learning_rate * lr_multiplier(s, ramp.effective_warmup_steps, ramp.max_steps, ramp.lr_scheduler_type)
        for s in range(50)
    )
    assert delivered == pytest.approx(40 * ramp.learning_rate, rel=1e-12)
    assert early.effective_warmup_steps == 0 and early.learning_rate == pytest.approx(delivered / 50, rel=1e-12)
