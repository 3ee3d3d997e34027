"""A claim spec's `report` section: the tests and figures it asks for, checked before anything
runs (validate_report), and the tests with their reward-AUC twins (report_tests). Ground shared by
the wings: the driver checks a spec with it before a sweep trains, the verdicts read its tests."""

from __future__ import annotations

from typing import TYPE_CHECKING

from grpo_core.util.errors import UserInputError, short_value

if TYPE_CHECKING:  # a type only: the ground's sweep spec builds configs (torch), the verdicts read this module
    from .spec import SweepSpec


TEST_KINDS = ("paired", "differ", "zero_loss_step1", "placebo")
FIGURE_KINDS = ("reward", "early_loss", "completion_length")
NOTE_KINDS = ("noise_loss_floor", "zero_std_share")  # a test's `note`: computed by sweeps/deciding/verdicts.py (NOTES)


SUMMARY_METRICS = ("steps_to_learn", "loss_departure_step", "completions_to_learn", "learned", "final_reward",
                   "reward_auc", "baseline_reward", "completions_generated", "median_step_time_s", "train_time_s",
                   "wall_time_s")  # the summary.json keys a test can compare


def compared_metric(test: dict) -> str:
    """The metric a paired or differ test compares: its `metric`, steps_to_learn where it names none."""
    return test.get("metric", "steps_to_learn")


AUC = "reward_auc"  # the continuous metric beside steps_to_learn: mean training reward over the run
AUC_SUFFIX = " (reward AUC: mean training reward over the run)"


def report_tests(spec: SweepSpec) -> list[dict]:
    """The spec's tests, each one on steps_to_learn followed by its twin on reward AUC (the same
    axis, arms and seeds, the direction turned: learning sooner is a larger area under the reward
    curve), so effects finer than one step show. A twin carries `twin_of`, its original's index."""
    out = []
    for i, test in enumerate(spec.report.get("tests") or []):
        out.append(test)
        if test.get("kind") in ("paired", "differ") and compared_metric(test) == "steps_to_learn":
            twin = {k: v for k, v in test.items() if k not in ("claimed_effect", "claimed_effect_text", "note")}
            twin.update(metric=AUC, statement=test["statement"] + AUC_SUFFIX, twin_of=i)
            if test.get("direction"):
                twin["direction"] = {"lower": "higher", "higher": "lower"}[test["direction"]]
            out.append(twin)
    return out




def validate_report(spec: SweepSpec, claim: bool = True) -> None:
    """Check a claim spec's `report` section before anything runs. claim=False (`grpo sweep`): a
    sweep needs no report, but what its spec's report section holds is checked all the same, so a
    mistake in it shows before the sweep trains rather than at `grpo reproduce` after."""
    rep = spec.report
    where = f"{spec.path}: report"
    if claim and not spec.replication_seeds:
        raise UserInputError(f"{spec.path}: replication_seeds: missing; a claim spec needs a second seed set, "
                             f"disjoint from `seeds` (every verdict must hold on both)")
    if claim and not rep.get("tests"):
        raise UserInputError(f"{where}.tests: missing; a claim needs at least one test behind its verdict")
    tests = rep.get("tests") or []
    if not isinstance(tests, list) or not all(isinstance(t, dict) for t in tests):
        raise UserInputError(f"{where}.tests: {short_value(tests)}; allowed: a list of tests, each a mapping "
                             f"with a `kind` ({', '.join(TEST_KINDS)})")
    figures = rep.get("figures", [])
    if not isinstance(figures, list):
        raise UserInputError(f"{where}.figures: {short_value(figures)}; allowed: a list of {', '.join(FIGURE_KINDS)}")
    for fig in figures:
        if not isinstance(fig, str) or fig not in FIGURE_KINDS:
            raise UserInputError(f"{where}.figures: unknown figure {fig!r}; allowed: {', '.join(FIGURE_KINDS)}")
    if not isinstance(spec.quick or {}, dict):
        raise UserInputError(f"{spec.path}: quick: {short_value(spec.quick)}; allowed: a mapping")
    for i, test in enumerate(tests):
        kind = test.get("kind")
        if not isinstance(kind, str) or kind not in TEST_KINDS:
            raise UserInputError(f"{where}.tests[{i}].kind: {kind!r}; allowed: {', '.join(TEST_KINDS)}")
        if not isinstance(test.get("statement"), str) or not test["statement"].strip():
            raise UserInputError(f"{where}.tests[{i}].statement: {short_value(test.get('statement'))}; allowed: the "
                                 f"question the test answers, as text (the report's verdict row reads it)")
        if kind in ("zero_loss_step1", "placebo"):
            continue
        axis = test.get("axis")
        if not isinstance(axis, str) or axis not in spec.grid:
            raise UserInputError(f"{where}.tests[{i}].axis: {axis!r} is not a grid axis ({', '.join(spec.grid)})")
        metric = compared_metric(test)
        if not (isinstance(metric, str) and (metric in SUMMARY_METRICS
                                             or (metric.startswith("final:") and len(metric) > len("final:")))):
            raise UserInputError(f"{where}.tests[{i}].metric: {metric!r}; allowed: {', '.join(SUMMARY_METRICS)}, or "
                                 f"final:<a per-step key of metrics.jsonl>")
        if kind == "paired":
            values = spec.grid[axis]
            treatment = test.get("treatment", [])
            if not isinstance(treatment, list) or not treatment:
                raise UserInputError(f"{where}.tests[{i}].treatment: {short_value(treatment)}; allowed: a non-empty list "
                                     f"of values of grid axis {axis} {values}")
            for v in [*treatment, test.get("control")]:
                if v not in values:
                    raise UserInputError(f"{where}.tests[{i}]: {v!r} is not a value of grid axis {axis} {values}")
            if test.get("direction") not in ("lower", "higher"):
                raise UserInputError(f"{where}.tests[{i}].direction: allowed: lower, higher")
            if test.get("note") is not None and test["note"] not in NOTE_KINDS:
                raise UserInputError(f"{where}.tests[{i}].note: {test['note']!r}; allowed: {', '.join(NOTE_KINDS)}")
            if "claimed_effect" in test and not isinstance(test["claimed_effect"], (int, float)):
                raise UserInputError(f"{where}.tests[{i}].claimed_effect: allowed: a number (the paired "
                                     f"difference treatment − control the source claims)")
    spec.check_quick()  # after the tests: a quick section refers to the grid the tests are checked against
