"""The GRPO training loop: sample G completions per prompt, score, compute advantages, and take
optimizer steps on them. The math lives in advantages.py and loss.py; this file only moves
tensors, calls it, and gathers metrics.

One optimizer step = one slice of prompts_per_step whole groups, in `gradient_accumulation_steps`
micro-batches. A generation batch holds k = steps_per_generation ÷ gradient_accumulation_steps
slices (k = 1 by default: the step's own batch); it is sampled every k × num_iterations (μ) steps
and its slices are passed over μ times.

Why one file over the 500 lines every other module keeps to: it is the one place where a step's
order is read top to bottom (sample, score, advantages, micro-batches, optimizer step, metrics),
as TRL's and verl's trainers are read. Its parts that stand alone already live elsewhere: the
math (algo/), sampling and log-probs (sampling/), checkpoints and metrics (record/), rewards
(tasks/). What is left shares the trainer's state on every line; split further, a reader would
follow one step across files.
"""

from __future__ import annotations

import contextlib
import copy
import dataclasses
import functools
import math
import random
import time
import warnings
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Optional

import numpy as np
import torch

from grpo_core.algo.advantages import AdvantageSettings, compute_advantages, normalize_rewards, signal_groups
from grpo_core.tasks.baseline import baseline_reward
from grpo_core.sampling.batch import GenerationBatch
from grpo_core.record.checkpoint import load_checkpoint, save_checkpoint
from grpo_core.config.schema import GRPOConfig
from grpo_core.config.validation import batch_split_problem
from grpo_core.util.cpu_math import check_process
from grpo_core.util.distributed import note_peers
from grpo_core.util.errors import ConfigError, RunFailure
from grpo_core.util.memory import grad_step_bytes, memory_gate, peak_resident_mib, reset_peak_resident
from grpo_core.sampling.generation import completion_logps, grad_forward_size, reference_logps, sample_completions
from grpo_core.algo.loss_masks import MaskInputs, loss_rows
from grpo_core.algo.loss import KL_ESTIMATORS, LossSettings, entropy_threshold, grpo_loss
from grpo_core.tasks.models import load_model_and_tokenizer, resolve_model_path, weights_sha256
from grpo_core.record.provenance import run_record
from grpo_core.tasks.reward_pool import make_pool
from grpo_core.tasks.rewards import (REWARD_AGGREGATIONS, RewardFunc, combine_rewards, compute_rewards, overlong_penalty, resolve_reward,
                      reward_names)
from grpo_core.record.run_metrics import completion_counts, summarize
from grpo_core.algo.schedule import make_scheduler
from grpo_core.tasks.catalog import dataset_task, get_task, reward_funcs_of

_NOISE_SEED_OFFSET = 1_000_003  # the advantage-noise generator's seed = seed + this
_RANK_SEED_OFFSET = 7_919_993  # process r > 0 of a data-parallel run samples with seed + r × this
_LONGEST_PROMPT: dict[tuple, int] = {}  # (model folder, task or dataset, prompt column) -> tokens


@dataclass
class _Round:
    """One round of sampling on this process; per_func and timeouts, once collected, are the
    whole round's (every process's rows, in process order)."""
    prompts: list[str]  # this process's prompts, one per group
    prompt_ids: torch.Tensor  # (B / P, P)
    prompt_mask: torch.Tensor
    completion_ids: torch.Tensor  # (B / P, T)
    completion_mask: torch.Tensor
    pending: Optional[Callable]  # waits for this process's rewards
    per_func: Optional[dict] = None
    timeouts: int = 0
    overlong: Optional[torch.Tensor] = None  # (B,) DAPO's overlong penalty, once trained_rewards computed it

    def collect(self, trainer: "GRPOTrainer") -> tuple[dict[str, list[float]], int]:
        if self.per_func is None:
            per_func, timeouts = self.pending()
            if trainer.num_processes > 1:
                per_func, timeouts = trainer._gather_rewards(per_func, timeouts)
            self.per_func, self.timeouts = per_func, timeouts
        return self.per_func, self.timeouts

    def rewards(self, weights: list[float]) -> torch.Tensor:  # (B,) the whole round's: Σ weight × reward
        return torch.tensor(combine_rewards(self.per_func, weights), dtype=torch.float32)

    def trained_rewards(self, trainer: "GRPOTrainer") -> torch.Tensor:  # (B,) what the advantages start from
        """The aggregated reward (multi_objective_aggregation), plus DAPO's overlong penalty when on
        (every process calls this at the same point: the lengths are gathered)."""
        cfg = trainer.cfg
        trained = REWARD_AGGREGATIONS.get(cfg.multi_objective_aggregation)(self.per_func, cfg.reward_weights,
                                                                           cfg.num_generations)
        if cfg.overlong_buffer_len:
            lengths = trainer._gather(self.completion_mask.sum(dim=1)).tolist()
            self.overlong = torch.tensor(overlong_penalty(lengths, cfg.max_completion_length, cfg.overlong_buffer_len,
                                                          cfg.overlong_penalty_factor), dtype=torch.float32)  # (B,)
            trained = trained + self.overlong
        return trained


def _pad_right(t: torch.Tensor, width: int, value: int) -> torch.Tensor:  # (n, T) -> (n, width)
    return torch.nn.functional.pad(t, (0, width - t.shape[1]), value=value)


