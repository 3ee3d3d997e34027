"""One optimizer step of grpo-lab and of TRL's GRPOTrainer on the same batch, compared term by term.

The peer check (check.py) trains TRL beside grpo-lab and compares two independent samples of
runs: it can say "no difference detected", never that the two trainers compute the same thing. This
compares one step where everything is shared: grpo-lab samples a batch (its rows, prompts and
completions), TRL is handed those completions through its `rollout_func`, both trainers hold the same
LoRA weights (perturbed from peft's zero init, so the policy differs from the reference and every
adapter matrix gets a gradient), and both compute their rewards, advantages, reference and policy
log-probs, loss and LoRA gradient. Gradient clipping is off on both sides so the raw gradients are
compared, and LoRA dropout is off so the two forwards see the same network.

    grpo peer experiments/real/cpu/r0_positive_control_room_cpu.yaml --arm learning_rate=5e-5 --one-step

writes results/real/cpu/peer/<sweep>/one_step.json (every loss type at β 0 and 0.04), which the
report's peer section prints (sweeps/deciding/peer.py); tests/test_peer_step.py runs the same
comparison on the tiny model in the suite.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import sys
import tempfile
from pathlib import Path
from typing import Optional

from sweeps.deciding.peer import ONE_STEP

LOSS_TYPES = ("grpo", "dapo", "dr_grpo", "cispo", "sapo")
BETAS = (0.0, 0.04)
CISPO_EPSILON_HIGH = 5.0  # TRL's recommended upper bound for CISPO (the clip's other losses keep the config's)

# Agreement bounds, from the differences measured on this CPU (docs/development/measurements.md):
# the two trainers run the same float32 math in different orders (grpo-lab shares a group's prompt
# forward and counts positions from the mask; TRL runs each row whole, positions from 0), which
# moves a log-prob by ~1e-6 and a gradient by ~1e-5 of its norm. A wrong normalizer, sign, KL
# estimator or clip moves them by orders of magnitude more.
# The loss's difference is read relative to the larger of |TRL's loss| and 1e-3 (an on-policy loss can be ~0).
TOLERANCE = {"rewards": 0.0, "advantages": 1e-5, "ref_logps": 1e-4, "logps": 1e-4, "loss": 1e-4, "grad": 1e-3}


def step_config(cfg, loss_type: str, beta: float):
    """`cfg` for one compared step: the loss type and β under test, one step per generation batch,
    on-policy (μ 1), LoRA without dropout, no gradient clipping (the raw gradients are compared)."""
    return dataclasses.replace(
        cfg,
        loss_type=loss_type,
        beta=beta,
        use_peft=True,
        lora_dropout=0.0,
        max_grad_norm=0.0,
        num_iterations=1,
        steps_per_generation=None,
        gradient_accumulation_steps=1,
        log_completions=False,
        reward_workers=0,
        zero_variance_groups="keep",
        epsilon_high=CISPO_EPSILON_HIGH if loss_type == "cispo" else cfg.epsilon_high,
    )


def perturb_lora(model, seed: int, std: float) -> None:
    """Every LoRA B matrix (peft starts them at zero) drawn from N(0, std²), seeded: the policy then
    differs from its reference (the adapters off) and the A matrices get a gradient."""
    import torch

    gen = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, param in model.named_parameters():
            if "lora_B" in name:
                param.copy_(torch.randn(param.shape, generator=gen) * std)


def _lora(model) -> dict:
    return {name: param for name, param in model.named_parameters() if "lora_" in name}


def _masked_max(a, b, mask) -> float:
    return float(((a.float() - b.float()).abs() * mask).max()) if mask.any() else 0.0


def ours_step(cfg, perturb_seed: int, perturb_std: float) -> dict:
    """grpo-lab's trainer on `cfg`: one generation batch and one optimizer step whose update is not
    applied. Returns what TRL is handed and what is compared."""
    import torch

    from grpo_core.sampling.generation import completion_logps
    from grpo_core.trainer import GRPOTrainer

    trainer = GRPOTrainer(cfg)
    try:
        perturb_lora(trainer.policy, perturb_seed, perturb_std)
        seen: dict = {}
        score = trainer._score_async

        def capturing_score(rows, completions):  # the rows and texts the rewards see, and the rewards
            pending = score(rows, completions)

            def wait():
                per_func, timeouts = pending()
                seen.update(rows={k: list(v) for k, v in rows.items()}, per_func=per_func)
                return per_func, timeouts

            return wait

        trainer._score_async = capturing_score
        batch = trainer.generate_batch()
        grads: dict = {}

        def record_grads(*args, **kwargs):  # instead of the update: the gradient as the optimizer would get it
            grads.update({name: p.grad.detach().clone() for name, p in _lora(trainer.policy).items()})

        trainer.optimizer.step = record_grads
        metrics = trainer.optimize(batch)
        with torch.no_grad():
            logps, _ = completion_logps(
                trainer.model,
                batch.prompt_ids,
                batch.prompt_mask,
                batch.completion_ids,
                batch.completion_mask,
                cfg.temperature,
                group_size=cfg.num_generations,
            )
        return {
            "rows": seen["rows"],
            "per_func": seen["per_func"],
            "batch": batch,
            "logps": logps,
            "loss": metrics["loss"],
            "grads": grads,
            "lora": {n: p.detach().clone() for n, p in _lora(trainer.policy).items()},
            "tokenizer": trainer.tokenizer,
            "reward_names": list(trainer.reward_funcs),
            "reward_funcs": trainer.reward_funcs,
        }
    finally:
        trainer.close()


def trl_step(cfg, ours: dict, model_path: str, output_dir: str) -> dict:
    """TRL's GRPOTrainer on grpo-lab's rows and completions (its rollout_func hands them over), with
    grpo-lab's LoRA weights: one training_step (forward, loss, backward; no update)."""
    import torch
    from datasets import Dataset
    from trl import GRPOTrainer as TRLTrainer

    from grpo_peer.trl_config import lora_config, trl_args

    batch, rows = ours["batch"], ours["rows"]
    lengths = batch.completion_mask.sum(dim=1).tolist()
    prompt_ids = [ids[mask.bool()].tolist() for ids, mask in zip(batch.prompt_ids, batch.prompt_mask)]
    completion_ids = [ids[:n].tolist() for ids, n in zip(batch.completion_ids, lengths)]
    inputs = [{"prompt": prompt, "answer": answer} for prompt, answer in zip(rows["prompt"], rows["answer"])]

    def rollout(prompts, trainer):  # TRL's generation replaced by grpo-lab's completions, row for row
        if list(prompts) != [row["prompt"] for row in inputs]:
            raise RuntimeError("TRL handed rollout_func other prompts than grpo-lab's rows")
        return {"prompt_ids": prompt_ids, "completion_ids": completion_ids, "logprobs": None}

    rewards: dict = {}

    def as_trl_reward(name, func):  # grpo-lab's reward function, its values recorded as TRL computes them
        def reward(completions, **columns):
            texts = [c[-1]["content"] if isinstance(c, list) else c for c in completions]
            values = list(func(texts, **{k: v for k, v in columns.items() if k in rows}))
            rewards[name] = values
            return values

        reward.__name__ = name
        return reward

    args = trl_args(cfg, output_dir)
    trainer = TRLTrainer(
        model=model_path,
        args=args,
        processing_class=ours["tokenizer"],
        reward_funcs=[as_trl_reward(n, f) for n, f in ours["reward_funcs"].items()],
        train_dataset=Dataset.from_list(inputs),
        peft_config=lora_config(cfg),
        rollout_func=rollout,
    )
    theirs = _lora(trainer.model)
    if set(theirs) != set(ours["lora"]):
        raise RuntimeError(f"the two trainers' LoRA parameters differ: {sorted(set(theirs) ^ set(ours['lora']))[:4]}")
    with torch.no_grad():
        for name, param in theirs.items():
            param.copy_(ours["lora"][name])
    produced: dict = {}
    generate_and_score = trainer._generate_and_score_completions

    def capturing(generation_batch):  # before TRL shuffles the rows: in grpo-lab's order
        out = generate_and_score(generation_batch)
        produced.update(out)
        return out

    trainer._generate_and_score_completions = capturing
    trainer.current_gradient_accumulation_steps = args.gradient_accumulation_steps  # set by Trainer's train loop
    loss = trainer.training_step(trainer.model, inputs, None)
    grads = {name: param.grad.detach().clone() for name, param in theirs.items()}
    with torch.no_grad():
        ids = torch.cat([produced["prompt_ids"], produced["completion_ids"]], dim=1)
        attention = torch.cat([produced["prompt_mask"], produced["completion_mask"]], dim=1)
        logps = trainer._get_per_token_logps_and_entropies(
            trainer.model, ids, attention, produced["completion_ids"].size(1)
        )[0]
    return {
        "rewards": rewards,
        "advantages": produced["advantages"],
        "ref_logps": produced.get("ref_per_token_logps"),
        "completion_mask": produced["completion_mask"],
        "logps": logps,
        "loss": float(loss),
        "grads": grads,
        "trl_args": args,
    }


