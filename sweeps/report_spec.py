"""A claim spec's `report` section: the tests and figures it asks for, checked before anything
runs (validate_report), and the tests with their reward-AUC twins (report_tests). Ground shared by
the wings: the driver checks a spec with it before a sweep trains, the verdicts read its tests, and
the reports walk each test with its twin's verdict (with_twins)."""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Iterator, Optional

from grpo_core.util.errors import UserInputError, short_value

if TYPE_CHECKING:  # a type only: the ground's sweep spec builds configs (torch), the verdicts read this module
    from .spec import SweepSpec


TEST_KINDS = ("paired", "differ", "zero_loss_step1", "placebo")
FIGURE_KINDS = ("reward", "early_loss", "completion_length")
NOTE_KINDS = ("noise_loss_floor", "zero_std_share")  # a test's `note`: computed by sweeps/deciding/verdicts.py (NOTES)
# a manipulation check (sweeps/deciding/mechanism.py): its keys, how a run's steps reduce to one number
MECHANISM_KEYS = ("what", "reason", "metric", "steps", "per_run", "arms", "ratio_to", "at_least", "at_most", "tests")
PER_RUN = ("mean", "max", "min", "share_clipped")
STEP_SELECTIONS = "all, off_policy, from:N or first:N (N ≥ 1)"
# equivalence margins, declared before the runs: ± this much counts as no effect (steps: every step
# metric, steps_to_learn and loss_departure_step; reward_auc; or a metric a test compares)
MARGIN_UNITS = ("steps", "reward_auc")


# computed by the report from a run's folder (sweeps/deciding/runs.py): the final length within right and
# within wrong replies (completions.jsonl), and the learning rate given before learning (metrics.jsonl)
DERIVED_METRICS = ("final_length_correct", "final_length_wrong", "lr_to_learn")
SUMMARY_METRICS = (
    "steps_to_learn",
    "loss_departure_step",
    "completions_to_learn",
    "learned",
    "final_reward",
    "reward_auc",
    "baseline_reward",
    "completions_generated",
    "median_step_time_s",
    "train_time_s",
    "wall_time_s",
)  # the summary.json keys a test can compare
# the per-step keys of metrics.jsonl a run may log (grpo_core/trainer.py and the loss; those of a switch
# that is off are absent from that run), `rewards/<function>` one per reward, and grad_norm_to_optimizer,
# which a check derives from grad_norm (sweeps/deciding/mechanism.py). tests/test_report.py trains the
# tiny model with every optional key's switch on and checks that each key it logs is here.
STEP_METRICS = (
    "step",
    "loss",
    "policy_loss",
    "kl_loss",
    "kl",
    "grad_norm",
    "update_norm",
    "learning_rate",
    "reward",
    "reward_std",
    "reward_std_within_group",
    "frac_reward_zero_std",
    "advantages/abs_mean",
    "advantages/group_sum_max_abs",
    "completions/mean_length",
    "completions/clipped_ratio",
    "completions/generated",
    "clip_ratio",
    "entropy",
    "entropy_bonus",
    "entropy_mask_share",
    "kl_in_reward",
    "reward_trained",
    "groups/sampled",
    "groups/dropped",
    "eval/accuracy",
    "step_time",
    "tokens_per_second",
    "grad_norm_to_optimizer",
)
STEP_PREFIXES = ("rewards/",)


def is_logged_metric(metric: str) -> bool:
    """A key a mechanism check can read: a summary.json key or a per-step key of metrics.jsonl."""
    return metric in SUMMARY_METRICS or metric in STEP_METRICS or metric.startswith(STEP_PREFIXES)


def _max_steps_of(spec) -> Optional[int]:
    """The most steps any point of the spec trains (base, grid, arms), or None where it leaves the default."""
    values = (
        [spec.base.get("max_steps")]
        + list(spec.grid.get("max_steps", []))
        + [arm.get("max_steps") for arm in (spec.arms or {}).values()]
    )
    values = [v for v in values if isinstance(v, int) and not isinstance(v, bool)]
    return max(values) if values else None


def compared_metric(test: dict) -> str:
    """The metric a paired or differ test compares: its `metric`, steps_to_learn where it names none."""
    return test.get("metric", "steps_to_learn")


