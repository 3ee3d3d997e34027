"""The baseline reward: the untrained policy's reward where the training reward is measured, the
threshold steps_to_learn is measured against (README: Metrics). Measured once per run before
its first step (`GRPOTrainer.baseline_reward`), and cached per setting for built-in tasks."""

from __future__ import annotations

import hashlib
import json
import math
import random
from pathlib import Path
from typing import Optional

import torch

from grpo_core.util.files import write_text_atomic

BASELINE_SEED = 12_345  # baseline sampling uses one fixed stream, so every seed shares the threshold
MAX_FACTOR = 16  # the baseline uses at most 16 × baseline_prompts prompts
VERSION = 1  # bump when the baseline's procedure changes, so cached baselines are recomputed


def baseline_reward(trainer) -> dict:
    """The untrained policy's reward where the training reward is measured: train prompts
    drawn as training draws them, num_generations samples each, the training sampler. One
    fixed stream (independent of the run's seed), so every seed of every variant shares the
    threshold. Starts with baseline_prompts prompts and adds the number the standard error
    over prompts says is missing, until it is ≤ stl_delta / 4 (at most 16 × baseline_prompts).
    Returns the mean, its standard error and the prompt count. Built-in tasks and rewards on
    a local model: computed once per setting and kept in cache_dir/baselines/."""
    cache = cache_path(trainer)
    if cache is not None and cache.is_file():
        return json.loads(cache.read_text())
    cfg = trainer.cfg
    prompt_rng = random.Random(BASELINE_SEED)
    generator = torch.Generator(device=trainer.device).manual_seed(BASELINE_SEED)
    target = cfg.stl_delta / 4
    per_prompt: list = []
    want, cap = cfg.baseline_prompts, MAX_FACTOR * cfg.baseline_prompts
    while True:
        idx = [prompt_rng.randrange(len(trainer.train_set)) for _ in range(want - len(per_prompt))]
        per_prompt += trainer._mean_rewards(trainer.train_set[idx], cfg.num_generations, False, generator)
        n = len(per_prompt)
        mean = sum(per_prompt) / n
        sd = math.sqrt(sum((x - mean) ** 2 for x in per_prompt) / (n - 1)) if n > 1 else math.inf
        se = sd / math.sqrt(n)
        if se <= target or n >= cap:
            break
        # the count the standard error asks for, with a 10% margin (one prompt has no spread: two)
        # (stl_delta 0 asks for a standard error of 0: the cap)
        want = (
            cap
            if target <= 0
            else min(cap, max(n + 1, math.ceil(1.1 * (sd / target) ** 2) if math.isfinite(sd) else 2))
        )
    result = {"baseline_reward": mean, "baseline_reward_se": se, "baseline_prompts_used": n}
    if cache is not None:
        try:
            cache.parent.mkdir(parents=True, exist_ok=True)
            write_text_atomic(cache, json.dumps(result))
        except OSError:  # an unwritable cache_dir: the next run measures it again
            pass
    return result


def cache_path(trainer) -> Optional[Path]:
    """Where this setting's baseline is kept, or None when it is not cached: your own reward code,
    or a hub dataset, can change without the config changing. A local data file is keyed by its
    content (sha256), so an edited file gets a baseline of its own."""
    cfg = trainer.cfg
    if not trainer.record["base_model_sha256"] or any(":" in n for n in cfg.reward_funcs):
        return None
    data = _data_file_digest(cfg.dataset) if cfg.dataset else None
    if cfg.dataset and data is None:
        return None
    key = {
        "version": VERSION,
        "base": trainer.record["base_model_sha256"],
        "task": cfg.task,
        "rewards": sorted(trainer.reward_funcs),
        "device": trainer.device.type,
        "precision": trainer.accelerator.mixed_precision,
        **{
            k: getattr(cfg, k)
            for k in (
                "num_generations",
                "max_completion_length",
                "temperature",
                "top_p",
                "top_k",
                "baseline_prompts",
                "stl_delta",
                "dtype",
            )
        },
    }
    if data is not None:  # (only for data files: the built-in tasks' cached baselines stay valid)
        key.update(data=data, prompt_column=cfg.prompt_column, answer_column=cfg.answer_column)
    if cfg.prompt_template:  # (likewise)
        key["prompt_template"] = cfg.prompt_template
    if cfg.reward_weights:  # (only when set: the baselines cached before the key existed stay valid)
        key["reward_weights"] = [[n, w] for n, w in zip(trainer.reward_funcs, cfg.reward_weights)]
    digest = hashlib.sha256(json.dumps(key, sort_keys=True).encode()).hexdigest()[:20]
    return Path(cfg.cache_dir) / "baselines" / f"{'dataset' if data else cfg.task}-{digest}.json"


def _data_file_digest(source: str) -> Optional[str]:
    """sha256 of a local data file's bytes, or None for anything else (a hub dataset id)."""
    from grpo_core.tasks.catalog import DATASET_SUFFIXES

    path = Path(source).expanduser()
    if path.suffix not in DATASET_SUFFIXES or not path.is_file():
        return None
    return hashlib.sha256(path.read_bytes()).hexdigest()