def compare(ours: dict, theirs: dict) -> dict:
    """Each compared term's largest difference (the gradient's: ‖Δ‖ / ‖TRL's‖) and whether it is within TOLERANCE."""
    import torch

    batch = ours["batch"]
    T = theirs["completion_mask"].shape[1]
    mask = batch.completion_mask[:, :T].float()
    if not torch.equal(batch.completion_mask[:, :T].long(), theirs["completion_mask"].long()):
        raise RuntimeError("TRL's completion mask is not grpo-lab's")
    reward_gap = max(
        max(abs(a - b) for a, b in zip(ours["per_func"][n], theirs["rewards"][n])) for n in ours["per_func"]
    )
    names = sorted(ours["grads"])
    g_ours = torch.cat([ours["grads"][n].flatten() for n in names]).double()
    g_trl = torch.cat([theirs["grads"][n].flatten() for n in names]).double()
    diff = {
        "rewards": reward_gap,
        "advantages": float((batch.advantages.float() - theirs["advantages"].float()).abs().max()),
        "ref_logps": (
            None if batch.ref_logps is None else _masked_max(batch.ref_logps[:, :T], theirs["ref_logps"], mask)
        ),
        "logps": _masked_max(ours["logps"][:, :T], theirs["logps"], mask),
        "loss": abs(ours["loss"] - theirs["loss"]) / max(abs(theirs["loss"]), 1e-3),
        "grad": float((g_ours - g_trl).norm() / g_trl.norm().clamp(min=1e-30)),
    }
    if (batch.ref_logps is None) != (theirs["ref_logps"] is None):
        raise RuntimeError("one trainer computed reference log-probs and the other did not")
    return {
        "values": {
            "loss_ours": ours["loss"],
            "loss_trl": theirs["loss"],
            "grad_norm_trl": float(g_trl.norm()),
            "tokens": int(mask.sum()),
            "completions": int(mask.shape[0]),
        },
        "diff": diff,
        "agree": all(v is None or v <= TOLERANCE[k] for k, v in diff.items()),
    }


