"""The testbed's gates over verdicts: a verdict that rests on steps_to_learn is withheld unless the
placebos of its runs' set-up passed (placebo_gate, withheld), every null ('no effect detected',
'equivalent within') unless the testbed's positive control passed (unproven), and every verdict of
a spec whose runs have not all finished (incomplete). The claim's own gate, its mechanism at work,
is mechanism.py's."""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Optional

from .runs import Run
from ..report_spec import compared_metric
from .verdicts import INCONCLUSIVE, SUPPORTED, Verdict, is_null


def rests_on_steps_to_learn(test: dict) -> bool:
    """Whether a test's verdict reads steps_to_learn, the metric the placebo calibrates."""
    if test["kind"] in ("paired", "differ"):
        return compared_metric(test) == "steps_to_learn"
    return test["kind"] == "zero_loss_step1" and not test.get("step1_only")


def withheld(v: Verdict, untrusted: str) -> Verdict:
    """A verdict that rests on steps_to_learn where the placebo did not pass: inconclusive, with
    what the runs alone read kept in its reason (the tables below it are unchanged)."""
    return replace(
        v,
        verdict=f"{INCONCLUSIVE} (placebo not passed)",
        reason=f"steps_to_learn is not trusted here: {untrusted}; the runs alone read {v.verdict}: {v.reason}",
    )


def incomplete(v: Verdict, done: int, expected: int) -> Verdict:
    """A verdict of a spec not every grid point of which has a finished run (still training, or a
    run failed): inconclusive, naming how many have, with what the finished runs alone read kept in
    its reason. A placebo or positive control that reads so opens no gate."""
    return replace(
        v,
        verdict=f"{INCONCLUSIVE} ({done} of {expected} runs finished)",
        reason=f"{expected - done} of the spec's {expected} runs have not finished (in training, or failed), "
        f"so this is not its verdict; the finished runs alone read {v.verdict}: {v.reason}",
    )


# What makes a placebo's false-positive check apply to a claim's runs: the reward's noise (model,
# data, reward functions, completion length, batch, temperature), steps_to_learn's own settings, and
# what a logged step is (num_iterations μ and steps_per_generation k: with μ or k above 1 one
# generation batch's reward is logged at several steps, so its noise crosses a threshold in runs of
# steps); the placebo must also have run at least as many steps (more steps, more chances to cross)
SETUP_KEYS = (
    "model",
    "task",
    "dataset",
    "reward_funcs",
    "max_completion_length",
    "prompts_per_step",
    "num_generations",
    "temperature",
    "stl_window",
    "stl_delta",
    "num_iterations",
    "steps_per_generation",
    "prompt_template",
)
ADDED_LATER = {"prompt_template": ""}  # keys runs made before them do not record, read as their default


def setup_of(config: dict) -> tuple:
    return tuple((k, str(config.get(k, ADDED_LATER.get(k)))) for k in SETUP_KEYS)


def horizons_of(runs: list[Run]) -> dict:
    """Each set-up the runs use → the most steps any of them ran in it."""
    out: dict = {}
    for r in runs:
        key = setup_of(r.config)
        out[key] = max(out.get(key, 0), r.config["max_steps"])
    return out


@dataclass
class PlaceboRecord:
    name: str  # the placebo spec's file stem
    horizons: dict  # set-up → the most steps its finished runs ran
    passed: bool
    verdict: str
    complete: bool = True  # every grid point has a finished run (else its verdict is not yet the placebo's)
    false_positives: int = 0  # finished runs that got a steps_to_learn (each fails the placebo, finished or not)


def placebo_record(name: str, runs: list[Run], results: list[Verdict], complete: bool = True) -> PlaceboRecord:
    horizons = horizons_of(runs)
    passed = bool(results) and all(v.verdict == SUPPORTED for v in results)  # an incomplete one reads inconclusive
    false_positives = sum(r.summary.get("learned", 0) for r in runs)  # as verdicts.check_placebo counts them
    return PlaceboRecord(
        name, horizons, passed, results[0].verdict if results else "no finished runs", complete, false_positives
    )


