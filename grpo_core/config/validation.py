"""Checks of a config's values and their combinations (`validate`, no I/O beyond path checks) and
of what it names (`check_inputs`: the dataset, the reward functions, a checkpoint). Each failure is
one ConfigError naming the key and what is allowed."""

from __future__ import annotations

import dataclasses
import math
from pathlib import Path
from typing import Optional

from grpo_core.algo import axes
from grpo_core.config.checkpoint_compat import check_checkpoint, check_checkpoint_folder
from grpo_core.config.schema import DECODE_MODES, DEVICES, DTYPES, MIXED_PRECISION, TRACKING_SCHEMES, GRPOConfig
from grpo_core.config.values import short_value
from grpo_core.util.cpu_math import MODES as CPU_MATH_MODES
from grpo_core.util.errors import ConfigError, UserInputError


def _one_of(key: str, value: str, allowed: tuple[str, ...]) -> None:
    if value not in allowed:
        raise ConfigError(key, f"unknown value {short_value(value)}; allowed: {', '.join(allowed)}")


def batch_split_problem(cfg: GRPOConfig, num_processes: int) -> Optional[ConfigError]:
    """The one rule for splitting a step's batch: P processes each sample prompts_per_step / P whole
    groups, and gradient_accumulation_steps divides each process's completions into equal
    micro-batches. The error naming the key that breaks it, or None. validate checks it for one
    process, `grpo train --num-processes` before launching, the trainer for the processes it has."""
    if cfg.prompts_per_step % num_processes:
        return ConfigError(
            "prompts_per_step",
            f"{cfg.prompts_per_step} does not split over {num_processes} processes; "
            f"allowed: a multiple of {num_processes}",
        )
    local = cfg.prompts_per_step // num_processes * cfg.num_generations  # completions per process
    if local % cfg.gradient_accumulation_steps:
        where = (
            "the generation batch prompts_per_step × num_generations"
            if num_processes == 1
            else f"the completions of each of {num_processes} processes"
        )
        return ConfigError(
            "gradient_accumulation_steps",
            f"got {cfg.gradient_accumulation_steps}; allowed: a divisor of {where} = {local} completions",
        )
    return None


SEED_RANGE = "[0, 2^32 − 1] (numpy's seed range)"


def seed_in_range(seed) -> bool:
    """A seed every library a run seeds accepts: an integer (not a bool) numpy's seeding takes."""
    return isinstance(seed, int) and not isinstance(seed, bool) and 0 <= seed < 2**32


FLOAT32_MAX = 3.4028234663852886e38  # torch.finfo(torch.float32).max
FLOAT32_TINY = 1.1754943508222875e-38  # its smallest normal number


