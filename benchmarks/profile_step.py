"""Where a training step's time goes: torch.profiler over a few steps of one experiment point
(a speed goal missed on a GPU is reported with this profile). Figures: results/benchmarks/smollm2_lora_cpu.md, results/benchmarks/gpu_profile.md and docs/development/measurements.md.

    python3 benchmarks/profile_step.py --spec experiments/real/r1_zero_loss.yaml --steps 3 --out profile.md

The spec's base config at its first grid point, seed 0, builds the trainer (`--set key=value`
overrides, e.g. the CPU testbed's tiny model). `--warmup` steps run unprofiled (CUDA-graph capture,
the allocator, the reward pool's start); then `--steps` steps run under torch.profiler, each
phase of a step labelled (sampling, the reference and old log-probs, waiting for the rewards, the
optimizer step: the trainer's methods wrapped here, the trainer itself unchanged). The report:

- per phase: its wall time (host) and, on a GPU, the kernel time inside it;
- the top operators by self time on the device (CUDA) or on the CPU;
- the CPU-side share, on a GPU: the part of the profiled wall time in which no kernel ran (launches,
  Python, host syncs, waiting for rewards), 1 − Σ kernel time / wall time (an upper bound on the
  GPU's idle share where kernels overlap on several streams).
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
# the phases of a step: trainer method -> label (a method called inside another is its own phase)
PHASES = {
    "_sample_round": "sample (generate G completions, start scoring)",
    "_old_and_ref_logps": "reference / old log-probs",
    "optimize": "loss, backward, optimizer step",
}
WAIT = "wait for the rewards (what scoring did not overlap)"


def device_time(event) -> float:
    """An averaged event's self time on the device in µs (torch ≥ 2.4 names it device, older cuda)."""
    return float(getattr(event, "self_device_time_total", getattr(event, "self_cuda_time_total", 0.0)) or 0.0)


def total_device_time(event) -> float:
    return float(getattr(event, "device_time_total", getattr(event, "cuda_time_total", 0.0)) or 0.0)


def label_phases(trainer) -> None:
    """Wrap the trainer's phase methods (on this instance only) in profiler labels."""
    import torch

    for name, label in PHASES.items():
        method = getattr(trainer, name)

        def labelled(*args, _method=method, _label=label, **kwargs):
            with torch.profiler.record_function(f"phase: {_label}"):
                return _method(*args, **kwargs)

        setattr(trainer, name, labelled)
    score_async = trainer._score_async  # returns the wait for this batch's rewards: label the wait

    def scoring(*args, **kwargs):
        pending = score_async(*args, **kwargs)

        def wait():
            with torch.profiler.record_function(f"phase: {WAIT}"):
                return pending()

        return wait

    trainer._score_async = scoring


def _cell(name: str, width: int = 70) -> str:
    name = name.replace("|", "/").replace("\n", " ")
    return name if len(name) <= width else name[: width - 1] + "…"


def on_device(event) -> bool:
    """True for an event that ran on the device (a kernel, a copy, or a label's device-side span)."""
    kind = getattr(event, "device_type", None)
    return kind is not None and getattr(kind, "name", str(kind)).upper() != "CPU"


def report(prof, wall_s: float, steps: int, cuda: bool, top: int) -> list[str]:
    """The phase table, the top operators (kernels on a GPU) and, on a GPU, the CPU-side share.

    On a GPU, torch.profiler gives each `record_function` label twice: its host event (wall time)
    and its device-side span (first to last kernel launched under it, as a `gpu_user_annotation`);
    the phase table shows both on one row. A host operator (`aten::mm`) also carries the time of
    the kernels it launched, which are listed on their own as device events: the kernel time sums
    and ranks the device events only, so no kernel is counted twice.
    """
    events = prof.key_averages()
    phases: dict[str, dict] = {}
    for e in events:
        if e.key.startswith("phase: "):
            row = phases.setdefault(e.key[len("phase: ") :], {"wall": 0.0, "span": 0.0})
            if on_device(e):
                row["span"] += total_device_time(e)
            else:
                row["wall"] += e.cpu_time_total
    lines = [
        "| phase | wall per step (ms) | share of the step |"
        + (" device span per step (ms: first to last kernel under it) |" if cuda else ""),
        "|---|---|---|" + ("---|" if cuda else ""),
    ]
    for label, row in sorted(phases.items(), key=lambda kv: -kv[1]["wall"]):
        ms = row["wall"] / 1e3 / steps
        lines.append(
            f"| {label} | {ms:.1f} | {ms / (wall_s * 1e3 / steps):.0%} |"
            + (f" {row['span'] / 1e3 / steps:.1f} |" if cuda else "")
        )
    ops = [e for e in events if not e.key.startswith(("phase: ", "ProfilerStep"))]
    if cuda:
        kernels = [e for e in ops if on_device(e)]
        busy = sum(device_time(e) for e in kernels) / 1e6  # s: every kernel's own time, once
        ranked, what, value = (
            sorted(kernels, key=lambda e: -device_time(e)),
            "device time (kernels, copies)",
            device_time,
        )
        pool = kernels
    else:
        busy, ranked, what = None, sorted(ops, key=lambda e: -e.self_cpu_time_total), "self CPU time"
        value, pool = (lambda e: e.self_cpu_time_total), ops  # noqa: E731
    total = sum(value(e) for e in pool) or 1.0
    lines += [
        "",
        f"Top {top} operators by {what} (of {total / 1e3 / steps:.1f} ms per step):",
        "",
        "| operator | calls per step | ms per step | share |",
        "|---|---|---|---|",
    ]
    for e in ranked[:top]:
        lines.append(
            f"| `{_cell(e.key)}` | {e.count / steps:g} | {value(e) / 1e3 / steps:.2f} | {value(e) / total:.1%} |"
        )
    if busy is not None:
        lines += [
            "",
            f"CPU-side share: **{max(0.0, 1 - busy / wall_s):.0%}** of the profiled wall time had no kernel "
            f"running (kernels {busy * 1e3 / steps:.1f} ms of {wall_s * 1e3 / steps:.1f} ms per step).",
        ]
    return lines