def placebo_gate(placebos: list[PlaceboRecord], runs: list[Run]) -> Optional[str]:
    """Why a claim's steps_to_learn is not trusted (None: it is): each set-up its runs use must be
    covered by a placebo with finished runs of that set-up over at least as many steps; no covering
    placebo may have a run that got a steps_to_learn; and of the covering placebos, those with every
    run finished must include one and must all have passed. A placebo still in training opens no gate
    and, until one of its runs learns, closes none that a finished placebo opened (a longer placebo
    of the same set-up arriving run by run leaves the shorter one's verdict standing). A placebo spec
    none of whose runs finished covers nothing."""
    for key, steps in horizons_of(runs).items():
        covering = [p for p in placebos if p.horizons.get(key, -1) >= steps]
        if not covering:
            what = ", ".join(f"{k} {v}" for k, v in key if v not in ("None", "[]"))
            return f"no placebo has finished runs of this set-up ({what}) over {steps} steps or more"
        learned = [p for p in covering if p.false_positives]
        if learned:
            return (
                f"the placebo ({learned[0].name}) reads {learned[0].verdict}: {learned[0].false_positives} "
                f"of its runs got a steps_to_learn"
            )
        settled = [p for p in covering if p.complete]
        if not settled:
            return f"the placebo of this set-up over {steps} steps or more ({covering[0].name}) reads {covering[0].verdict}"
        failed = [p for p in settled if not p.passed]
        if failed:
            return f"the placebo ({failed[0].name}) reads {failed[0].verdict}"
    return None


POSITIVE_CONTROL = "positive_control"  # a spec's `claim` for the testbed's positive control
NO_POSITIVE_CONTROL = "this testbed has no positive control"
NO_SETUP_CONTROL = "no positive control of this set-up"


@dataclass
class PositiveRecord:
    """A known effect that gates the nulls of its set-up: a positive-control spec, or a claim spec's
    test declared `known_effect` (an effect its own runs showed, declared as its regime's evidence
    of sensitivity)."""

    name: str  # the spec's file stem (and the test, for a known_effect test)
    horizons: dict  # set-up (setup_of) → the most steps its finished runs ran
    reason: Optional[str]  # why it does not open the gate (None: it does)
    complete: bool = True  # every grid point it reads has a finished run
    effects: str = ""  # what it moved, per seed set, in words (printed beside the margins of its set-up)


def positive_record(
    name: str, runs: list[Run], reason: Optional[str], complete: bool = True, effects: str = ""
) -> PositiveRecord:
    return PositiveRecord(name, horizons_of(runs), reason, complete, effects)


def covering_effects(controls: list[PositiveRecord], runs: list[Run]) -> list[PositiveRecord]:
    """The known effects that gate these runs (the last finished one per set-up, as sensitivity_gate
    reads them), once each."""
    out: list = []
    for key, steps in horizons_of(runs).items():
        settled = [c for c in _closest(controls, key, steps) if c.complete]
        if settled and settled[-1] not in out:
            out.append(settled[-1])
    return out


def _closest(controls: list[PositiveRecord], key: tuple, steps: int) -> list[PositiveRecord]:
    """The known effects of set-up `key` over the fewest steps at or above `steps` (the regime
    closest to the claim's: a 40-step claim is read beside the 40-step control, not beside a
    100-step regime's known effect of the same set-up), in the order they came."""
    horizons = [c.horizons[key] for c in controls if c.horizons.get(key, -1) >= steps]
    return [c for c in controls if horizons and c.horizons.get(key) == min(horizons)]


def sensitivity_gate(controls: list[PositiveRecord], runs: list[Run]) -> Optional[str]:
    """Why a null read on `runs` is not trusted (None: it is): every set-up the runs use must be
    covered by a known effect with finished runs of that set-up (model, data, reward, completion
    length, batch, temperature, window, δ, μ; as the placebo's) over at least as many steps (those
    over the fewest such steps: _closest), and the last such control with all its runs in must
    have passed. A control of another set-up says
    nothing about what this one can detect."""
    for key, steps in horizons_of(runs).items():
        covering = _closest(controls, key, steps)
        if not covering:
            what = ", ".join(f"{k} {v}" for k, v in key if v not in ("None", "[]"))
            return (
                f"{NO_SETUP_CONTROL}: no known effect has finished runs of this set-up ({what}) over {steps} "
                f"steps or more, so it has not shown it could detect an effect"
            )
        settled = [c for c in covering if c.complete]
        if not settled:
            return (
                covering[-1].reason
                or f"the positive control of this set-up ({covering[-1].name}) has not finished all its runs"
            )
        if settled[-1].reason is not None:
            return settled[-1].reason
    return None


def unproven(v: Verdict, insensitive: str) -> Verdict:
    """A "no effect detected" on a testbed whose positive control did not read supported: the
    testbed has not shown it can detect an effect known to exist, so the null result says nothing
    yet. Inconclusive, with what the runs alone read kept in its reason."""
    if not is_null(v.verdict):
        return v
    why = (
        "no positive control"
        if insensitive.startswith(NO_POSITIVE_CONTROL)
        else NO_SETUP_CONTROL
        if insensitive.startswith(NO_SETUP_CONTROL)
        else "positive control not passed"
    )
    return replace(
        v,
        verdict=f"{INCONCLUSIVE} ({why})",
        reason=f"a null result is not trusted here: {insensitive}; the runs alone read {v.verdict}: {v.reason}",
    )