def with_twins(tests: list[dict], results: list) -> Iterator[tuple[dict, object, Optional[object], str]]:
    """Each test of report_tests that is not a twin, as (test, its verdict, its reward-AUC twin's
    verdict or None, the metric it compares: compared_metric for paired and differ tests,
    steps_to_learn for the kinds that name none). report_tests puts a twin right after its test."""
    for i, (test, verdict) in enumerate(zip(tests, results)):
        if "twin_of" in test:
            continue
        twin = results[i + 1] if i + 1 < len(tests) and tests[i + 1].get("twin_of") is not None else None
        yield test, verdict, twin, compared_metric(test) if test["kind"] in ("paired", "differ") else "steps_to_learn"


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
        raise UserInputError(
            f"{spec.path}: replication_seeds: missing; a claim spec needs a second seed set, "
            f"disjoint from `seeds` (every verdict must hold on both)"
        )
    if claim and not rep.get("tests"):
        raise UserInputError(f"{where}.tests: missing; a claim needs at least one test behind its verdict")
    tests = rep.get("tests") or []
    if not isinstance(tests, list) or not all(isinstance(t, dict) for t in tests):
        raise UserInputError(
            f"{where}.tests: {short_value(tests)}; allowed: a list of tests, each a mapping "
            f"with a `kind` ({', '.join(TEST_KINDS)})"
        )
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
        if isinstance(test.get("statement"), str) and (
            "|" in test["statement"] or "\n" in test["statement"].strip() or "\r" in test["statement"]
        ):
            raise UserInputError(
                f"{where}.tests[{i}].statement: {short_value(test['statement'])}; allowed: one line "
                f"without '|' (it is a cell of the report's tables)"
            )
        if not isinstance(test.get("statement"), str) or not test["statement"].strip():
            raise UserInputError(
                f"{where}.tests[{i}].statement: {short_value(test.get('statement'))}; allowed: the "
                f"question the test answers, as text (the report's verdict row reads it)"
            )
        if kind in ("zero_loss_step1", "placebo"):
            continue
        axis = test.get("axis")
        if not isinstance(axis, str) or axis not in spec.grid:
            raise UserInputError(f"{where}.tests[{i}].axis: {axis!r} is not a grid axis ({', '.join(spec.grid)})")
        metric = compared_metric(test)
        if not (
            isinstance(metric, str)
            and (
                metric in SUMMARY_METRICS
                or metric in DERIVED_METRICS
                or (metric.startswith("final:") and len(metric) > len("final:"))
            )
        ):
            raise UserInputError(
                f"{where}.tests[{i}].metric: {metric!r}; allowed: {', '.join(SUMMARY_METRICS)}, "
                f"{', '.join(DERIVED_METRICS)}, or final:<a per-step key of metrics.jsonl>"
            )
        if "known_effect" in test and (kind != "paired" or test["known_effect"] is not True):
            raise UserInputError(
                f"{where}.tests[{i}].known_effect: {short_value(test['known_effect'])}; allowed: true, "
                f"on a paired test (an effect its runs show, declared as its regime's evidence of "
                f"sensitivity)"
            )
        if kind == "paired":
            values = spec.grid[axis]
            treatment = test.get("treatment", [])
            if not isinstance(treatment, list) or not treatment:
                raise UserInputError(
                    f"{where}.tests[{i}].treatment: {short_value(treatment)}; allowed: a non-empty list "
                    f"of values of grid axis {axis} {values}"
                )
            for v in [*treatment, test.get("control")]:
                if v not in values:
                    raise UserInputError(f"{where}.tests[{i}]: {v!r} is not a value of grid axis {axis} {values}")
            if test.get("direction") not in ("lower", "higher"):
                raise UserInputError(f"{where}.tests[{i}].direction: allowed: lower, higher")
            if test.get("note") is not None and test["note"] not in NOTE_KINDS:
                raise UserInputError(f"{where}.tests[{i}].note: {test['note']!r}; allowed: {', '.join(NOTE_KINDS)}")
            if "claimed_effect" in test and not isinstance(test["claimed_effect"], (int, float)):
                raise UserInputError(
                    f"{where}.tests[{i}].claimed_effect: allowed: a number (the paired "
                    f"difference treatment − control the source claims)"
                )
    _check_mechanism(spec, where, tests)
    _check_no_mechanism(spec, where)
    _check_margins(spec, where, tests)
    _check_sequential(spec, where)
    superseded = spec.report.get("superseded_by")
    if superseded is not None and not (isinstance(superseded, str) and superseded.strip()):
        raise UserInputError(
            f"{where}.superseded_by: {short_value(superseded)}; allowed: the file name (without "
            f".yaml) of the spec whose regime replaces this one's"
        )
    spec.check_quick()  # after the tests: a quick section refers to the grid the tests are checked against


