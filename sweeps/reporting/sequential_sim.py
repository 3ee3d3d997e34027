"""The sequential design against the fixed one, simulated on the committed paired differences before
it spends a run (docs/concepts/verdicts.md prints the table):

    python -m sweeps.reporting.sequential_sim [SPEC ...] [--looks 8 12 16 24 32] [--draws 200]

Per paired test on steps_to_learn (each comparison, both seed sets' differences pooled) three worlds
are drawn, each data set as many pairs as the budget: the null (the observed |d| with random signs:
symmetric about 0), the target (the null shifted by the target effect in the claimed direction,
power.target_effect) and the observed (the differences resampled as they are). Each data set is read
by the sequential design (sequential.decide at each look, α split over the test's comparisons) and
by the fixed designs (the signed-rank test at 8 pairs, as the report reads a set now, and at the
budget). Printed per row: how often each says "effect" under the null (type I error) and the target
(power), the pairs the sequential design reads on average, and its estimate's bias after stopping
under the target (the mean Hodges-Lehmann shift at the stopping look minus the true one: a design that
stops when the estimate is large overstates it) and how often its 95% interval there (the report's,
the exact signed-rank interval of the pairs read) holds the true shift, beside the same interval's
coverage at the fixed budget. The boundaries use 4,000 sign patterns per look
here (the report's own use 100,000), so the figures carry that Monte-Carlo error too."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Optional

import numpy as np

from ..deciding import statistics as st
from ..deciding.power import target_effect
from ..deciding.replication import STEP_METRICS, replicated_verdicts
from ..deciding.sequential import decide, sign_e_process
from ..paths import REAL_CPU_RESULTS
from ..report_spec import compared_metric, margin_of, report_tests
from ..spec import load_spec
from .calibration import rows_over_specs
from .report_inputs import collect_runs

HEAD = [
    "| spec | comparison | pairs seen | type I: sequential | fixed 8 | fixed budget | power at target (±t): sequential "
    "| fixed 8 | fixed budget | mean pairs, null · target | bias at stop (target) | 95% interval holds the target: "
    "at stop · fixed budget | equivalent under the null | e-process: type I · power · mean pairs at target |",
    "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|",
]
SIM_FLIPS = 4000


def simulate(
    d: list[float],
    looks: list[int],
    alpha: float,
    kind: str,
    target: float,
    margin: Optional[float],
    draws: int,
    seed: int = 0,
) -> dict:
    """Error rates and pairs of the sequential and fixed designs on data sets drawn from `d`."""
    rng = np.random.default_rng(seed)
    a, budget = np.abs(np.asarray(d, dtype=float)), looks[-1]
    out = {
        k: 0.0
        for k in (
            "null_seq",
            "null_8",
            "null_all",
            "tgt_seq",
            "tgt_8",
            "tgt_all",
            "pairs_null",
            "pairs_tgt",
            "bias",
            "cover_stop",
            "cover_all",
            "equivalent",
            "null_e",
            "tgt_e",
            "pairs_e_null",
            "pairs_e_tgt",
        )
    }
    for _ in range(draws):
        null = rng.choice(a, budget) * rng.choice((-1.0, 1.0), budget)
        shifted = null + target
        for world, x in (("null", null), ("tgt", shifted)):
            r = decide(x, looks, alpha, kind, margin if world == "null" else None, flips=SIM_FLIPS)
            out[f"{world}_seq"] += r.outcome == "effect"
            out[f"{world}_8"] += st.signed_rank_test(x[:8]) <= alpha
            out[f"{world}_all"] += st.signed_rank_test(x) <= alpha
            out["pairs_null" if world == "null" else "pairs_tgt"] += r.pairs
            passed, read = sign_e_process(x, alpha, budget)  # the anytime-valid alternative, on the same data
            out[f"{world}_e"] += passed
            out[f"pairs_e_{world}"] += read
            if world == "null":
                out["equivalent"] += r.outcome == "equivalent"
            else:
                estimate, low, high = st.hodges_lehmann(x[: r.pairs])
                out["bias"] += estimate - target
                out["cover_stop"] += low <= target <= high
                _, low, high = st.hodges_lehmann(x)
                out["cover_all"] += low <= target <= high
    return {k: v / draws for k, v in out.items()}


def simulation_rows(spec_path: Path, runs_root: Path, looks: list[int], kind: str, draws: int) -> list[str]:
    spec = load_spec(spec_path, check_points=False)
    runs, _ = collect_runs(runs_root, spec)
    rows = []
    for test, (v, found) in zip(report_tests(spec), replicated_verdicts(spec, runs)):
        metric = compared_metric(test)
        if test["kind"] != "paired" or "twin_of" in test or metric not in STEP_METRICS or not v.facts:
            continue
        m = max(len(f.verdict.comparisons) for f in found)
        margin = margin_of(spec, metric, STEP_METRICS)
        sign = -1.0 if test.get("direction") == "lower" else 1.0
        for i in range(m):
            pooled = [
                x for f in found if i < len(f.verdict.comparisons) for x in (f.verdict.comparisons[i].diffs or [])
            ]
            if len(pooled) < 4:
                continue
            target = sign * v.facts.get("target", target_effect(float("nan")))
            r = simulate(pooled, looks, st.ALPHA / m, kind, target, margin, draws, seed=i)
            label = found[0].verdict.comparisons[i].label
            rows.append(
                f"| {spec_path.stem} | {test['treatment'][0]} − {test['control']} ({label}) | {len(pooled)} | "
                f"{r['null_seq']:.1%} | {r['null_8']:.1%} | {r['null_all']:.1%} | {r['tgt_seq']:.0%} (±{abs(target):g}) | "
                f"{r['tgt_8']:.0%} | {r['tgt_all']:.0%} | {r['pairs_null']:.1f} · {r['pairs_tgt']:.1f} | "
                f"{r['bias']:+.2f} | {r['cover_stop']:.0%} · {r['cover_all']:.0%} | {r['equivalent']:.0%} | {r['null_e']:.1%} · {r['tgt_e']:.0%} · "
                f"{r['pairs_e_tgt']:.1f} |"
            )
    return rows


def main(argv: Optional[list[str]] = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m sweeps.reporting.sequential_sim", description=__doc__.split("\n\n")[0]
    )
    parser.add_argument("specs", nargs="*", help="specs to read (default: every real-model CPU spec)")
    parser.add_argument("--runs", default=str(REAL_CPU_RESULTS / "runs"), help="their run folders")
    parser.add_argument("--looks", nargs="+", type=int, default=[8, 12, 16, 24, 32], help="pairs per set at each look")
    parser.add_argument("--spending", default="obrien_fleming", choices=("obrien_fleming", "pocock"))
    parser.add_argument("--draws", type=int, default=200, help="data sets per world and comparison")
    args = parser.parse_args(argv)
    if args.draws < 1 or any(b <= a for a, b in zip(args.looks, args.looks[1:])) or args.looks[0] < 2:
        print("sequential_sim: --draws ≥ 1 and increasing --looks ≥ 2 are allowed", file=sys.stderr)
        return 2
    rows = rows_over_specs(
        args.specs, Path(args.runs), lambda p, runs: simulation_rows(p, runs, args.looks, args.spending, args.draws)
    )
    print("\n".join(HEAD + rows))
    return 0


if __name__ == "__main__":
    sys.exit(main())
