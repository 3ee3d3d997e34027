"""A peer's check of the trainer: one arm of a real-model claim spec trained with TRL's GRPOTrainer,
seed by seed, into run folders the report compares with grpo-lab's runs of the same arm
(sweeps/deciding/peer.py: steps_to_learn and reward curves, an unpaired test per metric).

    grpo peer experiments/real/cpu/r0_positive_control_room_cpu.yaml \\
        --arm learning_rate=5e-5 --seeds 0 1 2 3 4 5 --runs results/real/cpu/runs

writes results/real/cpu/peer/<sweep>/seed-<n>/ (config.yaml, metrics.jsonl, summary.json). What
both trainers share, from the spec's config at that point: the model folder, the dataset's training
rows through the chat template, the reward function, LoRA (r, α, dropout, every linear layer),
prompts per step × completions per prompt, max_completion_length, temperature, top_p, top_k, β,
ε, μ, loss_type, scale_rewards, the learning rate with a constant schedule (and warmup where the
config has it), max_grad_norm, Adam's betas and ε, max_steps and the seed. TRL samples its own
prompts and completions (its sampler and RNG streams are not grpo-lab's), so the runs are compared
as two independent samples, not paired. steps_to_learn is computed by grpo-lab's own code
(grpo_core/record/run_metrics.py) against the baseline of grpo-lab's run of the same point and seed: the
untrained policy's reward, which does not depend on the trainer.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Optional

from sweeps.deciding.peer import TRL_ARGS

from grpo_peer.trl_config import chat_rows, key_by_key, lora_config, reward_of_messages, trl_args

PEER_ROOT = Path("results/real/cpu/peer")  # next to the committed runs: one folder per sweep, one per seed


def parse_arm(items: list[str]) -> dict:
    """`key=value` pairs naming the arm (grid axis values), each value read as its config key's type
    (`grpo train --set` does the same)."""
    import yaml

    from grpo_core.config.values import coerce_value
    from grpo_core.util.errors import UserInputError
    from sweeps.arms import ARM

    arm = {}
    for item in items:
        key, sep, value = item.partition("=")
        if not sep or not key:
            raise UserInputError(f"--arm {item!r}: allowed: key=value, a grid axis and one of its values")
        if key in arm:
            raise UserInputError(f"--arm: {key} given twice; allowed: each grid axis once")
        arm[key] = value if key == ARM else coerce_value(key, yaml.safe_load(value))  # an arm: its name
    return arm


def spec_and_arm(spec_path: str, items: list[str]):
    """The claim spec and its arm named by `--arm key=value …`: one value of each grid axis, else a
    UserInputError naming what is allowed (peer_check and peer_step read their arm alike)."""
    from grpo_core.util.errors import UserInputError
    from sweeps.spec import load_spec

    spec = load_spec(spec_path)
    arm = parse_arm(items)
    if set(arm) != set(spec.grid) or any(arm[k] not in spec.grid[k] for k in arm):
        raise UserInputError(f"--arm {' '.join(items)}: allowed: one value of each grid axis ({spec.grid})")
    return spec, arm


def other_arm(folder: Path, arm: dict) -> Optional[str]:
    """The arm (key=value …) of a TRL run already under this spec's peer folder when it is not `arm`:
    the report compares one arm per spec (its seeds' folders are seed-<n>), so a second arm there
    would be read as the first's."""
    import yaml

    for config_path in sorted(folder.glob("seed-*/config.yaml")):
        try:
            config = yaml.safe_load(config_path.read_text()) or {}
        except (OSError, yaml.YAMLError):
            continue
        if isinstance(config, dict) and any(config.get(k) != v for k, v in arm.items()):
            return " ".join(f"{k}={config.get(k)}" for k in arm) + f" ({config_path.parent.name})"
    return None


def train_trl(cfg, out: Path, baseline_reward: float) -> dict:
    """Train `cfg` with TRL's GRPOTrainer into run folder `out`; returns its summary."""
    import torch
    import yaml
    from transformers.trainer_callback import PrinterCallback, TrainerCallback
    from trl import GRPOTrainer as TRLTrainer

    from grpo_core.tasks.models import load_model_and_tokenizer
    from grpo_core.record.provenance import cpu_name, versions
    from grpo_core.util.cpu_math import mkl_branch, process_mode
    from grpo_core.record.run_metrics import summarize
    from grpo_core.tasks.catalog import dataset_task

    torch.set_num_threads(cfg.num_threads)
    train, _ = dataset_task(cfg.dataset, cfg.prompt_column, cfg.answer_column).splits()
    rows = chat_rows(train)
    _, tokenizer = load_model_and_tokenizer(cfg.model)  # left padding, pad token set: as grpo-lab's
    steps: list[dict] = []
    logged_at: list[float] = []  # when each step was logged: TRL's step time, beside grpo-lab's median_step_time_s

    class Record(TrainerCallback):
        """Each logged step into metrics.jsonl as it comes (a long run shows how far it is; a killed
        one how far it got), and on one line of progress."""

        def on_log(self, args, state, control, logs=None, **kwargs):
            if logs and "reward" in logs:
                logged_at.append(time.perf_counter())
                steps.append(
                    {"step": state.global_step, **{k: float(v) for k, v in logs.items() if isinstance(v, (int, float))}}
                )
                metrics.write(json.dumps(steps[-1]) + "\n")
                metrics.flush()
                print(
                    f"seed {cfg.seed}: TRL step {state.global_step}/{cfg.max_steps}, reward {steps[-1]['reward']:.3f} "
                    f"({time.perf_counter() - started:.0f} s)",
                    flush=True,
                )

    out.mkdir(parents=True, exist_ok=False)
    (out / "config.yaml").write_text(yaml.safe_dump({**cfg.to_dict(), "trainer": "trl"}, sort_keys=False))
    started = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="grpo-peer-") as tmp, (out / "metrics.jsonl").open("w") as metrics:
        args = trl_args(cfg, tmp)
        (out / TRL_ARGS).write_text(json.dumps(key_by_key(cfg, args)) + "\n")  # the report prints it, key by key
        trainer = TRLTrainer(
            model=cfg.model,
            reward_funcs=[reward_of_messages(n) for n in cfg.reward_funcs],
            args=args,
            train_dataset=rows,
            processing_class=tokenizer,
            callbacks=[Record()],
            peft_config=lora_config(cfg),
        )
        trainer.remove_callback(PrinterCallback)
        trainer.train()
    rewards, losses = [s["reward"] for s in steps], [s.get("loss", 0.0) for s in steps]
    summary = {
        "status": "finished",
        "trainer": "trl",
        "steps_completed": len(steps),
        **summarize(rewards, losses, baseline_reward, cfg.stl_window, cfg.stl_delta, cfg.loss_departure_eps),
        "wall_time_s": time.perf_counter() - started,
        "median_step_time_s": (
            statistics.median(b - a for a, b in zip(logged_at, logged_at[1:])) if len(logged_at) > 1 else None
        ),
        "versions": ", ".join(f"{k} {v}" for k, v in versions().items()),
        # where it ran, as grpo-lab's runs record it: the CPU, its math mode and MKL's branch
        "device_name": cpu_name(),
        "cpu_math": process_mode(),
        "mkl_branch": mkl_branch(),
    }
    (out / "summary.json").write_text(json.dumps(summary, indent=2) + "\n")
    return summary


