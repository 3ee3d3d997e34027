"""Run under torchrun by test_data_parallel.py (and imported by it for the one-process side).

The test builds one global generation batch from the tiny model and saves it; every process
loads it, keeps its share of whole groups, and takes one optimizer step per loss type; the
step's (DDP-averaged) gradients and metrics are captured where the optimizer would apply them,
and process 0 saves them.
"""

from __future__ import annotations

import sys

import torch

LOSS_TYPES = ("grpo", "bnpo", "dapo", "dr_grpo")
VARIANTS = [(t, d) for t in LOSS_TYPES for d in (False, True)]  # (loss_type, groups 0 and 1 dropped)
PROMPTS, G = 4, 4  # 16 completions: 8 per process on 2 processes


def settings(loss_type: str, micro_batches: int) -> list[str]:
    return [
        "task=addition",
        f"prompts_per_step={PROMPTS}",
        f"num_generations={G}",
        f"loss_type={loss_type}",
        f"gradient_accumulation_steps={micro_batches}",
        "beta=0.04",
        "use_bias_correction_kl=true",
        "max_grad_norm=0",
        "max_steps=10",
        "stl_window=5",
        "seed=3",
    ]


def global_batch(trainer):
    """The same 16 completions with unequal lengths, advantages and reference log-probs everywhere."""
    from grpo_core.sampling.generation import reference_logps
    from grpo_core.trainer import GenerationBatch

    prompts = trainer.train_set[:PROMPTS]["prompt"]
    ids, mask = trainer._encode(prompts, repeat=G)
    completion_ids, completion_mask = trainer._sample(ids, mask, torch.Generator().manual_seed(0), group_size=G)
    gen = torch.Generator().manual_seed(1)
    advantages = torch.randn(ids.shape[0], generator=gen)
    with torch.no_grad():
        ref = reference_logps(trainer.policy, ids, mask, completion_ids, completion_mask, trainer.cfg.temperature)
    ref = ref + 0.3 * torch.randn(ref.shape, generator=gen)  # a reference the policy has left
    return GenerationBatch(ids, mask, completion_ids, completion_mask, advantages, None, ref, {})


def with_dropped_groups(batch, groups=(0, 1)):
    """Claim C6's drop: the groups' rows leave the loss mask; both are process 0's on 2 processes,
    so its whole share is out of the loss and only the global live count gets its normalizer right."""
    import dataclasses

    keep = torch.ones(batch.prompt_ids.shape[0])
    for g in groups:
        keep[g * G : (g + 1) * G] = 0
    return dataclasses.replace(
        batch, loss_mask=batch.completion_mask * keep.unsqueeze(1).long(), live_sequences=float(keep.sum())
    )


def share(batch, rank: int, processes: int):
    from grpo_core.trainer import GenerationBatch

    n = batch.prompt_ids.shape[0] // processes
    rows = slice(rank * n, (rank + 1) * n)
    live = None if batch.live_sequences is None else batch.live_sequences / processes  # as the trainer passes it
    return GenerationBatch(
        batch.prompt_ids[rows],
        batch.prompt_mask[rows],
        batch.completion_ids[rows],
        batch.completion_mask[rows],
        batch.advantages[rows],
        None,
        batch.ref_logps[rows],
        {},
        batch.loss_mask[rows],
        live,
    )


def one_step(batch, loss_type: str, micro_batches: int, processes: int, rank: int, dropped: bool = False) -> dict:
    """Gradients (per parameter name) and metrics of one optimizer step on this process's share."""
    from grpo_core.config.loading import load_config
    from grpo_core.trainer import GRPOTrainer

    trainer = GRPOTrainer(load_config(None, settings(loss_type, micro_batches)))
    batch = share(with_dropped_groups(batch) if dropped else batch, rank, processes)
    captured = {}
    trainer.optimizer.step = lambda: captured.update(
        {name: p.grad.detach().clone() for name, p in trainer.policy.named_parameters() if p.grad is not None}
    )
    metrics = trainer.optimize(batch)
    trainer.close()
    return {"grads": captured, "loss": metrics["loss"], "kl": metrics["kl"], "grad_norm": metrics["grad_norm"]}


def main(batch_file: str, out: str) -> None:
    from grpo_core.util.distributed import process_rank, shut_down, world_size
    from grpo_core.trainer import GenerationBatch

    batch = GenerationBatch(**torch.load(batch_file, weights_only=True))
    results = {(t, d): one_step(batch, t, 2, world_size(), process_rank(), d) for t, d in VARIANTS}
    if process_rank() == 0:
        torch.save(results, out)
    # as `grpo train` ends: a barrier, the group destroyed, and no interpreter teardown, where gloo's
    # threads had aborted a finished worker ("terminate called without an active exception", exit -6,
    # in this test on 2026-12-03 during a full suite run)
    shut_down()


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])
