"""One flat, documented config for a GRPO run: the schema.

Every value a run uses comes from a `GRPOConfig`; `config.yaml` in the run folder and the
MLflow params are written from the same object (`to_dict`). Names follow TRL's GRPOConfig
where TRL has the knob. A YAML file may be partial: every key has a default.

The config's other jobs live beside it, one module each: `config_values` turns YAML values into
the declared types, `config_validation` checks values and combinations (`validate`,
`check_inputs`), `checkpoint_compat` compares a checkpoint's config with a run's, and
`config_loading` reads a YAML file and `--set key=value` overrides (`load_config`).
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Optional, get_type_hints

from grpo_core.algo import axes
from grpo_core.util import defaults
from grpo_core.util.yaml_files import dump_yaml

TRACKING_SCHEMES = ("sqlite:///", "file:", "http://", "https://")  # MLflow stores: a file, a folder, a server

# Allowed names of the string-valued switches: the variant axes' names are the names registered in
# the modules that implement them (grpo_core/algo/axes.py, checked there); the others are listed here
# (cpu_math's in grpo_core/util/cpu_math.py). Each error lists the allowed names.

LOSS_TYPES = tuple(axes.LOSS_TYPES)  # the names, for the commands that take a loss type (grpo bench)
SCALE_REWARDS = tuple(axes.REWARD_SCALES)

MIXED_PRECISION = ("auto", "no", "bf16", "fp16")
DEVICES = ("auto", "cpu", "cuda")
DTYPES = ("auto", "float32", "bfloat16", "float16")
DECODE_MODES = ("auto", "dynamic", "static", "graph")


@dataclass(frozen=True)  # the logged value is the value used: nothing changes a config after it is built
class GRPOConfig:
    # ---- what to train -------------------------------------------------------------
    model: str = "tiny"
    """`tiny` (built-in character-level model, pretrained on `task` into a weak base and cached),
    a local model directory, or a hub id (needs a reachable hub)."""
    gguf_file: Optional[str] = None
    """A GGUF file inside the `model` directory to load (dequantized by transformers; needs the
    `gguf` package); None = the directory's own weights."""
    dtype: str = "auto"
    """Weights dtype: `auto` (float32 on a CPU and for the tiny model, bfloat16 for other models
    on a GPU), `float32`, `bfloat16`, `float16`."""
    task: str = "addition"
    """Built-in task name: `addition` (two-number addition), `reverse` (reverse a digit string) or
    `repeat` (write a 2-4 digit unit k times: 6-36 tokens). With `dataset` set, used only to
    pretrain the tiny model."""
    dataset: Optional[str] = None
    """Your own data instead of a built-in task: a local .json/.jsonl/.csv/.parquet file, or a
    `datasets` hub name (where a hub is reachable). Needs `prompt_column` and `answer_column`."""
    prompt_column: str = "prompt"
    """The dataset column holding the prompt (plain text; the chat template is applied)."""
    prompt_template: str = ""
    """How a prompt is put to the model, `{prompt}` standing for it, e.g. worked examples before it
    for a base model: `"Q: What is 2 + 3?\\nA: 5\\n\\nQ: {prompt}\\nA:"`. Applied before the
    chat template (where the tokenizer has one; else the text is read as it is, led by BOS where
    the tokenizer puts one). "" = the prompt alone."""
    answer_column: str = "answer"
    """The dataset column holding the reference answer (passed to rewards as `answer`)."""
    reward_funcs: list = field(default_factory=list)
    """Reward functions by name (`exact_match`, `format_digits`, `math_answer`, `think_answer_format`)
    or import path `package.module:function` (a module of this project; another only with
    GRPO_TRUST_IMPORTS=1 in the environment, since importing runs its code); rewards are summed.
    Empty = the task's defaults (`math_answer` and `think_answer_format` for a dataset). Before
    training, every answer must be one each built-in reward can score (`last_number`: one number;
    `exact_match`, `math_answer`: not empty)."""
    reward_workers: int = 0
    """Processes that compute rewards, one completion per call, while the trainer computes
    reference log-probs; 0 = in the training process, the whole batch per call."""
    reward_timeout: float = 0.0
    """Seconds a reward function may take on one completion (needs reward_workers ≥ 1); a
    completion that takes longer gets reward_timeout_value and counts in `rewards/timeouts`;
    0 = no limit."""
    reward_timeout_value: float = 0.0
    """The reward a timed-out completion gets (from each function that timed out)."""

    # ---- LoRA (PEFT) -------------------------------------------------------------------
    use_peft: bool = False
    """Train LoRA adapters instead of all weights; the KL reference is the same network with its
    adapters disabled (no second copy of the weights)."""
    lora_r: int = 16
    """LoRA rank."""
    lora_alpha: int = 32
    """LoRA scaling numerator (scale = lora_alpha / lora_r)."""
    lora_dropout: float = 0.0
    """Dropout on the LoRA path, in [0, 1)."""
    lora_target_modules: list = field(default_factory=list)
    """Module names to adapt (e.g. [q_proj, v_proj]); empty = every linear layer but the lm head."""

    # ---- optimisation --------------------------------------------------------------
    learning_rate: float = 1e-4
    """Peak AdamW learning rate."""
    lr_scheduler_type: str = "constant"
    """Schedule after warmup: `constant`, `linear` (to 0 at max_steps) or `cosine` (to 0)."""
    warmup_steps: int = 0
    """[Claim C2] Linear warmup length in optimizer steps; 0 = warmup off. Wins over warmup_ratio."""
    warmup_ratio: float = 0.0
    """[Claim C2] Warmup as a fraction of max_steps, in [0, 1); used when warmup_steps is 0."""
    weight_decay: float = 0.0
    """AdamW weight decay."""
    adam_beta1: float = 0.9
    """AdamW beta1."""
    adam_beta2: float = 0.999
    """AdamW beta2."""
    adam_epsilon: float = 1e-8
    """AdamW epsilon."""
    max_grad_norm: float = 1.0
    """Clip the global gradient norm to this value; 0 = no clipping (grad_norm is still logged)."""
    max_steps: int = 200
    """Number of optimizer steps."""
    gradient_accumulation_steps: int = 1
    """Micro-batches per optimizer step (per process); must divide prompts_per_step ×
    num_generations (on P processes: that over P)."""

    # ---- GRPO ------------------------------------------------------------------------
    prompts_per_step: int = 8
    """Prompts per generation batch; each gets num_generations completions. On P processes
    (`grpo train --num-processes P`) each process samples prompts_per_step / P of them."""
    num_generations: int = 8
    """G: completions per prompt (a group). At least 2."""
    num_iterations: int = 1
    """μ: passes over each generation batch. μ > 1 reuses the batch with stored old
    log-probs, so the ratio departs from 1 and clipping acts."""
    steps_per_generation: Optional[int] = None
    """TRL's: micro-batches per generation batch, a multiple of gradient_accumulation_steps; null
    = gradient_accumulation_steps (one optimizer step per generation). k = this ÷
    gradient_accumulation_steps > 1 samples k × prompts_per_step prompts at once, computes their
    advantages together and feeds them to k optimizer steps of prompts_per_step whole groups each,
    in draw order (TRL shuffles rows first); the later steps are off-policy (stored old log-probs).
    A new generation batch every k × num_iterations steps."""
    beta: float = 0.0
    """KL coefficient (k3 estimator against a frozen reference); 0 = no reference model."""
    epsilon: float = 0.2
    """Lower clip range: ratio ≥ 1 − epsilon."""
    epsilon_high: Optional[float] = None
    """Upper clip range: ratio ≤ 1 + epsilon_high; None = epsilon (DAPO's clip-higher when larger)."""
    delta: Optional[float] = None
    """Two-sided clipping (TRL's name; INTELLECT-2, arXiv 2505.07291): the ratio in the unclipped term
    of the clip surrogate is bounded by delta, so a negative advantage's loss is bounded by −delta·A
    (verl's dual-clip, clip_ratio_c = delta). TRL recommends delta > 1 + epsilon_high. None = off."""
    importance_sampling_level: str = "token"
    """Importance ratio of the policy loss: `token` (one per token, PPO and GRPO) or `sequence` (GSPO,
    arXiv 2507.18071: the mean token log-ratio of each sequence, clipped per sequence; TRL's knob of
    the same name). With `sequence`, loss_type `grpo` gives the paper's per-sequence objective."""
    top_entropy_quantile: float = 1.0
    """Train the policy loss only on this share of each micro-batch's completion tokens, those of the
    highest entropy (TRL's name and default; "Beyond the 80/20 rule", arXiv 2506.01939, trains on the
    top 0.2): a token below the (1 − q) quantile of the entropies keeps its KL term and its place in
    the normalizer, but no policy loss. 1 = every token."""
    entropy_coef: float = 0.0
    """An entropy bonus (TRL's name and default): the loss subtracts entropy_coef × the mean entropy of
    the completion tokens the policy loss trains (per micro-batch); > 0 keeps the policy from
    collapsing, < 0 sharpens it. 0 = off."""
    sapo_temperature_pos: float = 1.0
    """loss_type sapo: the temperature τ of its soft gate −(4/τ)·σ(τ(r − 1))·A where the advantage is
    positive (TRL's name and default; SAPO, arXiv 2511.20347). A larger τ fades the gradient sooner
    as the ratio r leaves 1."""
    sapo_temperature_neg: float = 1.05
    """loss_type sapo: τ where the advantage is ≤ 0 (TRL's name and default)."""
    kl_estimator: str = "k3"
    """The per-token KL estimate the β term uses: `k3` (exp(d) − d − 1, TRL's GRPO, verl's low_var_kl),
    `k1` (logp − ref, verl's kl) or `k2` ((logp − ref)²/2, verl's mse); docs: the variant axes."""
    kl_in_reward: bool = False
    """Put the KL in the reward instead of the loss (TRL's RLOOTrainer, verl's use_kl_in_reward): each
    completion's reward, before its advantage, loses β × Σ_t KL_t (kl_estimator; TRL's RLOO and the
    RLOO paper use k1), measured with the sampling policy; the loss then has no KL term (its `kl`
    is still logged). Needs beta > 0; not with zero_variance_groups resample (which picks groups
    before the log-probs exist)."""
    use_bias_correction_kl: bool = False
    """Multiply the per-token KL by the ratio π_θ/π_old (TRL ≥ 1.x, `use_bias_correction_kl`, its
    default there is true): the KL gradient becomes the unbiased reverse-KL gradient (logp − ref
    per token on-policy). Same loss value on-policy, different gradient. Off here: the claims are
    about the GRPO of early 2025, which had no such correction."""
    loss_type: str = "grpo"
    """[Claim C5, C1] Token-loss aggregation: `grpo` (per-sequence mean, then mean over
    sequences), `bnpo` (token mean over the micro-batch), `dapo` (token mean over the whole
    generation batch), `dr_grpo` (token sum / (sequences × max_completion_length))."""
    advantage_estimator: str = "grpo"
    """The baseline subtracted from each reward within its group: `grpo` (the group's mean), or another
    name registered in advantages.ADVANTAGE_ESTIMATORS (docs: the variant axes table; verl's
    `adv_estimator`). scale_rewards then divides what is left."""
    scale_rewards: str = "group"
    """[Claim C5] Divide (r − baseline) by the `group` std, the `batch` std (PPO-Lite), or `none` (Dr. GRPO)."""
    advantage_noise_std: float = 0.0
    """[Claim C3] Std of zero-mean Gaussian noise added to normalized advantages; 0 = off.
    TRL PR #2869 used variance 1e-4, i.e. std 0.01."""
    advantage_noise_steps: int = 0
    """[Claim C3] Add the noise only during the first N optimizer steps; 0 = every step."""
    advantage_scale: float = 1.0
    """[Claim C4] Multiply advantages after normalization and noise; 1 = off."""
    zero_variance_groups: str = "keep"
    """[Claim C6] Groups whose G rewards are all equal (advantages 0): `keep` them (TRL), `drop` them
    from the loss and its normalizer, or `resample` (DAPO's dynamic sampling, verl's filter_groups):
    sample more prompts until the step has prompts_per_step groups with unequal rewards, at most
    max_num_gen_batches rounds; groups still missing then are filled with dropped ones. Logged
    per step: groups/sampled, groups/dropped, completions/generated."""
    max_num_gen_batches: int = 4
    """[Claim C6] With zero_variance_groups `resample`: at most this many generation rounds of
    prompts_per_step prompts per step (verl's max_num_gen_batches)."""
    mask_truncated_completions: bool = False
    """Completions that reach max_completion_length without EOS contribute no loss: their
    tokens leave the loss and its normalizer (TRL's mask_truncated_completions; DAPO). Their
    rewards still count in the group's advantages."""
    reward_weights: list[float] = field(default_factory=list)
    """One weight per reward function, in `reward_funcs` order (the task's defaults when that is
    empty): the reward is Σ weight × reward (TRL's reward_weights). Empty = every weight 1."""
    overlong_buffer_len: int = 0
    """DAPO's soft overlong punishment (verl's and OpenRLHF's names): a completion longer than
    max_completion_length − overlong_buffer_len tokens loses up to overlong_penalty_factor of
    reward, linearly, in the reward the advantages start from; the logged `reward` stays the
    task's, the penalty is logged as rewards/overlong_penalty. 0 = off."""
    overlong_penalty_factor: float = 1.0
    """The overlong penalty at max_completion_length (DAPO: 1)."""
    multi_objective_aggregation: str = "sum_then_normalize"
    """How the reward functions' values become the reward the advantages start from (TRL's name and
    values): `sum_then_normalize` (Σ weight × reward, TRL's default) or `normalize_then_sum` (each
    function normalized within its group first, then the weighted sum; with scale_rewards batch, as
    TRL divides). The logged `reward` is the weighted sum either way."""

    # ---- sampling ----------------------------------------------------------------------
    max_completion_length: int = 8
    """Maximum completion tokens (also the Dr. GRPO normalizer)."""
    temperature: float = 1.0
    """Sampling temperature; log-probs are computed from logits / temperature, as TRL does."""
    top_p: float = 1.0
    """Nucleus sampling mass in (0, 1]; 1 = off."""
    top_k: int = 0
    """Keep the k most likely tokens; 0 = off."""
    decode: str = "auto"
    """How the sampler keeps its KV cache: `dynamic` (grown per token; the CPU's fast path),
    `static` (preallocated, fixed-shape steps), `graph` (static, each step replayed as a CUDA
    graph; CUDA only), `auto` (graph on CUDA, dynamic on a CPU). The paths agree to about 4e-5 in
    the logits, not bit for bit: the sampled tokens can differ (docs/development/measurements.md)."""
    eos_check_every: int = 0
    """Look for "every completion ended" every N decoded tokens (a host sync on a GPU); 0 = auto
    (1 on a CPU, 8 with CUDA graphs)."""

    # ---- run metrics (steps-to-learn) ----------------------------------------------------
    baseline_prompts: int = 256
    """Training prompts for baseline_reward, drawn as training draws them from one fixed stream and
    sampled num_generations times each by the training sampler; more are added (up to 16×) until
    the standard error over prompts is ≤ stl_delta / 4."""
    stl_window: int = 20
    """w: trailing moving-average window (steps) of the training reward for steps_to_learn; the
    first w − 1 steps average the steps so far."""
    stl_delta: float = 0.05
    """δ: steps_to_learn is the first step where the moving average reaches baseline_reward + δ
    and then stays ≥ baseline_reward + δ/2 to the end of the run, with ≥ w steps after it."""
    loss_departure_eps: float = 1e-3
    """ε: loss_departure_step is the first step with |loss| > ε."""
    eval_every: int = 0
    """Greedy held-out accuracy every N steps, plus before and after training; 0 = eval off."""
    eval_prompts: int = 200
    """Held-out prompts for the greedy eval."""
    log_completions: bool = True
    """Write a sample of each generation batch to `completions.jsonl` in the run folder: step,
    prompt, completion, reward (the total), rewards/<function> (each reward function's value),
    advantage, length (tokens), truncated (cut at max_completion_length); the run's MLflow record
    gets them as a table (`completions.json`). TRL's name (off by default there)."""
    log_completions_per_step: int = 8
    """Completions of each generation batch written to completions.jsonl, spread evenly over its
    groups; 0 = every completion (for short runs)."""
    num_completions_to_print: int = 0
    """`grpo train` prints this many of each step's logged completions on the terminal (TRL's
    name); 0 = none."""

    # ---- reproducibility and hardware ---------------------------------------------------
    seed: int = 0
    """Seeds prompts, sampling, dropout and the advantage noise (its own generator)."""
    device: str = "auto"
    """`auto` (cuda when available), `cpu` or `cuda`."""
    mixed_precision: str = "auto"
    """`auto` (bf16 on a GPU that supports it, else no), `no`, `bf16`, `fp16`."""
    num_threads: int = 0
    """CPU threads for torch; 0 = torch's default. Part of a run's numbers: some gradients sum in a
    thread-count-dependent order, so a run is reproduced with the num_threads it recorded."""
    cpu_math: str = "reproducible"
    """CPU math paths: `reproducible` pins ATen, MKL and oneDNN to their AVX2 kernels before torch
    loads, so every x86-64 machine with AVX2 computes the same numbers bit for bit (same versions
    and num_threads); `native` lets each library pick its kernels (can be faster; numbers differ
    between machines). One mode per process: the `grpo` command sets it from the config."""
    tiny_pretrain_steps: Optional[int] = None
    """Supervised steps that turn the built-in tiny model into a weak base (cached per value);
    None = the task's calibrated value (addition 1000, reverse 75), written resolved to config.yaml."""
    cache_dir: str = defaults.CACHE_DIR
    """Where tiny models pretrained here (non-default tiny_pretrain_steps) and measured baselines
    (built-in tasks) are cached. A sweep that leaves it at this default and names a SQLite store
    elsewhere (`--tracking-uri`) keeps it in `cache` beside that store, as the store's artifacts."""
    save_steps: int = 0
    """Write a checkpoint (the trainable weights: with LoRA the adapters; optimizer, schedule, every
    random state, the metric history) to `<run folder>/checkpoint-<step>` every N steps, keeping the
    latest; 0 = none. In a sweep, a stopped run goes on from its latest checkpoint when its point is
    claimed again, and a finished run's checkpoints are removed."""
    resume_from_checkpoint: Optional[str] = None
    """A checkpoint folder to continue from: the run goes on at the step after it and gives the
    same metrics as an uninterrupted run (same config, CPU). Every other key must equal the
    checkpoint's config."""
    run_name: str = ""
    """Name of the run in MLflow; empty = derived from the variant settings and seed."""
    mlflow_tracking_uri: str = defaults.TRACKING_URI
    """MLflow tracking store for `grpo train`."""
    mlflow_experiment: str = "grpo-train"
    """MLflow experiment for `grpo train`."""

    # ---- derived values ------------------------------------------------------------------
    @property
    def completions_per_step(self) -> int:
        """Completions per optimizer step (a generation batch holds steps_per_batch times as many)."""
        return self.prompts_per_step * self.num_generations

    @property
    def steps_per_batch(self) -> int:
        """k: optimizer steps one generation batch's slices feed (steps_per_generation ÷ gradient_accumulation_steps)."""
        return (self.steps_per_generation or self.gradient_accumulation_steps) // self.gradient_accumulation_steps

    @property
    def reuse_steps(self) -> int:
        """Optimizer steps between two generation batches: k × μ. Above 1 the loss needs stored old log-probs."""
        return self.steps_per_batch * self.num_iterations

    @property
    def effective_warmup_steps(self) -> int:
        if self.warmup_steps > 0:
            return self.warmup_steps
        return math.ceil(self.warmup_ratio * self.max_steps)

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    def default_run_name(self) -> str:
        parts = [
            _dataset_label(self.dataset) if self.dataset else self.task,
            self.loss_type,
            f"lr{self.learning_rate:g}",
            f"wu{self.effective_warmup_steps}",
        ]
        if self.advantage_noise_std:
            parts.append(f"noise{self.advantage_noise_std:g}")
        if self.advantage_scale != 1.0:
            parts.append(f"ascale{self.advantage_scale:g}")
        if self.beta:
            parts.append(f"beta{self.beta:g}")
        parts.append(f"seed{self.seed}")
        return "-".join(parts)