def _check_mechanism(spec: SweepSpec, where: str, tests: list) -> None:
    """A spec's manipulation checks (report.mechanism), whole, before anything trains."""
    checks = spec.report.get("mechanism") or []
    if not isinstance(checks, list) or not all(isinstance(c, dict) for c in checks):
        raise UserInputError(
            f"{where}.mechanism: {short_value(checks)}; allowed: a list of checks, each a mapping "
            f"with {', '.join(MECHANISM_KEYS)}"
        )
    for i, c in enumerate(checks):
        at = f"{where}.mechanism[{i}]"
        if unknown := sorted(set(c) - set(MECHANISM_KEYS)):
            raise UserInputError(f"{at}.{unknown[0]}: unknown key; allowed: {', '.join(MECHANISM_KEYS)}")
        for key in ("what", "reason", "metric"):
            if not isinstance(c.get(key), str) or not c[key].strip():
                raise UserInputError(
                    f"{at}.{key}: {short_value(c.get(key))}; allowed: text (what: the check in "
                    f"words; reason: why it shows the mechanism at work; metric: a summary.json "
                    f"key or a per-step key of metrics.jsonl)"
                )
        if not is_logged_metric(c["metric"]):
            raise UserInputError(
                f"{at}.metric: {c['metric']!r} is logged by no run, so the check could never be "
                f"read; allowed: a summary.json key ({', '.join(SUMMARY_METRICS)}), a per-step key "
                f"({', '.join(STEP_METRICS)}) or rewards/<function>"
            )
        steps = c.get("steps", "all")
        kind, _, n = str(steps).partition(":")
        if not (steps in ("all", "off_policy") or (kind in ("from", "first") and n.isdigit() and int(n) >= 1)):
            raise UserInputError(f"{at}.steps: {short_value(steps)}; allowed: {STEP_SELECTIONS}")
        if kind == "from" and (most := _max_steps_of(spec)) is not None and int(n) > most:
            raise UserInputError(
                f"{at}.steps: {steps} is past the last step any run trains ({most}); allowed: "
                f"{STEP_SELECTIONS} with N ≤ max_steps"
            )
        if c.get("per_run", "mean") not in PER_RUN:
            raise UserInputError(f"{at}.per_run: {short_value(c.get('per_run'))}; allowed: {', '.join(PER_RUN)}")
        if c["metric"] in SUMMARY_METRICS and ("steps" in c or "per_run" in c):
            raise UserInputError(
                f"{at}: steps and per_run read a per-step metric; {c['metric']} is one number "
                f"per run (summary.json); allowed: leave them out"
            )
        arms = c.get("arms", {})
        if not isinstance(arms, dict):
            raise UserInputError(
                f"{at}.arms: {short_value(arms)}; allowed: a mapping of grid axes to lists of their values"
            )
        for axis, values in arms.items():
            if (
                axis not in spec.grid
                or not isinstance(values, list)
                or not values
                or any(v not in spec.grid[axis] for v in values)
            ):
                raise UserInputError(
                    f"{at}.arms.{axis}: {short_value(values)}; allowed: a grid axis "
                    f"({', '.join(spec.grid)}) and a list of its values"
                )
        ratio_to = c.get("ratio_to")
        if ratio_to is not None and not (
            isinstance(ratio_to, dict)
            and len(ratio_to) == 1
            and (axis := next(iter(ratio_to))) in spec.grid
            and ratio_to[axis] in spec.grid[axis]
            and axis in arms
        ):
            raise UserInputError(
                f"{at}.ratio_to: {short_value(ratio_to)}; allowed: one grid axis that `arms` names "
                f"and a value of it, e.g. {{advantage_scale: 1.0}}: each run's value divided by "
                f"that of the run of the same seed at that value"
            )
        bounds = [k for k in ("at_least", "at_most") if k in c]
        if (
            len(bounds) != 1
            or isinstance(c[bounds[0]], bool)
            or not isinstance(c[bounds[0]], (int, float))
            or not math.isfinite(c[bounds[0]])
        ):
            raise UserInputError(
                f"{at}: {short_value({k: c.get(k) for k in ('at_least', 'at_most')})}; allowed: "
                f"exactly one of at_least, at_most, a finite number"
            )
        gated = c.get("tests")
        if gated is not None and (
            not isinstance(gated, list)
            or not gated
            or any(isinstance(k, bool) or not isinstance(k, int) or not 0 <= k < len(tests) for k in gated)
        ):
            raise UserInputError(
                f"{at}.tests: {short_value(gated)}; allowed: a list of indices of report.tests "
                f"(0 to {len(tests) - 1}), the tests it gates; leave it out to gate them all"
            )


def _check_no_mechanism(spec: SweepSpec, where: str) -> None:
    """`report.mechanism_none`: why no manipulation check applies (text), never beside checks."""
    why = spec.report.get("mechanism_none")
    if why is None:
        return
    if not isinstance(why, str) or not why.strip():
        raise UserInputError(
            f"{where}.mechanism_none: {short_value(why)}; allowed: text saying why no manipulation "
            f"check applies (e.g. the test measures the mechanism itself)"
        )
    if spec.report.get("mechanism"):
        raise UserInputError(f"{where}.mechanism_none: beside report.mechanism; allowed: one of them")