def one_step(
    cfg,
    loss_type: str,
    beta: float,
    *,
    perturb_seed: int = 0,
    perturb_std: float = 0.02,
    trl_changes: Optional[dict] = None,
) -> dict:
    """Both trainers' step on `cfg` with `loss_type` and `beta`; compare()'s result and the keys
    whose values differ between the two configs (`trl_changes`: config values TRL alone gets, to
    show that the comparison sees a difference)."""
    import warnings

    from grpo_core.tasks.models import resolve_model_path

    from grpo_peer.trl_config import key_by_key

    cfg = step_config(cfg, loss_type, beta)
    trl_cfg = dataclasses.replace(cfg, **(trl_changes or {}))
    path = resolve_model_path(cfg.model, cfg.cache_dir, cfg.task, cfg.tiny_pretrain_steps)
    with warnings.catch_warnings(), tempfile.TemporaryDirectory(prefix="grpo-peer-step-") as tmp:
        # what the harness itself causes: the scheduler steps without an update (the step is not
        # applied), TRL's note that rollout_func is experimental
        warnings.simplefilter("ignore")
        ours = ours_step(cfg, perturb_seed, perturb_std)
        theirs = trl_step(trl_cfg, ours, path, tmp)
    result = compare(ours, theirs)
    differing = [(k, a, b) for k, a, b in key_by_key(cfg, theirs["trl_args"]) if a != b]
    return {
        "loss_type": loss_type,
        "beta": beta,
        **result,
        "differing_keys": [list(map(str, row)) for row in differing],
        "agree": result["agree"] and not differing,
    }


