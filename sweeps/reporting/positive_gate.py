"""The positive control's gate: whether its verdicts let a later "no effect detected" stand
(positive_gate), and the line its report section gets saying so, with the effects it detected on
each seed set (gate_text, placed by with_gate)."""

from __future__ import annotations

from typing import Optional

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


def gate_text(name: str, results: list, tests: list[dict], reason: Optional[str],
              replaced_by: Optional[str] = None) -> str:
    """The positive control's gate line for its section: which later nulls rest on it, and the
    effects it detected on each seed set (each test's steps_to_learn and reward-AUC verdicts with
    both sets' paired differences), so a reader sees the effect sizes this testbed can detect."""
    if replaced_by is not None:
        return (f"\n- **Gate:** handed to `{replaced_by}`, a later positive control whose grid points all have "
                f"finished runs: the *no effect detected* verdicts below rest on it, not on this one.\n")
    if reason is not None:
        return (f"\n- **Gate:** closed: {reason}, so every later *no effect detected* reads inconclusive "
                f"(positive control not passed).\n")
    lines = [f"\n- **Gate:** open: every *no effect detected* below whose runs are of this control's set-up, over "
             f"as many steps or fewer, rests on this control (`{name}`). What it detects, as paired differences "
             f"against its control on each seed set:"]
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
