"""TRL's own loss arithmetic on given tensors, for agreement tests: TRL 1.16's
`GRPOTrainer._compute_loss` runs unchanged on an object built without `__init__`, whose log-prob
forward returns the tensors a test gives. So every line of TRL's importance sampling, clipping,
KL, masking and aggregation is TRL's, not a restatement of it."""

from __future__ import annotations

import collections
import types

import torch


class _OneProcess:
    """What _compute_loss asks of accelerate on one process."""

    num_processes = 1
    is_main_process = True
    sync_gradients = True

    def gather(self, x):
        return x

    def gather_for_metrics(self, x):
        return x

    def reduce(self, x, reduction="sum"):
        return x

    def pad_across_processes(self, x, dim=0, pad_index=0):
        return x


def trl_loss(
    per_token_logps,
    old_per_token_logps,
    ref_per_token_logps,
    advantages,
    completion_mask,
    *,
    loss_type,
    beta=0.0,
    epsilon=0.2,
    epsilon_high=None,
    importance_sampling_level="token",
    max_completion_length,
    num_items_in_batch=None,
    use_bias_correction_kl=False,
    gradient_accumulation_steps=1,
    sapo_temperature_pos=1.0,
    sapo_temperature_neg=1.05,
    entropies=None,
    top_entropy_quantile=1.0,
    delta=None,
    entropy_coef=0.0,
) -> torch.Tensor:
    """TRL's loss of one micro-batch (B, T) of a generation batch split in gradient_accumulation_steps."""
    from trl import GRPOTrainer

    trainer = GRPOTrainer.__new__(GRPOTrainer)
    entropies = torch.zeros_like(per_token_logps) if entropies is None else entropies
    trainer._get_per_token_logps_and_entropies = lambda *a, **k: (per_token_logps, entropies, None)
    trainer.__dict__.update(
        aux_loss_enabled=False,
        top_entropy_quantile=top_entropy_quantile,
        off_policy_mask_threshold=None,
        importance_sampling_level=importance_sampling_level,
        beta=beta,
        loss_type=loss_type,
        epsilon_low=epsilon,
        epsilon_high=epsilon if epsilon_high is None else epsilon_high,
        use_vllm=False,
        vllm_importance_sampling_correction=False,
        model=types.SimpleNamespace(training=True),
        current_gradient_accumulation_steps=gradient_accumulation_steps,
        max_completion_length=max_completion_length,
        _entropy_bonus_enabled=entropy_coef != 0.0,
        entropy_coef=entropy_coef,
        use_adaptive_entropy=False,
        _metrics={"train": collections.defaultdict(list), "eval": collections.defaultdict(list)},
        accelerator=_OneProcess(),
        args=types.SimpleNamespace(
            use_bias_correction_kl=use_bias_correction_kl,
            delta=delta,
            sapo_temperature_pos=sapo_temperature_pos,
            sapo_temperature_neg=sapo_temperature_neg,
            steps_per_generation=gradient_accumulation_steps,
        ),
    )
    B, T = per_token_logps.shape
    mask = completion_mask.long()
    inputs = {
        "prompt_ids": torch.zeros(B, 1, dtype=torch.long),
        "prompt_mask": torch.ones(B, 1, dtype=torch.long),
        "completion_ids": torch.zeros(B, T, dtype=torch.long),
        "completion_mask": mask,
        "advantages": advantages,
        "old_per_token_logps": old_per_token_logps,
        "num_items_in_batch": torch.as_tensor(
            float(mask.sum()) if num_items_in_batch is None else float(num_items_in_batch)
        ),
    }
    if ref_per_token_logps is not None:
        inputs["ref_per_token_logps"] = ref_per_token_logps
    return GRPOTrainer._compute_loss(trainer, None, inputs)