def ours_at(runs_root: Path, spec, point: dict) -> Optional[Path]:
    """grpo-lab's finished run folder of `point` (axis values and seed) in the spec's sweep folder."""
    from sweeps.driving.adopt import finished_folders
    from sweeps.spec import point_key

    found = finished_folders(runs_root, spec).get(point_key(point))
    return found[0] if found else None


def run_check(spec_path: str, arm_items: list[str], seeds: list[int], runs: str, out_root: str) -> int:
    """`grpo peer SPEC --arm … --seeds …`: train the arm with TRL, seed by seed, into
    OUT/<sweep>/seed-<n>/ (a finished seed is skipped, a killed one trained again). Bad input: a
    UserInputError, before anything is written."""
    from grpo_core.util.errors import UserInputError

    spec, arm = spec_and_arm(spec_path, arm_items)
    if (found := other_arm(Path(out_root) / spec.name, arm)) is not None:
        raise UserInputError(
            f"{Path(out_root) / spec.name} holds TRL runs of another arm, {found}; allowed: the same "
            f"arm (one per spec: the report compares one), or another --out for this one"
        )
    ours = {}
    for seed in seeds:
        point = {**arm, "seed": seed}
        ours[seed] = ours_at(Path(runs), spec, point)
        if ours[seed] is None:
            raise UserInputError(
                f"--seeds {seed}: grpo-lab has no finished run of {point} in {runs}/{spec.name} (its "
                f"baseline is the peer's); allowed: seeds whose grpo-lab run is finished (train it first)"
            )
        baseline = json.loads((ours[seed] / "summary.json").read_text()).get("baseline_reward")
        if not isinstance(baseline, (int, float)):
            raise UserInputError(
                f"--seeds {seed}: {ours[seed] / 'summary.json'} records no baseline_reward (the peer's "
                f"steps_to_learn is read against it); allowed: a run folder grpo-lab wrote"
            )
    for seed in seeds:
        out = Path(out_root) / spec.name / f"seed-{seed}"
        if (out / "summary.json").is_file():
            print(f"seed {seed}: {out} is done")
            continue
        if out.exists():  # a killed run: trained again
            import shutil

            shutil.rmtree(out)
        baseline = json.loads((ours[seed] / "summary.json").read_text())["baseline_reward"]
        summary = train_trl(spec.config_for({**arm, "seed": seed}), out, baseline)
        print(
            f"seed {seed}: TRL steps_to_learn {summary['steps_to_learn']}, reward AUC {summary['reward_auc']:.3f} "
            f"({summary['wall_time_s'] / 60:.1f} min) → {out}",
            flush=True,
        )
    return 0


def main(argv: Optional[list[str]] = None) -> int:
    """`python -m grpo_peer.check` (and its old name, `python -m benchmarks.peer_check`): as `grpo peer`."""
    from grpo_core.util import cpu_math

    cpu_math.pin("reproducible")  # before torch loads, as the `grpo` command does

    parser = argparse.ArgumentParser(prog="python -m grpo_peer.check", description=__doc__.split("\n\n")[0])
    parser.add_argument("spec", help="a real-model claim spec (experiments/real/cpu/*.yaml)")
    parser.add_argument("--arm", nargs="+", required=True, metavar="KEY=VALUE", help="the arm: its grid axis values")
    parser.add_argument("--seeds", nargs="+", type=int, required=True)
    parser.add_argument("--runs", default="results/real/cpu/runs", help="grpo-lab's runs of the spec (for baselines)")
    parser.add_argument("--out", default=str(PEER_ROOT))
    args = parser.parse_args(argv)
    from grpo_core.util.errors import UserInputError

    try:
        return run_check(args.spec, args.arm, args.seeds, args.runs, args.out)
    except UserInputError as exc:
        print(f"peer_check: {exc}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    raise SystemExit(main())
