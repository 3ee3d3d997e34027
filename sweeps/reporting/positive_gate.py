"""The positive control's gate: whether its verdicts let a later "no effect detected" stand
(positive_gate), and the line its report section gets saying so, with the effects it detected on
each seed set (gate_text, placed by with_gate)."""

from __future__ import annotations

from typing import Optional

from ..deciding.gates import covering_effects, sensitivity_gate
from ..deciding.verdicts import CONTRADICTED, is_supported
from ..report_spec import with_twins
from .glance import effect_text


def positive_gate(name: str, results: list, tests: list[dict]) -> Optional[str]:
    """Why the positive control `name` does not gate open (None: it does). It passes when at least
    one of its tests reads supported on steps_to_learn and on its reward-AUC twin, and none of its
    verdicts reads contradicted: a graded control (×1.5 and ×1.25 the learning rate) shows the
    testbed sensitive by its larger step even where the finer one goes undetected, which its
    section states as the effect sizes detected."""
    if not results:
        return f"the positive control ({name}) reads no finished runs"
    contradicted = [v for v in results if v.verdict.startswith(CONTRADICTED)]
    pairs = [[v] + ([twin] if twin is not None else []) for _, v, twin, _ in with_twins(tests, results)]
    if contradicted or not any(all(is_supported(v.verdict) for v in pair) for pair in pairs):
        failed = contradicted or [v for v in results if not is_supported(v.verdict)]
        return f"the positive control ({name}) reads {failed[0].verdict}"
    return None


def gate_text(
    name: str, results: list, tests: list[dict], reason: Optional[str], replaced_by: Optional[str] = None
) -> str:
    """The positive control's gate line for its section: which later nulls rest on it, and the
    effects it detected on each seed set (each test's steps_to_learn and reward-AUC verdicts with
    both sets' paired differences), so a reader sees the effect sizes this testbed can detect."""
    if replaced_by is not None:
        return (
            f"\n- **Gate:** handed to `{replaced_by}`, a later positive control whose grid points all have "
            f"finished runs: the *no effect detected* verdicts below rest on it, not on this one.\n"
        )
    if reason is not None:
        return (
            f"\n- **Gate:** closed: {reason}, so every later *no effect detected* reads inconclusive "
            f"(positive control not passed).\n"
        )
    lines = [
        f"\n- **Gate:** open: every *no effect detected* below whose runs are of this control's set-up, over "
        f"as many steps or fewer, rests on this control (`{name}`). What it detects, as paired differences "
        f"against its control on each seed set:"
    ]
    for _, v, twin, metric in with_twins(tests, results):
        said = f"{metric} **{v.verdict}** ({effect_text(v, metric)})"
        if twin is not None:
            said += f"; reward AUC **{twin.verdict}** ({effect_text(twin, 'reward_auc')})"
        lines.append(f"  - {v.statement}: {said}")
    return "\n".join(lines) + "\n"


def with_gate(section: str, line: str) -> str:
    """The section with its gate line among its header lines, before its first verdict."""
    at = section.find("\n**Verdict")
    return section + line if at < 0 else section[:at] + line.lstrip("\n") + section[at:]


def effects_brief(results: list, tests: list[dict]) -> str:
    """What a known effect moved, in few words: each of its tests' paired differences per seed set
    (Hodges-Lehmann estimates), on its metric and on the reward-AUC twin."""

    def per_set(v) -> str:
        return " and ".join(f"{c[0].estimate:+.3g}" for _, c in v.sets if c) if v.sets else "–"

    parts = []
    for _, v, twin, metric in with_twins(tests, results):
        text = f"{v.statement}: {metric} {per_set(v)}"
        if twin is not None:
            text += f", reward AUC {per_set(twin)}"
        parts.append(text)
    return "; ".join(parts)


class SetupSensitivity:
    """The gate of a null: the known effects so far (positive-control specs, then the known_effect
    tests of the claim specs read before), with a claim spec's own known effects added. Called, it
    says why a test's null is not trusted (gates.sensitivity_gate); `known` names the effects that
    gate the runs, printed beside the spec's equivalence margins."""

    def __init__(self, controls: list):
        self.controls = controls  # appended to as the sections are read

    def __call__(self, own: list, test_runs: list) -> Optional[str]:
        return sensitivity_gate(self.controls + own, test_runs)

    def known(self, own: list, runs: list) -> list:
        return covering_effects(self.controls + own, runs)


def _same_setups(a, b) -> bool:
    """Whether two known effects cover the same set-ups (a later one of the same set-ups takes over)."""
    return set(a.horizons) == set(b.horizons)


def with_gate_lines(sections: list[str], gates: dict, controls: list) -> list[str]:
    """Each positive control's section with its gate line (`gates`: stem → (section index, verdicts,
    tests, record)): handed to a later control of the same set-ups with every run in; not yet its
    own while some of its runs are missing and an earlier one of its set-ups gates; else open or
    closed, with what it detected."""
    sections = list(sections)
    for stem, (at, results, tests, record) in gates.items():
        same = [c for c in controls if c.name in gates and c.complete and _same_setups(c, record)]
        later = [c for c in same if controls.index(c) > controls.index(record)]
        earlier = [c for c in same if controls.index(c) < controls.index(record)]
        if later:
            line = gate_text(stem, [], [], None, replaced_by=later[-1].name)
        elif not record.complete and earlier:  # a later control gates once all its runs are in
            line = (
                f"\n- **Gate:** not yet this control's: the gate of *no effect detected* stays "
                f"`{earlier[-1].name}`'s until every grid point here has a finished run.\n"
            )
        else:
            line = gate_text(stem, results, tests, record.reason)
        sections[at] = with_gate(sections[at], line) if later or record.complete or not earlier else sections[at] + line
    return sections