def validate(cfg: GRPOConfig) -> GRPOConfig:
    """Check every value and combination; raise ConfigError naming the key and what is allowed.
    No I/O beyond checking that paths exist, and `cfg` is left as it is: returns the config with
    the values that depend on others filled in (tiny_pretrain_steps: the task's). What needs
    reading (a dataset's columns, a reward function's module, a checkpoint's config) is
    check_inputs."""
    from grpo_core.tasks.models import check_model_name
    from grpo_core.tasks.rewards import check_reward_list
    from grpo_core.tasks.catalog import TASKS, check_dataset_source, reward_funcs_of

    def require(cond: bool, key: str, allowed: str) -> None:
        if not cond:
            raise ConfigError(key, f"got {short_value(getattr(cfg, key))}; allowed: {allowed}")

    axes.check(cfg)  # every variant axis whose values are names: a registered name (grpo_core/algo/axes.py)
    _one_of("dtype", cfg.dtype, DTYPES)
    require(cfg.lora_r >= 1, "lora_r", "an integer ≥ 1")
    require(cfg.lora_alpha >= 1, "lora_alpha", "an integer ≥ 1")
    require(0 <= cfg.lora_dropout < 1, "lora_dropout", "a number in [0, 1)")
    require(
        all(isinstance(m, str) and m for m in cfg.lora_target_modules),
        "lora_target_modules",
        "a list of module names, e.g. [q_proj, v_proj]",
    )
    if cfg.gguf_file is not None:
        if not Path(cfg.model).expanduser().is_dir():
            raise ConfigError("gguf_file", f"needs `model` to be a local directory holding it; model is {cfg.model!r}")
        if not (Path(cfg.model).expanduser() / cfg.gguf_file).is_file():
            raise ConfigError(
                "gguf_file", f"no file {cfg.gguf_file!r} in {cfg.model}; allowed: a .gguf file in that directory"
            )
    require(
        isinstance(cfg.prompt_template, str)
        and (cfg.prompt_template == "" or cfg.prompt_template.count("{prompt}") == 1),
        "prompt_template",
        'text holding {prompt} once (where the prompt goes), or "" for the prompt alone',
    )
    if cfg.dataset is not None:
        check_dataset_source(cfg.dataset)
    require(cfg.max_num_gen_batches >= 1, "max_num_gen_batches", "an integer ≥ 1 (generation rounds per step)")
    _one_of("decode", cfg.decode, DECODE_MODES)
    require(cfg.eos_check_every >= 0, "eos_check_every", "an integer ≥ 0 (0 = auto)")
    require(cfg.log_completions_per_step >= 0, "log_completions_per_step", "an integer ≥ 0 (0 = every completion)")
    require(cfg.num_completions_to_print >= 0, "num_completions_to_print", "an integer ≥ 0 (0 = none)")
    _one_of("mixed_precision", cfg.mixed_precision, MIXED_PRECISION)
    _one_of("device", cfg.device, DEVICES)
    _one_of("cpu_math", cfg.cpu_math, CPU_MATH_MODES)
    _one_of("task", cfg.task, tuple(TASKS))
    check_reward_list(cfg.reward_funcs)
    rewards = reward_funcs_of(cfg)
    require(
        not cfg.reward_weights or len(cfg.reward_weights) == len(rewards),
        "reward_weights",
        f"one weight per reward function: {len(rewards)} ({', '.join(rewards)})",
    )
    require(cfg.reward_workers >= 0, "reward_workers", "an integer ≥ 0 (0 = in the training process)")
    require(
        math.isfinite(cfg.reward_timeout) and cfg.reward_timeout >= 0,
        "reward_timeout",
        "a number of seconds ≥ 0 (0 = no limit)",
    )
    require(
        cfg.reward_timeout == 0 or cfg.reward_workers >= 1,
        "reward_timeout",
        "0 unless reward_workers ≥ 1 (a timeout needs a worker process that can be stopped)",
    )
    require(math.isfinite(cfg.reward_timeout_value), "reward_timeout_value", "a finite number")

    def finite(key: str) -> None:  # these reach float32 tensors: within its range, or 0
        value = getattr(cfg, key)
        require(
            math.isfinite(value) and (value == 0 or FLOAT32_TINY <= abs(value) <= FLOAT32_MAX),
            key,
            f"a finite number, 0 or of absolute value in [{FLOAT32_TINY:.3g}, {FLOAT32_MAX:.3g}] (float32's range)",
        )

    for key in (
        "learning_rate",
        "beta",
        "advantage_noise_std",
        "advantage_scale",
        "weight_decay",
        "max_grad_norm",
        "temperature",
        "epsilon",
        "stl_delta",
        "loss_departure_eps",
        "sapo_temperature_pos",
        "sapo_temperature_neg",
        "entropy_coef",
    ):
        finite(key)
    require(
        0 <= cfg.overlong_buffer_len <= cfg.max_completion_length,
        "overlong_buffer_len",
        f"an integer in [0, max_completion_length = {cfg.max_completion_length}] (0 = off)",
    )
    require(
        math.isfinite(cfg.overlong_penalty_factor) and cfg.overlong_penalty_factor >= 0,
        "overlong_penalty_factor",
        "a finite number ≥ 0",
    )
    require(not cfg.kl_in_reward or cfg.beta > 0, "kl_in_reward", "false unless beta > 0 (the KL's weight)")
    require(
        not (cfg.kl_in_reward and cfg.zero_variance_groups == "resample"),
        "kl_in_reward",
        "false with zero_variance_groups resample (it picks groups by reward before the KL is measured)",
    )
    require(0 < cfg.top_entropy_quantile <= 1, "top_entropy_quantile", "a number in (0, 1] (1 = every token)")
    for key in ("sapo_temperature_pos", "sapo_temperature_neg"):
        require(getattr(cfg, key) > 0, key, "a number > 0 (the soft gate's temperature)")
    require(cfg.learning_rate > 0, "learning_rate", "a number > 0")
    require(cfg.beta >= 0, "beta", "a number ≥ 0 (0 = no reference model)")
    require(cfg.advantage_noise_std >= 0, "advantage_noise_std", "a number ≥ 0 (0 = off)")
    require(cfg.advantage_noise_steps >= 0, "advantage_noise_steps", "an integer ≥ 0 (0 = every step)")
    require(cfg.advantage_scale > 0, "advantage_scale", "a number > 0 (1 = off)")
    require(cfg.weight_decay >= 0, "weight_decay", "a number ≥ 0")
    require(0 <= cfg.adam_beta1 < 1, "adam_beta1", "a number in [0, 1)")
    require(0 <= cfg.adam_beta2 < 1, "adam_beta2", "a number in [0, 1)")
    require(0 < cfg.adam_epsilon < 1, "adam_epsilon", "a number in (0, 1)")  # larger: Adam barely moves a weight
    require(cfg.max_grad_norm >= 0, "max_grad_norm", "a number ≥ 0 (0 = no clipping)")
    require(cfg.max_steps >= 1, "max_steps", "an integer ≥ 1")
    require(cfg.warmup_steps >= 0, "warmup_steps", "an integer ≥ 0 (0 = warmup off)")
    require(0 <= cfg.warmup_ratio < 1, "warmup_ratio", "a number in [0, 1) (0 = warmup off)")
    require(
        cfg.warmup_steps <= cfg.max_steps,
        "warmup_steps",
        f"an integer ≤ max_steps ({cfg.max_steps}): warmup cannot be longer than the run",
    )
    require(cfg.prompts_per_step >= 1, "prompts_per_step", "an integer ≥ 1")
    require(
        cfg.num_generations >= 2, "num_generations", "an integer ≥ 2 (a group needs two completions to have a spread)"
    )
    require(cfg.num_iterations >= 1, "num_iterations", "an integer ≥ 1")
    if cfg.steps_per_generation is not None:
        require(
            cfg.steps_per_generation >= 1 and cfg.steps_per_generation % cfg.gradient_accumulation_steps == 0,
            "steps_per_generation",
            f"a multiple of gradient_accumulation_steps ({cfg.gradient_accumulation_steps}), "
            f"or null for gradient_accumulation_steps",
        )
    require(cfg.gradient_accumulation_steps >= 1, "gradient_accumulation_steps", "an integer ≥ 1")
    if (problem := batch_split_problem(cfg, 1)) is not None:
        raise problem
    require(0 < cfg.epsilon < 1, "epsilon", "a number in (0, 1)")
    if cfg.delta is not None:
        require(
            math.isfinite(cfg.delta) and cfg.delta > 1,
            "delta",
            "a number > 1 (TRL recommends > 1 + epsilon_high), or null for no two-sided clip",
        )
    if cfg.epsilon_high is not None:
        require(
            math.isfinite(cfg.epsilon_high) and cfg.epsilon_high > 0,
            "epsilon_high",
            "a number > 0, or null for epsilon_high = epsilon",
        )
    require(cfg.max_completion_length >= 1, "max_completion_length", "an integer ≥ 1")
    require(cfg.temperature > 0, "temperature", "a number > 0")
    require(0 < cfg.top_p <= 1, "top_p", "a number in (0, 1] (1 = off)")
    require(cfg.top_k >= 0, "top_k", "an integer ≥ 0 (0 = off)")
    require(cfg.baseline_prompts >= 1, "baseline_prompts", "an integer ≥ 1")
    # any stl_window ≥ 1 trains: a run shorter than 2 windows records why it has no steps_to_learn
    require(cfg.stl_window >= 1, "stl_window", "an integer ≥ 1")
    require(cfg.stl_delta >= 0, "stl_delta", "a number ≥ 0")
    require(cfg.loss_departure_eps > 0, "loss_departure_eps", "a number > 0")
    require(cfg.eval_every >= 0, "eval_every", "an integer ≥ 0 (0 = eval off)")
    require(cfg.eval_prompts >= 1, "eval_prompts", "an integer ≥ 1")
    require(cfg.num_threads >= 0, "num_threads", "an integer ≥ 0 (0 = torch's default)")
    require(seed_in_range(cfg.seed), "seed", f"an integer in {SEED_RANGE}")
    if cfg.device == "cuda" or cfg.mixed_precision in ("bf16", "fp16") or cfg.decode == "graph":
        import torch

        has_cuda = torch.cuda.is_available()
        require(cfg.device != "cuda" or has_cuda, "device", "auto or cpu: no CUDA GPU is visible to torch here")
        on_gpu = has_cuda and cfg.device != "cpu"
        require(
            cfg.mixed_precision != "fp16" or on_gpu,
            "mixed_precision",
            "auto, no or bf16 on a CPU (fp16 autocast and loss scaling need a CUDA GPU)",
        )
        require(cfg.decode != "graph" or on_gpu, "decode", "auto, dynamic or static on a CPU (graph needs CUDA)")
    require(
        cfg.mlflow_tracking_uri.startswith(TRACKING_SCHEMES),
        "mlflow_tracking_uri",
        f"a store URI starting with {', '.join(TRACKING_SCHEMES)}",
    )
    require(bool(cfg.mlflow_experiment.strip()), "mlflow_experiment", "a non-empty name")
    require(cfg.save_steps >= 0, "save_steps", "an integer ≥ 0 (0 = no checkpoints)")
    require(
        cfg.tiny_pretrain_steps is None or cfg.tiny_pretrain_steps >= 0,
        "tiny_pretrain_steps",
        "an integer ≥ 0, or null for the task's value",
    )
    if cfg.resume_from_checkpoint is not None:
        check_checkpoint_folder(cfg.resume_from_checkpoint)
    check_model_name(cfg.model)
    if (
        cfg.model != "tiny"
        and cfg.gguf_file is None
        and Path(cfg.model).expanduser().is_dir()
        and not (Path(cfg.model).expanduser() / "config.json").is_file()
    ):
        raise ConfigError(
            "model",
            f"{cfg.model!r} holds no config.json; allowed: a transformers model folder "
            f"(config.json, weights, tokenizer), or gguf_file naming a GGUF file in it",
        )
    if cfg.tiny_pretrain_steps is None:  # the value used is the value logged
        cfg = dataclasses.replace(cfg, tiny_pretrain_steps=TASKS[cfg.task].tiny_pretrain_steps)
    return cfg