FIELD_NAMES = tuple(f.name for f in dataclasses.fields(GRPOConfig))
_HINTS = get_type_hints(GRPOConfig)


def _dataset_label(dataset: str) -> str:
    """A run name's first part for a run on your own data: the file's name without its suffix (or a
    hub id's last part), in letters, digits, '-', '_' and '.' only."""
    stem = Path(dataset.rstrip("/")).stem or "dataset"
    return "".join(c if c.isalnum() or c in "-_." else "_" for c in stem)


def field_type(key: str):
    """The declared type of a config key (int, float, str, Optional[float], list)."""
    return _HINTS[key]


def save_config(cfg: GRPOConfig, folder: Path) -> None:
    """`folder/config.yaml`: the resolved config, every key (a run folder and each checkpoint)."""
    from grpo_core.util.files import write_text_atomic

    write_text_atomic(Path(folder) / "config.yaml", dump_yaml(masked_dict(cfg.to_dict())))


def masked_dict(values: dict) -> dict:
    """A config's values with every password in them masked (grpo_core.util.errors.mask_secrets): what
    a run folder and MLflow hold of a tracking URI is `user:***@host`."""
    from grpo_core.util.errors import mask_secrets

    def mask(v):
        return mask_secrets(v) if isinstance(v, str) else [mask(x) for x in v] if isinstance(v, list) else v

    return {k: mask(v) for k, v in values.items()}
