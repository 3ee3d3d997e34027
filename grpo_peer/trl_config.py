"""TRL's GRPOTrainer set up from a grpo-lab config, in one place: `grpo bench` (benchmarks/trl_bench.py)
and the peer check (check.py, one_step.py) both build TRL's side here, so the two cannot drift apart, and
`key_by_key` lists every shared key with both trainers' values, for a report to print.

What carries over: the keys in SAME_NAME (TRL's GRPOConfig field of the same name and meaning), the
batch (prompts per step × completions per prompt, one process, no accumulation), the optimizer steps
one generation batch feeds, the schedule's name in transformers' terms, warmup (steps, or a ratio as
transformers 5 reads a float below 1), LoRA (r, α, dropout, the target modules), and the reward
functions wrapped for TRL's conversational completions.
"""

from __future__ import annotations

from typing import Optional

# grpo-lab keys whose TRL 1.16 GRPOConfig field has the same name and meaning. Among them
# use_bias_correction_kl: TRL's default is True, grpo-lab's False, so it must be passed, not left out.
SAME_NAME = (
    "learning_rate",
    "weight_decay",
    "adam_beta1",
    "adam_beta2",
    "adam_epsilon",
    "max_grad_norm",
    "max_steps",
    "seed",
    "num_generations",
    "max_completion_length",
    "temperature",
    "top_p",
    "top_k",
    "beta",
    "epsilon",
    "epsilon_high",
    "delta",
    "num_iterations",
    "importance_sampling_level",
    "loss_type",
    "scale_rewards",
    "mask_truncated_completions",
    "top_entropy_quantile",
    "use_bias_correction_kl",
    "sapo_temperature_pos",
    "sapo_temperature_neg",
)


def trl_args(cfg, output_dir: str, *, device: str = "cpu", max_steps: Optional[int] = None):
    """TRL's GRPOConfig for grpo-lab's config `cfg`: one process on `device`, a step per logged row,
    nothing saved or reported elsewhere (`max_steps` overrides the config's, as `grpo bench` times
    a fixed number of steps)."""
    from trl import GRPOConfig as TRLConfig

    from grpo_core.algo.schedule import SCHEDULERS

    same = {key: getattr(cfg, key) for key in SAME_NAME}
    if max_steps is not None:
        same["max_steps"] = max_steps
    return TRLConfig(
        output_dir=output_dir,
        **same,
        per_device_train_batch_size=cfg.prompts_per_step * cfg.num_generations,
        gradient_accumulation_steps=1,
        steps_per_generation=cfg.steps_per_batch,  # TRL accumulates nothing here: its micro-batch is our step
        lr_scheduler_type=SCHEDULERS.get(cfg.lr_scheduler_type)[0],  # grpo-lab's name → transformers' (warmup kept)
        warmup_steps=cfg.warmup_steps or cfg.warmup_ratio,  # transformers 5: a float below 1 is a ratio
        logging_steps=1,
        save_strategy="no",
        report_to="none",
        disable_tqdm=True,
        gradient_checkpointing=False,
        use_cpu=device == "cpu",
        bf16=device == "cuda",
        log_level="error",
    )


def key_by_key(cfg, args) -> list[tuple[str, object, object]]:
    """(key, grpo-lab's value, TRL's value) for every key the two configs share, as they stand."""
    rows = [(key, getattr(cfg, key), getattr(args, key)) for key in SAME_NAME]
    rows.append(
        (
            "prompts_per_step × num_generations",
            cfg.prompts_per_step * cfg.num_generations,
            args.per_device_train_batch_size * args.gradient_accumulation_steps,
        )
    )
    rows.append(
        (
            "optimizer steps per generation batch",
            cfg.steps_per_batch,
            args.steps_per_generation // args.gradient_accumulation_steps,
        )
    )
    return rows


def lora_config(cfg):
    """peft's LoraConfig of grpo-lab's LoRA keys (every linear layer where the config names none)."""
    from peft import LoraConfig

    return LoraConfig(
        r=cfg.lora_r,
        lora_alpha=cfg.lora_alpha,
        lora_dropout=cfg.lora_dropout,
        target_modules=list(cfg.lora_target_modules) or "all-linear",
        task_type="CAUSAL_LM",
    )


def reward_of_messages(name: str):
    """grpo-lab's reward function `name` for TRL's conversational completions
    ([{"role": ..., "content": ...}]): scored on the last message's text."""
    from grpo_core.tasks.rewards import REWARD_FUNCS

    func = REWARD_FUNCS[name]

    def reward(completions, answer, **kwargs) -> list[float]:
        return func([c[-1]["content"] if isinstance(c, list) else c for c in completions], answer)

    reward.__name__ = name
    return reward


def chat_rows(rows) -> "object":
    """A datasets.Dataset of TRL's conversational prompts from rows with `prompt` and `answer` (TRL
    applies the chat template, as grpo-lab does)."""
    from datasets import Dataset

    return Dataset.from_list(
        [{"prompt": [{"role": "user", "content": r["prompt"]}], "answer": r["answer"]} for r in rows]
    )