def check_inputs(cfg: GRPOConfig) -> None:
    """What validate does not read: the dataset loads and has both columns, every reward function
    imports, a checkpoint was written by a run with this config. One-line ConfigError otherwise.
    `grpo train` calls it before anything is written; a sweep once per distinct input."""
    from grpo_core.tasks.rewards import check_reward_names

    from grpo_core.tasks.catalog import get_task, load_dataset_rows, reward_funcs_of
    from grpo_core.tasks.rewards import check_answers

    if cfg.dataset is not None:
        rows = load_dataset_rows(cfg.dataset, cfg.prompt_column, cfg.answer_column)
        answers, source = [r[cfg.answer_column] for r in rows], repr(cfg.dataset)
    else:
        answers, source = [a for _, a in get_task(cfg.task).examples()], f"the task {cfg.task!r}"
    check_reward_names(cfg.reward_funcs)
    check_answers(reward_funcs_of(cfg), answers, source)  # each built-in reward can score every answer
    if cfg.resume_from_checkpoint is not None:
        check_checkpoint(cfg)
    from grpo_core.tasks.models import check_model_config

    check_model_config(cfg)  # a causal LM, and a LoRA rank within its size
    if cfg.model == "tiny":  # a base pretrained here needs a cache it can write
        from grpo_core.util.files import check_writable_folder
        from grpo_core.tasks.models import committed_base, tiny_cache_dir

        steps = cfg.tiny_pretrain_steps
        if (
            committed_base(cfg.task, steps) is None
            and not (tiny_cache_dir(cfg.cache_dir, cfg.task, steps) / "config.json").is_file()
        ):
            try:
                check_writable_folder(cfg.cache_dir, "cache_dir")
            except UserInputError as exc:
                raise ConfigError(
                    "cache_dir", f"{str(exc).split(': ', 1)[1]} (needed to pretrain tiny_pretrain_steps={steps})"
                ) from None
