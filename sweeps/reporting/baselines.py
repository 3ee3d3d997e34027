"""The real-model testbed's register of set-up baselines (sweeps/deciding/baselines.py says why
one baseline per set-up), written from the committed run folders:

    python -m sweeps.reporting.baselines            # record the set-ups that have no entry yet
    python -m sweeps.reporting.baselines --check    # exit 1 where a set-up's runs have no entry
"""

from __future__ import annotations

import argparse
import sys
from typing import Optional

from ..deciding.baselines import REGISTER, estimates, read_register, record_missing
from ..paths import REAL_CPU_EXPERIMENTS, REAL_CPU_RESULTS
from ..spec import load_spec
from .report_inputs import collect_runs


def main(argv: Optional[list[str]] = None) -> int:
    from .reproduce import claim_specs

    parser = argparse.ArgumentParser(prog="python -m sweeps.reporting.baselines", description=__doc__.split("\n\n")[0])
    parser.add_argument("--check", action="store_true", help="exit 1 where a set-up's runs have no entry")
    args = parser.parse_args(argv)
    runs_root, path = REAL_CPU_RESULTS / "runs", REAL_CPU_RESULTS / REGISTER
    runs = []
    for p in claim_specs(REAL_CPU_EXPERIMENTS):
        spec = load_spec(p, check_points=False)
        if (runs_root / spec.name).is_dir():
            runs += collect_runs(runs_root, spec, setup_baselines=False)[0]
    if args.check:
        register = read_register(path)
        missing = [k for k in estimates(runs) if k not in register]
        print(
            f"{path}: {len(missing)} set-up(s) of committed runs without an entry" if missing else f"{path}: complete"
        )
        return 1 if missing else 0
    added = record_missing(path, runs)
    for e in added:
        print(
            f"{path}: recorded {e['baseline_reward']:.4f} for {e['setup'].get('dataset') or e['setup'].get('task')} "
            f"(max_completion_length {e['setup'].get('max_completion_length')}), from "
            f"{len(e['estimates'])} estimate(s)"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