def run_one_step(spec_path: str, arm_items: list[str], seed: int, out_root: str) -> int:
    """`grpo peer SPEC --arm … --one-step`: one step of both trainers per loss type and β on the batch
    grpo-lab samples at `seed`, written to OUT/<sweep>/one_step.json; exit 0 when every row agrees
    within TOLERANCE, else 1. Bad input: a UserInputError, before anything is written."""
    from grpo_peer.check import spec_and_arm

    spec, arm = spec_and_arm(spec_path, arm_items)
    cfg = spec.config_for({**arm, "seed": seed})
    rows = []
    for loss_type in LOSS_TYPES:
        for beta in BETAS:
            row = one_step(cfg, loss_type, beta)
            rows.append(row)
            print(
                f"{loss_type:8s} β {beta:<5g} {'agree' if row['agree'] else 'DIFFER'}  "
                + "  ".join(f"{k} {'–' if v is None else f'{v:.1e}'}" for k, v in row["diff"].items()),
                flush=True,
            )
    out = Path(out_root) / spec.name / ONE_STEP
    out.parent.mkdir(parents=True, exist_ok=True)
    from grpo_core.record.provenance import versions

    record = {
        "spec": spec.name,
        "arm": arm,
        "seed": seed,
        "tolerance": TOLERANCE,
        "versions": ", ".join(f"{k} {v}" for k, v in versions().items()),
        "steps": rows,
    }
    tmp = out.with_suffix(".tmp")
    tmp.write_text(json.dumps(record, indent=2) + "\n")
    tmp.replace(out)
    print(f"→ {out}")
    return 0 if all(row["agree"] for row in rows) else 1


def main(argv: Optional[list[str]] = None) -> int:
    """`python -m grpo_peer.one_step` (and its old name, `python -m benchmarks.peer_step`): as
    `grpo peer SPEC --arm … --one-step`."""
    from grpo_core.util import cpu_math

    cpu_math.pin("reproducible")  # before torch loads, as the `grpo` command does
    from grpo_core.util.errors import UserInputError

    from grpo_peer.check import PEER_ROOT

    parser = argparse.ArgumentParser(prog="python -m grpo_peer.one_step", description=__doc__.split("\n\n")[0])
    parser.add_argument("spec", help="a claim spec (experiments/real/cpu/*.yaml)")
    parser.add_argument("--arm", nargs="+", required=True, metavar="KEY=VALUE", help="the arm: its grid axis values")
    parser.add_argument("--seed", type=int, default=0, help="the run seed (the batch grpo-lab samples)")
    parser.add_argument("--out", default=str(PEER_ROOT))
    args = parser.parse_args(argv)
    try:
        return run_one_step(args.spec, args.arm, args.seed, args.out)
    except UserInputError as exc:
        print(f"peer_step: {exc}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    raise SystemExit(main())