def _check_margins(spec: SweepSpec, where: str, tests: list) -> None:
    """A spec's equivalence margins (report.margins): positive numbers in the units they name."""
    margins = spec.report.get("margins", {})
    compared = {compared_metric(t) for t in tests if t.get("kind") in ("paired", "differ")}
    allowed = sorted(set(MARGIN_UNITS) | compared)
    if not isinstance(margins, dict):
        raise UserInputError(
            f"{where}.margins: {short_value(margins)}; allowed: a mapping of {', '.join(allowed)} to a number > 0"
        )
    for key, value in margins.items():
        if key not in allowed:
            raise UserInputError(f"{where}.margins.{key}: unknown; allowed: {', '.join(allowed)}")
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 < value < math.inf:
            raise UserInputError(
                f"{where}.margins.{key}: {short_value(value)}; allowed: a finite number > 0 (± this much "
                f"counts as no effect)"
            )


SEQUENTIAL_KEYS = ("looks", "spending", "alpha", "streams")
SPENDING_KINDS = ("obrien_fleming", "pocock")  # sweeps/deciding/sequential.py: Lan-DeMets spending of α


def _check_sequential(spec: SweepSpec, where: str) -> None:
    """`report.sequential`: the looks (pairs per seed set at which the tests are read, increasing;
    the last is the budget), the spending of α across them, and α; declared before the runs."""
    design = spec.report.get("sequential")
    if design is None:
        return
    at = f"{where}.sequential"
    if not isinstance(design, dict):
        raise UserInputError(f"{at}: {short_value(design)}; allowed: a mapping with {', '.join(SEQUENTIAL_KEYS)}")
    if unknown := sorted(set(design) - set(SEQUENTIAL_KEYS)):
        raise UserInputError(f"{at}.{unknown[0]}: unknown key; allowed: {', '.join(SEQUENTIAL_KEYS)}")
    looks = design.get("looks")
    if (
        not isinstance(looks, list)
        or not looks
        or any(isinstance(n, bool) or not isinstance(n, int) or n < 2 for n in looks)
        or any(b <= a for a, b in zip(looks, looks[1:]))
    ):
        raise UserInputError(
            f"{at}.looks: {short_value(looks)}; allowed: increasing pair counts ≥ 2 per seed set (e.g. "
            f"[8, 12, 16, 24, 32]; the last is the budget)"
        )
    if design.get("spending", "obrien_fleming") not in SPENDING_KINDS:
        raise UserInputError(
            f"{at}.spending: {short_value(design.get('spending'))}; allowed: {', '.join(SPENDING_KINDS)}"
        )
    alpha = design.get("alpha", 0.05)
    if isinstance(alpha, bool) or not isinstance(alpha, (int, float)) or not 0 < alpha < 0.5:
        raise UserInputError(f"{at}.alpha: {short_value(alpha)}; allowed: a number in (0, 0.5)")
    _check_streams(spec, at, design.get("streams"), looks[-1])


def _check_streams(spec: SweepSpec, at: str, streams, budget: int) -> None:
    """`sequential.streams`: each seed set's seeds in the order the looks take them, declared whole
    before the runs (`grpo sweep --until-decided` trains the first n of each at a look of n pairs):
    as many as the budget, distinct, the two sets disjoint, each beginning with the spec's own list."""
    if streams is None:
        return
    sets = {"seeds": spec.seeds, "replication_seeds": spec.replication_seeds}
    allowed = (
        f"a mapping of seeds and replication_seeds to lists of at least {budget} distinct integer seeds, "
        f"disjoint, each beginning with the spec's own list"
    )
    if (
        not isinstance(streams, dict)
        or not set(streams) <= set(sets)
        or not {k for k, v in sets.items() if v} <= set(streams)
    ):
        raise UserInputError(f"{at}.streams: {short_value(streams)}; allowed: {allowed}")
    for key, stream in streams.items():
        if (
            not isinstance(stream, list)
            or len(stream) < budget
            or any(isinstance(x, bool) or not isinstance(x, int) for x in stream)
            or len(set(stream)) != len(stream)
            or stream[: len(sets[key])] != list(sets[key])
        ):
            raise UserInputError(f"{at}.streams.{key}: {short_value(stream)}; allowed: {allowed}")
    if len(streams) == 2 and set(streams["seeds"]) & set(streams["replication_seeds"]):
        raise UserInputError(f"{at}.streams: the two sets share seeds; allowed: {allowed}")


def margin_of(spec: SweepSpec, metric: str, step_metrics: tuple) -> float | None:
    """The declared equivalence margin of `metric` (steps for the step metrics), or None."""
    margins = spec.report.get("margins") or {}
    if metric in margins:
        return float(margins[metric])
    if metric in step_metrics and "steps" in margins:
        return float(margins["steps"])
    return None