def main(argv: list[str] | None = None) -> int:
    sys.path.insert(0, str(ROOT))
    from grpo_core.config.loading import config_from_dict, parse_override
    from grpo_core.util.cpu_math import pin
    from sweeps import arms
    from sweeps.spec import load_spec

    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--spec", default=str(ROOT / "experiments" / "real" / "r1_zero_loss.yaml"))
    parser.add_argument(
        "--set",
        action="extend",
        nargs="+",
        default=[],
        metavar="KEY=VALUE",
        help="config overrides (--set a=1 --set b=2, or --set a=1 b=2)",
    )
    parser.add_argument("--warmup", type=int, default=2, help="unprofiled steps first")
    parser.add_argument("--steps", type=int, default=3, help="profiled steps")
    parser.add_argument("--top", type=int, default=15)
    parser.add_argument("--out", help="write the report here (markdown)")
    parser.add_argument(
        "--flops",
        action="store_true",
        help="instead of the profile: the step's achieved FLOP/s against the CPU's float32 peak "
        "(benchmarks/flop_rate.py)",
    )
    args = parser.parse_args(argv)
    spec = load_spec(args.spec, check_points=False)
    point = {axis: values[0] for axis, values in spec.grid.items()}
    overrides = dict(parse_override(item) for item in args.set)
    cfg = config_from_dict(
        {**spec.base, **arms.expand(spec.arms, point), "seed": 0, **overrides, "max_steps": args.warmup + args.steps},
        source=f"{args.spec} (first grid point)",
    )
    pin(cfg.cpu_math)  # before torch loads, as the grpo command does
    import torch

    from grpo_core.record.provenance import gpu_driver, machine, versions
    from grpo_core.trainer import GRPOTrainer

    command = "python3 benchmarks/profile_step.py " + " ".join(argv if argv is not None else sys.argv[1:])
    if args.flops:
        from benchmarks.flop_rate import report_lines

        text = (
            "\n".join(
                [
                    f"# FLOP rate of a training step: `{Path(args.spec).name}`, first grid point {point}, seed 0",
                    "",
                    f"Command: `{command}`, {time.strftime('%Y-%m-%d')}. Machine: {machine()}. Versions: "
                    + ", ".join(f"{k} {v}" for k, v in versions().items())
                    + ".",
                    "",
                    *report_lines(cfg, args.warmup, args.steps),
                ]
            )
            + "\n"
        )
        print(text)
        if args.out:
            Path(args.out).write_text(text)
        return 0

    trainer = GRPOTrainer(cfg)
    cuda = trainer.device.type == "cuda"
    try:
        label_phases(trainer)
        for _ in range(args.warmup):
            trainer.train_step()
        activities = [torch.profiler.ProfilerActivity.CPU] + ([torch.profiler.ProfilerActivity.CUDA] if cuda else [])
        step_times = []
        with torch.profiler.profile(activities=activities) as prof:
            started = time.perf_counter()
            for _ in range(args.steps):
                step_times.append(trainer.train_step()["step_time"])
            if cuda:
                torch.cuda.synchronize()
            wall = time.perf_counter() - started
    finally:
        trainer.close()
    env = {**versions(), **({"CUDA": torch.version.cuda, "driver": gpu_driver() or "unknown"} if cuda else {})}
    lines = [
        f"# Profile of a training step: `{Path(args.spec).name}`, first grid point {point or '(none)'}, seed 0",
        "",
        f"Command: `{command}`, {time.strftime('%Y-%m-%d')}. Machine: {machine()}. Versions: "
        + ", ".join(f"{k} {v}" for k, v in env.items())
        + ".",
        f"Config: {cfg.model}, {cfg.prompts_per_step} prompts × {cfg.num_generations} completions, "
        f"max_completion_length {cfg.max_completion_length}, decode {cfg.decode}, LoRA {cfg.use_peft}, "
        f"mixed_precision {cfg.mixed_precision}, device {trainer.device}. {args.warmup} unprofiled steps, then "
        f"{args.steps} profiled: median step {statistics.median(step_times):.3f} s under the profiler "
        f"(its overhead included).",
        "",
        *report(prof, wall, args.steps, cuda, args.top),
    ]
    if cuda:
        lines += ["", f"Peak GPU memory allocated: {torch.cuda.max_memory_allocated() / 2**20:.0f} MiB."]
    text = "\n".join(lines) + "\n"
    print(text)
    if args.out:
        Path(args.out).write_text(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