def _weights_dtype(cfg: GRPOConfig, use_cuda: bool) -> torch.dtype:
    if cfg.dtype == "auto":
        return torch.bfloat16 if use_cuda and cfg.model != "tiny" else torch.float32
    return getattr(torch, cfg.dtype)


def _with_lora(model, cfg: GRPOConfig):
    """LoRA adapters on the named modules (default: every linear layer but the lm head)."""
    from peft import LoraConfig, get_peft_model

    targets = list(cfg.lora_target_modules) or "all-linear"
    lora = LoraConfig(r=cfg.lora_r, lora_alpha=cfg.lora_alpha, lora_dropout=cfg.lora_dropout,
                      target_modules=targets, task_type="CAUSAL_LM")
    try:
        with warnings.catch_warnings():
            # peft (≤ 0.21) reads transformers' deprecated `is_gradient_checkpointing` property inside
            # get_peft_model; nothing of ours calls it. Only that one warning is silenced, only here.
            warnings.filterwarnings("ignore", message="`is_gradient_checkpointing` is deprecated", category=FutureWarning)
            return get_peft_model(model, lora)
    except ValueError as exc:  # target modules that match nothing
        names = sorted({n.rsplit(".", 1)[-1] for n, m in model.named_modules() if isinstance(m, torch.nn.Linear)})
        raise ConfigError("lora_target_modules", f"{str(exc).splitlines()[0]}; allowed: linear module names of "
                                                 f"this model: {', '.join(names)}") from None


def _has_dropout(model) -> bool:
    config = getattr(model, "config", None)
    if any(float(getattr(config, name, 0.0) or 0.0) > 0 for name in ("attention_dropout", "hidden_dropout",
                                                                         "dropout", "resid_pdrop", "embd_pdrop")):
        return True
    return any(isinstance(m, torch.nn.Dropout) and m.p > 0 for m in model.modules())


def seed_everything(seed: int) -> None:
    random.seed(seed)
    np.random.seed(seed)
    torch.manual_seed(seed)


def _mixed_precision(cfg: GRPOConfig, use_cuda: bool) -> str:
    if cfg.mixed_precision != "auto":
        return cfg.mixed_precision
    return "bf16" if use_cuda and torch.cuda.is_bf16_supported() else "no"


