"""What a search's pruner saves: the same search spec run with its pruner and without it, on fresh
stores, one worker (trials in number order), and compared on the trials and training time each
spends to reach the best value the search without pruning finds. Figures: results/benchmarks/pruning.md.

    .venv/bin/python benchmarks/pruning_saving.py experiments/search_lr_beta.yaml [--out FILE.md]

With `sampler: random` both runs try the same points in the same order (the sampler's draws do not
depend on what it has seen), so they differ only in what the pruner stops. Training time is the
runs' step times summed (model loading and baselines left out; they are the same per run in both);
wall time is the whole sweep's.
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))


def run_search(spec: dict, work: Path) -> tuple[Path, float]:
    path = work / f"{spec['name']}.yaml"
    path.write_text(yaml.safe_dump(spec, sort_keys=False))
    started = time.perf_counter()
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "grpo_lab",
            "sweep",
            str(path),
            "--workers",
            "1",
            "--storage",
            f"journal:///{work}/journal.log",
            "--tracking-uri",
            f"sqlite:///{work}/mlflow.db",
            "--out-root",
            str(work / "runs"),
        ],
        cwd=ROOT,
        capture_output=True,
        text=True,
    )
    if proc.returncode != 0:
        raise SystemExit(f"grpo sweep {path.name} failed:\n{proc.stderr[-3000:]}")
    return path, time.perf_counter() - started


def costs(path: Path, work: Path) -> dict:
    """Per trial in number order: its state, value and training seconds; and the totals."""
    from sweeps.reporting.search_report import trial_cost
    from sweeps.driving.trials import load_sweep_study

    spec, study = load_sweep_study(path, f"journal:///{work}/journal.log")
    trials = []
    for t in sorted(study.get_trials(deepcopy=False), key=lambda t: t.number):
        _, steps, seconds = trial_cost(work / "runs", spec, t.number)
        value = t.values[0] if t.values and t.state.name == "COMPLETE" else None  # (a pruned one's: its last report)
        trials.append({"number": t.number, "state": t.state.name, "value": value, "steps": steps, "train_s": seconds})
    return {"spec": spec, "trials": trials}


def to_reach(trials: list[dict], target: float, sign: float) -> tuple[int, float] | None:
    """Trials run and training seconds spent until the first complete trial at least as good as target."""
    spent = 0.0
    for i, t in enumerate(trials, 1):
        spent += t["train_s"]
        if t["value"] is not None and sign * t["value"] <= sign * target + 1e-12:
            return i, spent
    return None


def main(argv: list[str] | None = None) -> int:
    from grpo_core.record.provenance import machine, versions

    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("spec", help="a search spec with a pruner")
    parser.add_argument("--out", help="also write the Markdown here")
    args = parser.parse_args(argv)
    spec = yaml.safe_load(Path(args.spec).read_text())
    if not spec.get("pruner") or not spec.get("search"):
        print(
            f"pruning_saving: {args.spec}: not a search with a pruner; allowed: a spec with `search` and `pruner`",
            file=sys.stderr,
        )
        return 2
    off = {k: v for k, v in spec.items() if k != "pruner"}
    off["name"] = f"{spec['name']}-no-pruner"
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        results = {}
        for label, variant in (("without pruner", off), ("with pruner", spec)):
            path, wall = run_search(variant, work)
            results[label] = {**costs(path, work), "wall_s": wall}
    loaded = results["with pruner"]["spec"]
    sign = 1.0 if loaded.direction == "minimize" else -1.0
    done = [t["value"] for t in results["without pruner"]["trials"] if t["value"] is not None]
    target = min(done, key=lambda v: sign * v)
    lines = [
        f"# What the pruner saves: `{Path(args.spec).name}`",
        "",
        f"Command: `.venv/bin/python benchmarks/pruning_saving.py {args.spec}`, {time.strftime('%Y-%m-%d')}. "
        f"Machine: {machine()}. Versions: " + ", ".join(f"{k} {v}" for k, v in versions().items()) + ".",
        "",
        f"Both searches: {loaded.n_trials} trials of {loaded.sampler} sampling (the same points in the same "
        f"order), seeds {loaded.seeds} per trial, one worker; pruner {loaded.pruner}. Target: the best "
        f"{loaded.objective} the search without pruning found, {target:g}.",
        "",
        "| search | complete | pruned | optimizer steps | training time (s) | sweep wall (s) | best "
        f"{loaded.objective} | trials to reach the target | training time to reach it (s) |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for label, r in results.items():
        trials = r["trials"]
        values = [t["value"] for t in trials if t["value"] is not None]
        best = min(values, key=lambda v: sign * v) if values else None
        reach = to_reach(trials, target, sign)
        lines.append(
            f"| {label} | {sum(t['state'] == 'COMPLETE' for t in trials)} | "
            f"{sum(t['state'] == 'PRUNED' for t in trials)} | {sum(t['steps'] for t in trials)} | "
            f"{sum(t['train_s'] for t in trials):.1f} | {r['wall_s']:.1f} | "
            f"{'–' if best is None else f'{best:g}'} | {reach[0] if reach else 'not reached'} | "
            f"{f'{reach[1]:.1f}' if reach else '–'} |"
        )
    with_p, without = results["with pruner"]["trials"], results["without pruner"]["trials"]
    saved = 1 - sum(t["train_s"] for t in with_p) / max(1e-9, sum(t["train_s"] for t in without))
    lines += [
        "",
        f"The pruner saved {saved:.0%} of the training time of the whole search "
        f"({sum(t['steps'] for t in with_p)} instead of {sum(t['steps'] for t in without)} optimizer steps).",
    ]
    lost = [t["number"] for t, u in zip(with_p, without) if t["state"] == "PRUNED" and u["value"] == target]
    if lost and to_reach(with_p, target, sign) is None:
        lines.append(
            f"It pruned the trial(s) that found the target ({', '.join(map(str, lost))}): the pruned search "
            "did not find the best point."
        )
    elif lost:
        lines.append(
            f"It pruned trial(s) {', '.join(map(str, lost))}, which reached the target too, after an "
            "earlier trial had reached it."
        )
    text = "\n".join(lines) + "\n"
    print(text)
    if args.out:
        Path(args.out).write_text(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
