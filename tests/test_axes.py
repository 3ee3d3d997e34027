"""The table of variant axes (grpo_core/algo/axes.py): every named axis's allowed values are its
registry's names, a name registered twice is refused, and a newly registered name is allowed by
the config and run by the trainer with no other change."""

import dataclasses

import pytest

from conftest import make_cfg
from grpo_core.algo import axes
from grpo_core.config.schema import GRPOConfig
from grpo_core.config.validation import validate
from grpo_core.util.errors import ConfigError


def test_every_key_of_the_table_is_a_config_key_and_every_stage_is_declared():
    fields = {f.name for f in dataclasses.fields(GRPOConfig)}
    for axis in axes.AXES:
        assert set(axis.keys) <= fields, axis
        assert axis.stage in axes.STAGES, axis
    stages = [axes.STAGES.index(a.stage) for a in axes.AXES]
    assert stages == sorted(stages)  # the table lists the axes in the order a step runs them


@pytest.mark.parametrize("axis", axes.named_axes(), ids=lambda a: a.keys[0])
def test_a_named_axis_allows_exactly_its_registered_names(axis):
    key = axis.keys[0]
    for name in axis.registry:
        try:
            validate(make_cfg(**{key: name}))
        except ConfigError as exc:  # only a name's own check may refuse it, with the rest of the config at defaults
            assert name in axis.registry.checks and str(exc).startswith(f"{key}: got {name} with "), exc
    with pytest.raises(ConfigError) as err:
        validate(make_cfg(**{key: "no_such_name"}))
    assert str(err.value) == f"{key}: unknown value 'no_such_name'; allowed: {', '.join(axis.registry)}"


@pytest.mark.parametrize("axis", axes.named_axes(), ids=lambda a: a.keys[0])
def test_registering_a_name_twice_is_refused(axis):
    name = next(iter(axis.registry))
    before = axis.registry.get(name)
    with pytest.raises(ValueError, match=f"'{name}' is registered already"):
        axis.registry.add(name, lambda *a: None)
    assert axis.registry.get(name) is before


def test_a_new_estimator_is_one_registered_function(monkeypatch):
    """What the seam promises: register a function, and the config allows its name and the trainer
    runs it (here a baseline of the group's minimum, so every advantage is ≥ 0)."""
    from grpo_core.algo.advantages import ADVANTAGE_ESTIMATORS
    from grpo_core.run import run_training

    def min_baseline(group_rewards):  # (num_groups, G) -> (num_groups, G)
        return group_rewards - group_rewards.min(dim=1, keepdim=True).values

    monkeypatch.setitem(ADVANTAGE_ESTIMATORS._entries, "group_min", min_baseline)
    monkeypatch.setitem(ADVANTAGE_ESTIMATORS.notes, "group_min", "r − the group's minimum")
    cfg = make_cfg(
        advantage_estimator="group_min", scale_rewards="none", max_steps=2, stl_window=1, log_completions_per_step=0
    )
    validate(cfg)
    import tempfile
    from pathlib import Path

    with tempfile.TemporaryDirectory() as tmp:
        summary = run_training(cfg, Path(tmp) / "run", progress=False)
        rows = [
            __import__("json").loads(line)
            for line in (Path(tmp) / "run" / "completions.jsonl").read_text().splitlines()
        ]
    assert summary["status"] == "finished"
    assert rows and min(r["advantage"] for r in rows) == 0.0  # each group's lowest reward gets exactly 0
    assert "group_min" in axes.markdown_table()  # and the docs' table lists it


NEW_VALUES = [  # two runs cover every newer value (each run costs ~10 s)
    {
        "advantage_estimator": "rloo",
        "scale_rewards": "none",
        "loss_type": "cispo",
        "epsilon_high": 5.0,
        "entropy_coef": 0.01,
        "overlong_buffer_len": 2,
        "delta": 1.5,
        "kl_estimator": "k2",
        "beta": 0.04,
    },
    {
        "loss_type": "sapo",
        "top_entropy_quantile": 0.2,
        "multi_objective_aggregation": "normalize_then_sum",
        "scale_rewards": "batch",
        "reward_funcs": ["exact_match", "format_digits"],
    },
]


@pytest.mark.parametrize("values", NEW_VALUES, ids=lambda v: v["loss_type"])
def test_the_newer_axes_train_on_the_tiny_model(values, tmp_path):
    """Each newer value trains a few steps of the tiny model: finite losses, a gradient, the value logged."""
    from grpo_core.run import read_metrics, run_training

    cfg = make_cfg(max_steps=3, stl_window=1, **values)
    summary = run_training(cfg, tmp_path / "run", progress=False)
    assert summary["status"] == "finished" and summary["steps_completed"] == 3
    rows = read_metrics(tmp_path / "run" / "metrics.jsonl")
    assert all(abs(r["loss"]) < 1e3 for r in rows) and any(r["grad_norm"] > 0 for r in rows)
    logged = __import__("yaml").safe_load((tmp_path / "run" / "config.yaml").read_text())
    assert all(logged[k] == v for k, v in values.items())
    if values.get("entropy_coef"):
        assert all(r["entropy_bonus"] == pytest.approx(0.01 * r["entropy"], rel=1e-4) for r in rows)
    if len(values.get("reward_funcs", [])) == 2:  # the logged reward is the plain sum, whatever trains
        assert all(
            r["reward"] == pytest.approx(r["rewards/exact_match"] + r["rewards/format_digits"], abs=1e-6) for r in rows
        )


def test_kl_in_reward_moves_the_kl_from_the_loss_to_the_reward(tmp_path):
    from grpo_core.run import read_metrics, run_training

    cfg = make_cfg(max_steps=4, stl_window=1, beta=0.04, kl_in_reward=True, kl_estimator="k1", learning_rate=1e-3)
    run_training(cfg, tmp_path / "run", progress=False)
    rows = read_metrics(tmp_path / "run" / "metrics.jsonl")
    assert all(r["kl_loss"] == 0.0 for r in rows)
    # step 1: the policy is the reference, every log-ratio 0 up to float32 rounding: the reference's
    # log-probs come from another forward pass, which a process whose earlier tests changed torch's
    # settings can sum in another order (−3e-8 seen in the full suite, 0.0 alone)
    assert abs(rows[0]["kl_in_reward"]) <= 1e-6
    assert any(r["kl_in_reward"] != 0.0 for r in rows[1:]) and any(r["kl"] != 0.0 for r in rows[1:])