class GRPOTrainer:
    def __init__(self, cfg: GRPOConfig, reward_funcs: Optional[dict[str, RewardFunc]] = None):
        from accelerate import Accelerator

        self.cfg = cfg
        check_process(cfg.cpu_math)  # the CPU math this process computes with is the configured one
        if cfg.num_threads:
            torch.set_num_threads(cfg.num_threads)
        use_cuda = cfg.device == "cuda" or (cfg.device == "auto" and torch.cuda.is_available())
        self.accelerator = Accelerator(cpu=not use_cuda, mixed_precision=_mixed_precision(cfg, use_cuda))
        self.device = self.accelerator.device
        # data parallel (distributed.py): this process samples its share of each step's prompts
        self.num_processes, self.rank = self.accelerator.num_processes, self.accelerator.process_index
        note_peers()  # which process died, should one die
        if (problem := batch_split_problem(cfg, self.num_processes)) is not None:
            raise problem
        self.local_prompts = cfg.prompts_per_step // self.num_processes
        self.local_batch = self.local_prompts * cfg.num_generations  # completions this process trains per step
        self.gen_prompts = self.local_prompts * cfg.steps_per_batch  # prompts this process samples per generation
        self.gen_batch = self.gen_prompts * cfg.num_generations  # completions this process samples per generation
        seed_everything(cfg.seed)

        self.task = (dataset_task(cfg.dataset, cfg.prompt_column, cfg.answer_column) if cfg.dataset
                     else get_task(cfg.task))
        self.train_set, self.eval_set = self.task.splits()
        names = reward_funcs_of(cfg)
        self.reward_funcs = reward_funcs or {key: resolve_reward(n) for key, n in zip(reward_names(names), names)}
        self.reward_pool = make_pool(self.reward_funcs, cfg.reward_workers, cfg.reward_timeout, cfg.reward_timeout_value)

        path = resolve_model_path(cfg.model, cfg.cache_dir, cfg.task, cfg.tiny_pretrain_steps)
        model, self.tokenizer = load_model_and_tokenizer(path, _weights_dtype(cfg, use_cuda), cfg.gguf_file)
        self._check_positions(model, path)
        self.ref_model = None
        if cfg.use_peft:  # the reference is this network with its adapters disabled (no copy)
            model = _with_lora(model, cfg)
        elif cfg.beta > 0:  # a frozen copy only when the KL term is on
            self.ref_model = copy.deepcopy(model).to(self.device).eval().requires_grad_(False)
        optimizer = torch.optim.AdamW(
            [p for p in model.parameters() if p.requires_grad], lr=cfg.learning_rate, betas=(cfg.adam_beta1, cfg.adam_beta2),
            eps=cfg.adam_epsilon, weight_decay=cfg.weight_decay, fused=True,  # one kernel for all tensors
        )
        # one code path for one process or several, fp32, bf16 or fp16: accelerate's (DDP on P
        # processes, the fp16 loss scaler)
        self.model, self.optimizer = self.accelerator.prepare(model, optimizer)
        self.policy = self.accelerator.unwrap_model(self.model)  # the bare module, for sampling
        # where the run ran, on how many processes and on which base weights ('' sha256 for a hub id)
        self.record = {**run_record(str(self.device), weights_sha256(path)), "num_processes": self.num_processes}
        self._has_dropout = _has_dropout(self.policy)
        self.scheduler = make_scheduler(self.optimizer, cfg.effective_warmup_steps, cfg.max_steps,
                                        cfg.lr_scheduler_type)
        self.prompt_rng = random.Random(cfg.seed)
        self.sample_gen = torch.Generator(device=self.device).manual_seed(cfg.seed + self.rank * _RANK_SEED_OFFSET)
        self.noise_gen = torch.Generator().manual_seed(cfg.seed + _NOISE_SEED_OFFSET)
        self.decoder, self.eos_check_every = self._make_decoder(use_cuda)
        self.eos_id = self.tokenizer.eos_token_id
        self.pad_id = self.tokenizer.pad_token_id
        self.loss_settings = LossSettings.from_config(cfg)  # what the loss reads, built once
        self.advantage_settings = AdvantageSettings.from_config(cfg)  # what the advantages read
        self.step = 0
        self._batch: Optional[GenerationBatch] = None  # its slices feed k × μ steps
        self.last_completions: list[dict] = []  # completions.jsonl rows of the last step (log_completions)

    def _make_decoder(self, use_cuda: bool):
        """The sampler's cache (config `decode`) and how often it looks for the end of every row."""
        from grpo_core.sampling.static_decode import AdapterWeights, StaticDecoder, supports

        mode = self.cfg.decode if self.cfg.decode != "auto" else ("graph" if use_cuda else "dynamic")
        check_every = self.cfg.eos_check_every or (8 if mode == "graph" else 1)
        core = self.policy.get_base_model() if self.cfg.use_peft else self.policy
        if mode == "dynamic" or not supports(core):
            return None, check_every
        adapters = AdapterWeights(self.policy) if self.cfg.use_peft else None  # decode at the base model's cost
        return StaticDecoder(self.policy, use_graph=mode == "graph", adapters=adapters), check_every

    def _check_positions(self, model, path: str) -> None:
        """The longest prompt plus max_completion_length must fit the model's positions."""
        limit = getattr(model.config, "max_position_embeddings", None)
        if not limit:
            return
        key = (path, self.cfg.dataset or self.cfg.task, self.cfg.prompt_column, self.cfg.prompt_template)
        if key not in _LONGEST_PROMPT:  # tokenizing every prompt: once per process (a sweep worker runs many)
            prompts = [*self.train_set[:]["prompt"], *self.eval_set[:]["prompt"]]  # columns read whole
            _LONGEST_PROMPT[key] = max(len(ids) for ids in self.tokenizer([self._format(p) for p in prompts],
                                                                          add_special_tokens=False).input_ids)
        longest = _LONGEST_PROMPT[key]
        if longest >= limit:  # no max_completion_length can help: the prompts themselves are too long
            raise ConfigError("dataset" if self.cfg.dataset else "task",
                              f"the longest prompt has {longest} tokens, and the model has {limit} positions; "
                              f"allowed: prompts shorter than {limit} tokens, with room for the completion")
        if longest + self.cfg.max_completion_length > limit:
            raise ConfigError("max_completion_length", f"{self.cfg.max_completion_length} + the longest prompt "
                                                       f"({longest} tokens) exceeds the model's {limit} positions; "
                                                       f"allowed: ≤ {limit - longest}")

    def _autocast(self):
        if self.accelerator.mixed_precision == "no":
            return contextlib.nullcontext()
        return self.accelerator.autocast()

    def _set_training(self, training: bool) -> None:
        """Train mode for the loss forward, eval mode for sampling; a no-op (not a walk over
        every module, each step) when the model has no dropout, where the modes compute the same."""
        if self._has_dropout and self.model.training != training:
            self.model.train(training)

    # ---- prompts and sampling -----------------------------------------------------------
    def _format(self, prompt: str) -> str:
        """The prompt as the model reads it: in `prompt_template` where one is set, then through its
        chat template where it has one; else as
        plain text, led by the BOS token where the tokenizer itself puts one before every text
        (Gemma 3's base model: without it the model writes markup from the first token; the tiny
        model's and SmolLM2's tokenizers put none, so their prompts are unchanged)."""
        if self.cfg.prompt_template:
            prompt = self.cfg.prompt_template.replace("{prompt}", prompt)
        if getattr(self.tokenizer, "chat_template", None):
            return self.tokenizer.apply_chat_template(
                [{"role": "user", "content": prompt}], tokenize=False, add_generation_prompt=True)
        return self._leading_bos + prompt

    @functools.cached_property
    def _leading_bos(self) -> str:
        """The BOS token's text where tokenizing a text with the tokenizer's special tokens adds
        exactly a leading BOS (and nothing else), else ''."""
        tok, probe = self.tokenizer, "1 + 1 ="
        bos = tok.bos_token_id
        plain = tok(probe, add_special_tokens=False).input_ids
        return tok.bos_token if bos is not None and tok(probe).input_ids == [bos, *plain] else ""

    def _encode(self, prompts: list[str], repeat: int = 1) -> tuple[torch.Tensor, torch.Tensor]:
        """Token ids and mask (B·repeat, P): each prompt tokenized once, its row repeated."""
        enc = self.tokenizer([self._format(p) for p in prompts], return_tensors="pt", padding=True,
                             add_special_tokens=False)
        ids, mask = enc.input_ids, enc.attention_mask
        if repeat > 1:
            ids, mask = ids.repeat_interleave(repeat, dim=0), mask.repeat_interleave(repeat, dim=0)
        return ids.to(self.device), mask.to(self.device)

    def _sample(self, prompt_ids, prompt_mask, generator, greedy=False, group_size=1):
        cfg = self.cfg
        self._set_training(False)
        with self._autocast():
            return sample_completions(
                self.policy, prompt_ids, prompt_mask,
                max_new_tokens=cfg.max_completion_length, eos_token_id=self.eos_id, pad_token_id=self.pad_id,
                temperature=cfg.temperature, top_p=cfg.top_p, top_k=cfg.top_k, generator=generator, greedy=greedy,
                group_size=group_size, decoder=self.decoder, check_every=self.eos_check_every,
            )

    def _decode(self, completion_ids: torch.Tensor) -> list[str]:
        return self.tokenizer.batch_decode(completion_ids.tolist(), skip_special_tokens=True)

    def _score_async(self, rows: dict[str, list], completions: list[str]):
        """Start scoring; returns a function that waits for ({name: values}, timeouts). In the
        training process the work happens now; with reward_workers it runs in the pool meanwhile."""
        columns = {**rows, "prompts": rows["prompt"]}
        if self.reward_pool is None:
            done = compute_rewards(self.reward_funcs, completions, columns), 0
            return lambda: done
        job = self.reward_pool.submit(completions, columns)
        return lambda: self.reward_pool.collect(job)

    def _score(self, rows: dict[str, list], completions: list[str]) -> dict[str, list[float]]:
        return self._score_async(rows, completions)()[0]

    def close(self) -> None:
        """Stop the reward worker processes (if any)."""
        if self.reward_pool is not None:
            self.reward_pool.close()
            self.reward_pool = None

    def _mean_rewards(self, rows: dict[str, list], repeat: int, greedy: bool, generator) -> list[float]:
        """Each row's prompt sampled `repeat` times (or once greedily); its mean reward (the weighted sum over functions)."""
        expanded = {k: [v for v in vals for _ in range(repeat)] for k, vals in rows.items()}
        per_completion: list[float] = []
        chunk = max(repeat, 256 // repeat * repeat)  # whole groups per sampling call
        for start in range(0, len(expanded["prompt"]), chunk):
            part = {k: v[start:start + chunk] for k, v in expanded.items()}
            ids, mask = self._encode(part["prompt"])
            completion_ids, _ = self._sample(ids, mask, generator, greedy=greedy, group_size=repeat)
            rewards = self._score(part, self._decode(completion_ids))
            per_completion += combine_rewards(rewards, self.cfg.reward_weights)
        return [sum(per_completion[i:i + repeat]) / repeat for i in range(0, len(per_completion), repeat)]

    def baseline_reward(self) -> dict:
        """The untrained policy's reward, the threshold of steps_to_learn (grpo_core/tasks/baseline.py)."""
        return baseline_reward(self)

    def eval_accuracy(self) -> float:
        """Greedy reward (exact match: accuracy) on the first eval_prompts held-out prompts."""
        rows = self.eval_set[:self.cfg.eval_prompts]
        per_prompt = self._mean_rewards(rows, 1, True, torch.Generator(device=self.device).manual_seed(0))
        return sum(per_prompt) / len(per_prompt)

    def generate_batch(self) -> GenerationBatch:
        """Sample, score and compute advantages for the next generation batch (at self.step + 1)."""
        cfg, G = self.cfg, self.cfg.num_generations
        drawn = self._sample_round()
        resampled = cfg.zero_variance_groups == "resample"
        if resampled:  # the rewards decide what to keep: collect them first
            drawn.collect(self)
            batch, sampled = self._resample(drawn)
        else:
            batch, sampled = drawn, float(cfg.prompts_per_step)
        prompt_ids, prompt_mask = batch.prompt_ids, batch.prompt_mask
        completion_ids, completion_mask = batch.completion_ids, batch.completion_mask
        # rewards are computed (in the worker pool, if any) while the log-prob forwards run
        sampling_logps, ref_logps = self._old_and_ref_logps(prompt_ids, prompt_mask, completion_ids, completion_mask)
        old_logps = sampling_logps if cfg.reuse_steps > 1 else None  # one step: the loss's old is logp.detach()
        per_func, timeouts = batch.collect(self)  # resampled: the timeouts of every round
        rewards = batch.rewards(cfg.reward_weights)  # (B,) the policy's reward, logged
        trained = batch.trained_rewards(self)  # (B,) what the advantages start from (aggregation, overlong penalty)
        trained_per_func = per_func
        if cfg.kl_in_reward:  # β · Σ_t KL_t per completion leaves the reward instead of entering the loss
            kl = KL_ESTIMATORS.get(cfg.kl_estimator)(sampling_logps, ref_logps)  # (B / P, T)
            kl_per_seq = self._gather((kl * completion_mask).sum(dim=1).float()).to(trained.device)  # (B,)
            trained = trained - cfg.beta * kl_per_seq

        # over the whole batch on every process (same noise stream everywhere), then this process's share
        advantages, metrics = compute_advantages(trained, self.advantage_settings, self.step + 1, self.noise_gen,
                                                 reward=rewards)
        if resampled:  # the policy's reward is the first round's (every prompt as drawn), not the kept groups'
            metrics["reward_trained"] = metrics["reward"]
            metrics.update(normalize_rewards(drawn.rewards(cfg.reward_weights), G, cfg.scale_rewards,
                                             cfg.advantage_estimator)[1])
            per_func = drawn.per_func
        for name, values in per_func.items():
            metrics[f"rewards/{name}"] = sum(values) / len(values)
        if cfg.reward_timeout:
            metrics["rewards/timeouts"] = float(timeouts)
        if cfg.kl_in_reward:
            metrics["kl_in_reward"] = kl_per_seq.mean()  # the mean per-completion KL sum the reward lost (× β)
        if cfg.overlong_buffer_len:  # the shaping the advantages saw; the logged reward is the task's
            metrics["rewards/overlong_penalty"] = batch.overlong.mean()
        lengths = self._gather(completion_mask.sum(dim=1)).float()
        ended_here = (completion_ids == self.eos_id).any(dim=1)  # (B / P,)
        ended = self._gather(ended_here.to(torch.uint8)).bool()
        metrics["completions/mean_length"] = lengths.mean()
        metrics["completions/clipped_ratio"] = (~ended).float().mean()

        # which rows enter the loss: the mask stages in their declared order (grpo_core/algo/loss_masks.py)
        in_loss, counted, mask_metrics = loss_rows(cfg, MaskInputs(trained, ended.cpu(), sampled))
        metrics.update(mask_metrics)
        mine_rows = slice(self.rank * self.gen_batch, (self.rank + 1) * self.gen_batch)
        loss_mask, live = completion_mask, None  # what the loss sees of this process's rows
        if in_loss is not None:
            loss_mask = loss_mask * in_loss[mine_rows].to(loss_mask.device).unsqueeze(1).to(loss_mask.dtype)
        if counted is not None:  # per step's slice, the sequences left in the normalizer; DDP averages: ÷ P
            live = [float(part.sum()) / self.num_processes for part in self._slices(counted, self.local_batch)]
        metrics = host_floats(metrics)  # the batch's tensor metrics to the host at once (one sync per device)
        mine = advantages[mine_rows]  # (k · B / P,)
        records = (self._completion_records(batch, trained_per_func, rewards, advantages, ended_here)
                   if cfg.log_completions else [])
        return GenerationBatch(prompt_ids, prompt_mask, completion_ids, completion_mask, mine.to(self.device),
                               old_logps, ref_logps, metrics, loss_mask, live, records)

    def _completion_records(self, batch: "_Round", per_func: dict[str, list[float]], rewards: torch.Tensor,
                            advantages: torch.Tensor, ended: torch.Tensor) -> list[dict]:
        """completions.jsonl's rows of this step: log_completions_per_step of this process's rows,
        spread evenly (0 = all), each with its prompt, text, rewards, advantage, length and whether it
        was cut at max_completion_length. Reads what the step computed; draws nothing."""
        n, rows_here, G = self.cfg.log_completions_per_step, batch.completion_ids.shape[0], self.cfg.num_generations
        rows = list(range(rows_here)) if n == 0 or n >= rows_here else [i * rows_here // n for i in range(n)]
        first = self.rank * self.gen_batch  # this process's rows in the whole batch's rewards
        texts = self._decode(batch.completion_ids[rows])
        lengths = batch.completion_mask[rows].sum(dim=1).tolist()
        return [{"step": self.step + 1, "prompt": batch.prompts[i // G], "completion": text,
                 "reward": float(rewards[first + i]),
                 **{f"rewards/{name}": float(values[first + i]) for name, values in per_func.items()},
                 "advantage": float(advantages[first + i]), "length": int(length), "truncated": not bool(ended[i])}
                for i, text, length in zip(rows, texts, lengths)]

    def _sample_round(self) -> "_Round":
        """This process's share of the generation batch's k × prompts_per_step prompts, drawn from the
        one prompt stream, with G completions each, their scoring started."""
        cfg, G = self.cfg, self.cfg.num_generations
        # every process draws the batch's prompts (one stream) and keeps its share of whole groups
        idx = [self.prompt_rng.randrange(len(self.train_set)) for _ in range(cfg.prompts_per_step * cfg.steps_per_batch)]
        unique = self.train_set[idx[self.rank * self.gen_prompts:(self.rank + 1) * self.gen_prompts]]
        rows = {k: [v for v in vals for _ in range(G)] for k, vals in unique.items()}  # groups contiguous
        prompt_ids, prompt_mask = self._encode(unique["prompt"], repeat=G)  # (B, P)
        completion_ids, completion_mask = self._sample(prompt_ids, prompt_mask, self.sample_gen, group_size=G)
        pending = self._score_async(rows, self._decode(completion_ids))
        return _Round(unique["prompt"], prompt_ids, prompt_mask, completion_ids, completion_mask, pending)

    def _old_and_ref_logps(self, prompt_ids, prompt_mask, completion_ids, completion_mask):
        cfg = self.cfg
        old_logps = ref_logps = None
        if cfg.reuse_steps > 1 or cfg.beta > 0:
            with self._autocast():
                if cfg.reuse_steps > 1 or cfg.kl_in_reward:  # the sampling policy's log-probs
                    old_logps = self._micro_batched_logps(self.model, prompt_ids, prompt_mask,
                                                          completion_ids, completion_mask)
                if cfg.beta > 0:  # LoRA: the reference is this network with its adapters off
                    ref_model, adapters_off = ((self.model, self.policy.disable_adapter()) if cfg.use_peft
                                               else (self.ref_model, contextlib.nullcontext()))
                    with adapters_off:
                        ref_logps = self._micro_batched_logps(ref_model, prompt_ids, prompt_mask,
                                                              completion_ids, completion_mask)
        return old_logps, ref_logps

    def _resample(self, first: "_Round") -> tuple["_Round", float]:
        """[Claim C6] DAPO's dynamic sampling: more rounds of the generation batch's prompts until every
        process holds its share of groups whose rewards differ, at most max_num_gen_batches rounds.
        Each process keeps its first groups with signal, in draw order, filled with its first
        zero-std groups where short (the loss drops those). Every process has every round's
        rewards, so each computes every process's choice, and the batch's rewards, on its own.
        Returns the batch and the number of groups sampled."""
        cfg, G, n = self.cfg, self.cfg.num_generations, self.gen_prompts
        rounds = [first]
        signals = [signal_groups(first.trained_rewards(self), G).tolist()]  # per round: (all groups,)

        def picks(p: int) -> tuple[list[tuple[int, int]], int]:  # process p's (round, group), its signal count
            with_signal = [(r, g) for r, s in enumerate(signals) for g in range(p * n, (p + 1) * n) if s[g]]
            without = [(r, g) for r, s in enumerate(signals) for g in range(p * n, (p + 1) * n) if not s[g]]
            return (with_signal + without)[:n], len(with_signal)

        while len(rounds) < cfg.max_num_gen_batches and any(picks(p)[1] < n for p in range(self.num_processes)):
            drawn = self._sample_round()
            drawn.collect(self)
            rounds.append(drawn)
            signals.append(signal_groups(drawn.trained_rewards(self), G).tolist())
        chosen = [picks(p)[0] for p in range(self.num_processes)]
        mine = [(r, g - self.rank * n) for r, g in chosen[self.rank]]
        width = max(rounds[r].completion_ids.shape[1] for r, _ in mine)  # pad to the longest kept completion
        block = lambda t, g: t[g * G:(g + 1) * G]  # noqa: E731  a group's rows of this process's tensor
        completion_ids = torch.cat([_pad_right(block(rounds[r].completion_ids, g), width, self.pad_id) for r, g in mine])
        completion_mask = torch.cat([_pad_right(block(rounds[r].completion_mask, g), width, 0) for r, g in mine])
        prompts = [rounds[r].prompts[g] for r, g in mine]
        prompt_ids, prompt_mask = self._encode(prompts, repeat=G)
        per_func = {name: [v for picked in chosen for r, g in picked
                           for v in rounds[r].per_func[name][g * G:(g + 1) * G]] for name in first.per_func}
        batch = _Round(prompts, prompt_ids, prompt_mask, completion_ids, completion_mask, None)
        batch.per_func, batch.timeouts = per_func, sum(r.timeouts for r in rounds)
        return batch, float(len(rounds) * cfg.prompts_per_step * cfg.steps_per_batch)

    def _step_rows(self, part: int) -> slice:
        """Optimizer step `part`'s rows (of k) in this process's generation batch."""
        return slice(part * self.local_batch, (part + 1) * self.local_batch)

    def _slices(self, values: torch.Tensor, width: int) -> list[torch.Tensor]:
        """(P · k · width,) in process order → the k optimizer steps' parts, each every process's
        `width` values of that step (k = 1: the whole)."""
        k = self.cfg.steps_per_batch
        if k == 1:
            return [values]
        per_process = values.reshape(self.num_processes, k, width)
        return [per_process[:, j].reshape(-1) for j in range(k)]

    def _gather(self, values: torch.Tensor) -> torch.Tensor:
        """(n, …) on each process → (P·n, …) in process order; itself on one process."""
        if self.num_processes == 1:
            return values
        return self.accelerator.gather(values.to(self.device)).to(values.device)

    def _gather_rewards(self, per_func: dict[str, list[float]], timeouts: int) -> tuple[dict[str, list[float]], int]:
        """Every process's rewards per function (float64, so the values are the ones computed) and
        the total timeout count, in one collective."""
        names = list(per_func)
        local = torch.tensor([[*row, float(timeouts)] for row in zip(*per_func.values())], dtype=torch.float64)
        table = self._gather(local)  # (B, F + 1)
        total_timeouts = int(table[::self.gen_batch, -1].sum().item())  # each process's count, once
        return {name: table[:, i].tolist() for i, name in enumerate(names)}, total_timeouts

    def _micro_batched_logps(self, model, prompt_ids, prompt_mask, completion_ids, completion_mask):
        size = self.local_batch // self.cfg.gradient_accumulation_steps
        return torch.cat([
            reference_logps(model, prompt_ids[s:s + size], prompt_mask[s:s + size],
                            completion_ids[s:s + size], completion_mask[s:s + size], self.cfg.temperature,
                            group_size=self._group_size(size))
            for s in range(0, prompt_ids.shape[0], size)
        ])

    def _group_size(self, micro_batch_size: int) -> int:
        """G when micro-batches hold whole groups, so each prompt's forward can be shared; else 1."""
        G = self.cfg.num_generations
        return G if micro_batch_size % G == 0 else 1

    def _memory_gate(self, batch: GenerationBatch, sl: slice, size: int):
        """The host's memory gate for this micro-batch's forward and backward on a CPU (util/memory.py):
        held, one such step at a time, where the estimate exceeds a sixth of the machine's memory. Not
        with data parallel: its processes meet in every backward, so one waiting for another's gate
        would never let it finish."""
        if self.device.type != "cpu" or self.num_processes > 1:
            return contextlib.nullcontext()
        positions, rows = grad_forward_size(self.model, batch.prompt_ids[sl], batch.prompt_mask[sl],
                                            batch.completion_mask[sl], self._group_size(size))
        model = getattr(self.model, "module", self.model)  # through a DDP wrapper
        return memory_gate(grad_step_bytes(model.config, positions, rows))

    def _entropy_threshold(self, entropy: torch.Tensor, loss_mask: torch.Tensor) -> torch.Tensor | float:
        """[top_entropy_quantile] The micro-batch's entropy threshold over every process's loss tokens
        (TRL gathers them too), so P processes mask as one would."""
        tokens = entropy.detach()[loss_mask.bool()].float()  # (N,)
        if self.num_processes > 1:  # entropies are ≥ 0: a negative pad marks the padding
            padded = self.accelerator.pad_across_processes(tokens, dim=0, pad_index=-1e9)
            tokens = self.accelerator.gather(padded)
            tokens = tokens[tokens != -1e9]
        return entropy_threshold(tokens, self.cfg.top_entropy_quantile) if tokens.numel() else float("inf")

    # ---- one optimizer step ----------------------------------------------------------------
    def optimize(self, batch: GenerationBatch, part: int = 0) -> dict:
        """One optimizer step on slice `part` (of k) of the generation batch."""
        cfg = self.cfg
        n_micro = cfg.gradient_accumulation_steps
        size = self.local_batch // n_micro
        # dapo's normalizer: completion tokens of the whole generation batch (÷ k: one step's share,
        # TRL's num_items_in_batch × gradient_accumulation_steps / steps_per_generation); on P
        # processes their sum over processes ÷ P, because DDP averages the P gradients
        total_tokens = batch.loss_mask.sum().float()
        if self.num_processes > 1:
            total_tokens = self.accelerator.reduce(total_tokens, reduction="sum") / self.num_processes
        if cfg.steps_per_batch > 1:
            total_tokens = total_tokens / cfg.steps_per_batch
        live = batch.live_sequences  # per step's slice; a float in a checkpoint written before k existed
        settings = dataclasses.replace(self.loss_settings, generation_batch_tokens=total_tokens,
                                       live_sequences=live[part] if isinstance(live, list) else live)
        first = self._step_rows(part).start  # this step's slice of this process's rows
        self._set_training(True)
        sums = {"loss": 0.0, "policy_loss": 0.0, "kl_loss": 0.0}
        means = {"kl": 0.0, "clip_ratio": 0.0, "entropy": 0.0}
        for s in range(0, self.local_batch, size):
            sl = slice(first + s, first + s + size)
            mask, loss_mask = batch.completion_mask[sl], batch.loss_mask[sl]
            last = s + size >= self.local_batch  # DDP averages gradients once, after the last micro-batch
            sync = self.accelerator.no_sync(self.model) if self.num_processes > 1 and not last else contextlib.nullcontext()
            with sync, self._memory_gate(batch, sl, size):  # forward and backward of this micro-batch
                with self._autocast():
                    logps, entropy = completion_logps(self.model, batch.prompt_ids[sl], batch.prompt_mask[sl],
                                                      batch.completion_ids[sl], mask, cfg.temperature, with_entropy=True,
                                                      group_size=self._group_size(size))
                    micro = settings if cfg.top_entropy_quantile == 1.0 else dataclasses.replace(
                        settings, entropy_threshold=self._entropy_threshold(entropy, loss_mask))
                    loss, m = grpo_loss(logps, None if batch.old_logps is None else batch.old_logps[sl],
                                        None if batch.ref_logps is None else batch.ref_logps[sl],
                                        batch.advantages[sl], loss_mask, micro, entropy)
                self.accelerator.backward(loss)
            sums["loss"] += loss.detach()
            for key, value in m.items():  # the loss parts add up over micro-batches; the rest is averaged
                if key in sums:
                    sums[key] += value
                else:
                    means[key] = means.get(key, 0.0) + value / n_micro
            fmask = loss_mask.float()
            means["entropy"] += (entropy.detach() * fmask).sum() / fmask.sum().clamp(min=1) / n_micro
        max_norm = cfg.max_grad_norm if cfg.max_grad_norm > 0 else float("inf")
        grad_norm = self.accelerator.clip_grad_norm_(self.model.parameters(), max_norm)
        named = {**sums, **means, "grad_norm": grad_norm}
        stacked = torch.stack([torch.as_tensor(v, dtype=torch.float32, device=self.device).reshape(())
                               for v in named.values()])
        if self.num_processes > 1:  # the mean over processes is the one-process value (loss.aggregate)
            stacked = self.accelerator.reduce(stacked, reduction="mean")
        metrics = dict(zip(named, stacked.tolist()))  # one device-to-host copy, not one per metric
        metrics["learning_rate"] = self.scheduler.get_last_lr()[0]
        if not math.isfinite(metrics["loss"]) or not math.isfinite(metrics["grad_norm"]):
            what = "loss" if not math.isfinite(metrics["loss"]) else "gradient norm"
            raise RunFailure(f"non-finite {what} at step {self.step + 1} "
                             f"(loss={metrics['loss']}, grad_norm={metrics['grad_norm']})")
        metrics["update_norm"] = self._stepped_norm()
        self.scheduler.step()
        self.optimizer.zero_grad(set_to_none=True)
        return metrics

    def _stepped_norm(self) -> float:
        """The optimizer's step, and the norm of the change it made to the trainable weights: what
        Adam did with the gradient (claim C4: a constant scale of the gradient barely moves Adam's
        update, m/√v; a binding clip does). Holds one copy of the trainable weights (with LoRA, the
        adapters) while it steps."""
        params = [p for group in self.optimizer.param_groups for p in group["params"]]
        before = [p.detach().clone() for p in params]
        self.optimizer.step()
        with torch.no_grad():
            torch._foreach_sub_(before, [p.detach() for p in params])
            return float(torch.linalg.vector_norm(torch.stack(torch._foreach_norm(before)))) if before else 0.0

    # ---- the run ------------------------------------------------------------------------
    def train_step(self) -> dict:
        """One optimizer step (sampling a new generation batch every μ steps); returns its metrics."""
        t0 = time.perf_counter()
        self._set_training(False)
        fresh = self.step % self.cfg.reuse_steps == 0
        if fresh:
            self._batch = self.generate_batch()
        batch, part = self._batch, self.step % self.cfg.steps_per_batch
        self.last_completions = batch.completions if fresh else []  # logged once, at the step that sampled them
        metrics = {"step": self.step + 1, **self.optimize(batch, part), **batch.metrics}
        self.step += 1
        elapsed = time.perf_counter() - t0
        metrics["step_time"] = elapsed
        tokens = (float(batch.completion_mask[self._step_rows(part)].sum()) if self.num_processes == 1
                  else batch.metrics["completions/mean_length"] * self.cfg.completions_per_step)
        metrics["tokens_per_second"] = tokens / elapsed  # all processes' completion tokens
        return metrics

    def train(self, on_step: Optional[Callable[[dict], None]] = None,
              checkpoint_dir: Optional[str | Path] = None, history: Optional[dict] = None) -> dict:
        """Run max_steps optimizer steps; returns the summary (README: Metrics, summary). With
        cfg.save_steps, a checkpoint goes to `checkpoint_dir/checkpoint-<step>` every save_steps
        steps; with cfg.resume_from_checkpoint, training goes on from that checkpoint (`history`:
        what load_checkpoint returned, when the caller loaded it already)."""
        cfg = self.cfg
        start = time.perf_counter()
        reset_peak_resident()  # the peak this run reaches, not an earlier run's in the same worker
        self._set_training(False)
        if cfg.resume_from_checkpoint:
            history = history if history is not None else load_checkpoint(self, cfg.resume_from_checkpoint)
        else:
            history = {"baseline": self.baseline_reward(),
                       "eval_before": self.eval_accuracy() if cfg.eval_every else None,
                       "rewards": [], "losses": [], "step_times": []}
        while self.step < cfg.max_steps:
            metrics = self.train_step()
            if cfg.eval_every and self.step % cfg.eval_every == 0:
                self._set_training(False)
                metrics["eval/accuracy"] = self.eval_accuracy()
            history["step_times"].append(metrics["step_time"])
            history["rewards"].append(metrics["reward"])
            history["losses"].append(metrics["loss"])
            history.setdefault("completions", []).append(
                metrics.get("completions/generated", float(cfg.completions_per_step)))
            if on_step is not None:
                on_step(metrics)
            if cfg.save_steps and checkpoint_dir is not None and self.step % cfg.save_steps == 0:
                save_checkpoint(self, Path(checkpoint_dir), history)
        self._set_training(False)
        baseline = history["baseline"]
        summary = summarize(history["rewards"], history["losses"], baseline["baseline_reward"], cfg.stl_window,
                            cfg.stl_delta, cfg.loss_departure_eps)
        summary.update(baseline)
        if len(history.get("completions", [])) == len(history["rewards"]):  # (a checkpoint from before the key: no)
            summary.update(completion_counts(history["completions"], summary["steps_to_learn"]))
        if cfg.eval_every:
            summary["eval_accuracy_before"] = history["eval_before"]
            summary["eval_accuracy_after"] = self.eval_accuracy()
        summary["median_step_time_s"] = float(np.median(history["step_times"]))
        summary["train_time_s"] = float(np.sum(history["step_times"]))
        summary["wall_time_s"] = time.perf_counter() - start
        if (peak := peak_resident_mib()) is not None:  # this process's peak resident memory over the run
            summary["peak_rss_mib"] = peak
        return summary

def host_floats(metrics: dict) -> dict:
    """The dict with its tensor values as Python floats, copied to the host in one transfer per
    device (float64 holds every float32 exactly: the same numbers as .item() each, in one sync)."""
    keys_by_device: dict = {}
    for key, value in metrics.items():
        if torch.is_tensor(value):
            keys_by_device.setdefault(value.device, []).append(key)
    out = dict(metrics)
    for keys in keys_by_device.values():
        out.update(zip(keys, torch.stack([metrics[k].reshape(()).double() for k in keys]).tolist()))
    return out
