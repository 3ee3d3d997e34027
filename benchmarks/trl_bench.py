"""`grpo bench` (benchmarks/trl_bench.py): our GRPOTrainer and TRL's GRPOTrainer side by side on the same model and batch. Figures: results/benchmarks/cpu.md and results/benchmarks/README.md.

Both trainers live in one process and take turns in short blocks of optimizer steps (TRL's
block, then ours, driven from a TRL callback), so that machine drift hits both alike. Blocks,
not single steps: switching trainers evicts the other's caches, a cost neither pays in real
training (measured on the tiny model: +4 ms per step, ~20%, for ours when switching every step). For each we report the
median step time after warm-up, completion tokens per second and peak memory; then the ratio
ours / TRL. Peak memory is measured in a fresh child process per trainer (the step timing
cannot separate two trainers' memory in one process): peak RSS above the process's RSS after
imports on CPU, `torch.cuda.max_memory_allocated` on a GPU.

Setups: `tiny` (the built-in model, 8 prompts × 8 completions, 8 new tokens),
`smollm2-135m` (SmolLM2-135M's Llama shape with random weights, 4 × 4, 16 new tokens) and, on a
GPU, `qwen2-0.5b` (Qwen2-0.5B's shape, bf16). Random weights are fine for timing: no sequence
ends early, so both trainers generate the full length.
"""

from __future__ import annotations

import os
import platform
import re
import shutil
import statistics
import subprocess
import tempfile
import time
import weakref
from dataclasses import dataclass, field
from pathlib import Path
from typing import Optional

import torch

from grpo_core.util import defaults
from grpo_core.util.errors import UserInputError
from grpo_core.util.files import staged_folder
from grpo_core.util.memory import status_kib
from grpo_core.record.provenance import gpu_driver

SMOLLM2_135M = dict(  # HuggingFaceTB/SmolLM2-135M config.json
    model_type="llama",
    hidden_size=576,
    intermediate_size=1536,
    num_hidden_layers=30,
    num_attention_heads=9,
    num_key_value_heads=3,
    vocab_size=49152,
    max_position_embeddings=8192,
    rope_theta=100000.0,
    rms_norm_eps=1e-5,
    tie_word_embeddings=True,
)
QWEN2_05B = dict(  # Qwen/Qwen2-0.5B config.json
    model_type="qwen2",
    hidden_size=896,
    intermediate_size=4864,
    num_hidden_layers=24,
    num_attention_heads=14,
    num_key_value_heads=2,
    vocab_size=151936,
    max_position_embeddings=32768,
    rope_theta=1000000.0,
    rms_norm_eps=1e-6,
    tie_word_embeddings=True,
)


@dataclass(frozen=True)
class Setup:
    name: str
    description: str
    prompts: int  # prompts per step
    generations: int  # completions per prompt
    new_tokens: int  # max_completion_length
    arch: Optional[dict] = None  # None = the built-in tiny model
    gpu_only: bool = False
    steps: int = 30  # measured steps (after warm-up) unless --steps
    warmup: int = 3
    real: bool = False  # the fetched SmolLM2-135M-Instruct with LoRA on REAL_DATA (the real-model CPU suite's shape)


SETUPS = {
    "tiny": Setup("tiny", "built-in tiny Qwen2 (0.4M), pretrained on addition", 8, 8, 8, steps=40, warmup=5),
    "smollm2-135m": Setup(
        "smollm2-135m",
        "SmolLM2-135M shape (Llama, 134.5M), random weights",
        4,
        4,
        16,
        arch=SMOLLM2_135M,
        steps=8,
        warmup=2,
    ),
    "qwen2-0.5b": Setup(
        "qwen2-0.5b",
        "Qwen2-0.5B shape (494M), random weights",
        4,
        4,
        16,
        arch=QWEN2_05B,
        gpu_only=True,
        steps=10,
        warmup=2,
    ),
    "smollm2-lora": Setup(
        "smollm2-lora",
        "SmolLM2-135M-Instruct (grpo fetch-model), LoRA r 16 / α 32 on every "
        "linear layer, data/real/add_small.jsonl through the chat template, math_answer: the "
        "real-model CPU suite's step",
        4,
        8,
        12,
        steps=6,
        warmup=1,
        real=True,
    ),
}
REAL_DATA = Path(__file__).resolve().parents[1] / "data" / "real" / "add_small.jsonl"
LORA = dict(r=16, alpha=32)  # the real-model CPU suite's adapters (experiments/real/cpu/)


@dataclass
class Knobs:
    """What both trainers share besides the setup."""

    beta: float = 0.0
    loss_type: str = "grpo"
    learning_rate: float = 1e-5
    seed: int = 0
    device: str = "cpu"  # cpu | cuda
    cache_dir: str = defaults.CACHE_DIR
    cpu_math: str = "reproducible"  # grpo_core/util/cpu_math.py: set for this process before torch loaded


@dataclass
class Measured:
    step_times: list = field(default_factory=list)
    tokens: list = field(default_factory=list)  # completion tokens per measured step

    def summary(self) -> dict:
        n = min(len(self.tokens), len(self.step_times))
        return {
            "median_step_s": statistics.median(self.step_times),
            "steps": len(self.step_times),
            "tokens_per_s": statistics.median(t / s for t, s in zip(self.tokens[:n], self.step_times[:n])),
        }


def model_dir(setup: Setup, knobs: Knobs) -> str:
    """A saved model folder for the setup (TRL reloads the reference model from a path)."""
    if setup.real:
        path = Path(defaults.MODELS) / "SmolLM2-135M-Instruct"
        if not (path / "config.json").is_file():
            raise UserInputError(f"--setup {setup.name}: {path} holds no model; allowed: run `grpo fetch-model` first")
        return str(path)
    if setup.arch is None:
        from grpo_core.tasks.models import resolve_model_path
        from grpo_core.tasks.catalog import TASKS

        return resolve_model_path("tiny", knobs.cache_dir, "addition", TASKS["addition"].tiny_pretrain_steps)
    target = Path(knobs.cache_dir) / f"bench-{setup.name}"
    if (target / "config.json").is_file():
        return str(target)
    from transformers import AutoConfig, AutoModelForCausalLM

    from grpo_core.tasks.models import build_tiny_tokenizer

    tokenizer = build_tiny_tokenizer(vocab_size=setup.arch["vocab_size"])
    arch = dict(setup.arch)
    config = AutoConfig.for_model(
        arch.pop("model_type"),
        pad_token_id=tokenizer.pad_token_id,
        bos_token_id=tokenizer.bos_token_id,
        eos_token_id=tokenizer.eos_token_id,
        **arch,
    )
    torch.manual_seed(0)
    model = AutoModelForCausalLM.from_config(config)
    with staged_folder(target) as tmp:
        model.save_pretrained(tmp)
        tokenizer.save_pretrained(tmp)
    return str(target)


def _mixed_precision(knobs: Knobs) -> str:
    return "bf16" if knobs.device == "cuda" else "no"


def bench_config(setup: Setup, knobs: Knobs, path: str):
    """grpo-lab's config of the setup: both trainers are built from it (TRL's through trl_config)."""
    from grpo_core.config.schema import GRPOConfig
    from grpo_core.config.validation import validate

    real = (
        dict(
            dataset=str(REAL_DATA),
            reward_funcs=["math_answer"],
            use_peft=True,
            lora_r=LORA["r"],
            lora_alpha=LORA["alpha"],
        )
        if setup.real
        else {}
    )
    return validate(
        GRPOConfig(
            model=path,
            task="addition",
            **real,
            prompts_per_step=setup.prompts,
            num_generations=setup.generations,
            max_completion_length=setup.new_tokens,
            beta=knobs.beta,
            loss_type=knobs.loss_type,
            learning_rate=knobs.learning_rate,
            max_steps=10_000,
            seed=knobs.seed,
            device=knobs.device,
            mixed_precision=_mixed_precision(knobs),
            cache_dir=knobs.cache_dir,
            cpu_math=knobs.cpu_math,
        )
    )


def build_ours(setup: Setup, knobs: Knobs, path: str):
    from grpo_core.trainer import GRPOTrainer

    return GRPOTrainer(bench_config(setup, knobs, path))


def build_trl(setup: Setup, knobs: Knobs, path: str, max_steps: int, callbacks=()):
    from trl import GRPOTrainer as TRLTrainer

    from grpo_core.tasks.rewards import exact_match
    from grpo_core.tasks.catalog import get_task

    from grpo_peer.trl_config import chat_rows, lora_config, reward_of_messages, trl_args

    cfg = bench_config(setup, knobs, path)
    train = get_task("addition").splits()[0].to_dataset()
    reward, peft_config = exact_match, None
    if setup.real:  # chat-format prompts (TRL applies the chat template, as ours does), LoRA as ours
        import json

        train = chat_rows([json.loads(line) for line in REAL_DATA.read_text().splitlines() if line])
        reward, peft_config = reward_of_messages("math_answer"), lora_config(cfg)
    from grpo_core.tasks.models import load_model_and_tokenizer

    _, tokenizer = load_model_and_tokenizer(path)  # left padding, pad token set: as ours
    output_dir = tempfile.mkdtemp(prefix="grpo-bench-trl-")  # nothing is saved there; removed with the trainer
    args = trl_args(cfg, output_dir, device=knobs.device, max_steps=max_steps)
    from transformers.trainer_callback import PrinterCallback

    trainer = TRLTrainer(
        model=path,
        reward_funcs=reward,
        args=args,
        train_dataset=train,
        processing_class=tokenizer,
        callbacks=list(callbacks),
        peft_config=peft_config,
    )
    trainer.remove_callback(PrinterCallback)  # no per-step log printing
    weakref.finalize(trainer, shutil.rmtree, output_dir, True)
    return trainer


def _sync(device: str) -> None:
    if device == "cuda":
        torch.cuda.synchronize()


def _alternating_callback(ours, ours_m: Measured, trl_m: Measured, warmup: int, device: str, batch: int, block: int):
    from transformers import TrainerCallback

    class Alternate(TrainerCallback):
        """Times each TRL step (step begin → step end); after every `block` TRL steps, runs and
        times `block` steps of ours. The first `warmup` steps of each trainer are not measured."""

        ours_steps = 0

        def on_step_begin(self, args, state, control, **kwargs):
            _sync(device)
            self.t0 = time.perf_counter()

        def on_step_end(self, args, state, control, **kwargs):
            _sync(device)
            if state.global_step > warmup:
                trl_m.step_times.append(time.perf_counter() - self.t0)
            if state.global_step % block and state.global_step < args.max_steps:
                return
            while self.ours_steps < state.global_step:
                t0 = time.perf_counter()
                metrics = ours.train_step()
                _sync(device)
                elapsed = time.perf_counter() - t0
                self.ours_steps += 1
                if self.ours_steps > warmup:
                    ours_m.step_times.append(elapsed)
                    ours_m.tokens.append(metrics["completions/mean_length"] * batch)

        def on_log(self, args, state, control, logs=None, **kwargs):
            if logs and "completions/mean_length" in logs and state.global_step > warmup:
                trl_m.tokens.append(float(logs["completions/mean_length"]) * batch)

    return Alternate()


def logps_check(ours) -> float:
    """Max |Δ| between the log-probs our loss uses (shared-prompt forward) and a plain forward
    pass over the whole sequence with a full-vocabulary log-softmax, on one fresh batch."""
    from grpo_core.sampling.generation import completion_logps, positions_from_mask

    batch = ours.generate_batch()
    model = ours.policy
    size = ours.cfg.completions_per_step // ours.cfg.gradient_accumulation_steps
    with torch.no_grad():
        used, _ = completion_logps(
            model,
            batch.prompt_ids,
            batch.prompt_mask,
            batch.completion_ids,
            batch.completion_mask,
            ours.cfg.temperature,
            group_size=ours._group_size(size),
        )
        ids = torch.cat([batch.prompt_ids, batch.completion_ids], 1)
        mask = torch.cat([batch.prompt_mask, batch.completion_mask], 1)
        logits = model(input_ids=ids, attention_mask=mask, position_ids=positions_from_mask(mask)).logits.float()
        T = batch.completion_ids.shape[1]
        plain = torch.log_softmax(logits[:, -T - 1 : -1] / ours.cfg.temperature, -1)
        plain = plain.gather(-1, batch.completion_ids.unsqueeze(-1)).squeeze(-1)
    on = batch.completion_mask.bool()
    return float((used - plain)[on].abs().max())


def time_side_by_side(setup: Setup, knobs: Knobs, steps: int, warmup: int, block: int) -> dict:
    path = model_dir(setup, knobs)
    ours = build_ours(setup, knobs, path)
    ours_m, trl_m = Measured(), Measured()
    batch = setup.prompts * setup.generations
    callback = _alternating_callback(ours, ours_m, trl_m, warmup, knobs.device, batch, block)
    trl = build_trl(setup, knobs, path, max_steps=warmup + steps, callbacks=[callback])
    trl.train()
    return {"ours": ours_m.summary(), "trl": trl_m.summary(), "logps_max_abs_diff": logps_check(ours)}


# ---- peak memory, one child process per trainer ---------------------------------------------
def probe_memory(which: str, setup: Setup, knobs: Knobs, steps: int) -> int:
    """Run `steps` steps of one trainer in this (fresh) process; return its peak bytes above
    the baseline after imports (CPU: VmHWM − VmRSS; GPU: max_memory_allocated)."""
    import trl  # noqa: F401  (both probes import the same libraries before the baseline)

    path = model_dir(setup, knobs)
    import gc

    gc.collect()
    baseline = status_kib("VmRSS")
    if knobs.device == "cuda":
        torch.cuda.reset_peak_memory_stats()
    if which == "ours":
        ours = build_ours(setup, knobs, path)
        for _ in range(steps):
            ours.train_step()
    else:
        build_trl(setup, knobs, path, max_steps=steps).train()
    if knobs.device == "cuda":
        return int(torch.cuda.max_memory_allocated())
    return (status_kib("VmHWM") - baseline) * 1024


def measure_memory(setup: Setup, knobs: Knobs, steps: int) -> dict:
    """Peak memory of each trainer, each in a fresh (spawned) process of its own."""
    import multiprocessing

    out = {}
    for which in ("ours", "trl"):
        with multiprocessing.get_context("spawn").Pool(1) as pool:
            out[which] = pool.apply(probe_memory, (which, setup, knobs, steps))
    return out


def _git_commit() -> str:
    try:
        out = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True, timeout=10)
        return out.stdout.strip() or "unknown"
    except (OSError, subprocess.SubprocessError):
        return "unknown"


# ---- the report -----------------------------------------------------------------------------
def environment() -> dict:
    import accelerate

    from grpo_core.util.cpu_math import process_mode
    import transformers
    import trl

    cpu = platform.processor() or platform.machine()
    try:
        cpu = re.search(r"model name\s*:\s*(.*)", Path("/proc/cpuinfo").read_text()).group(1)
    except (OSError, AttributeError):
        pass
    gpu = torch.cuda.get_device_name(0) if torch.cuda.is_available() else None
    return {
        "python": platform.python_version(),
        "torch": torch.__version__,
        "transformers": transformers.__version__,
        "trl": trl.__version__,
        "accelerate": accelerate.__version__,
        "cpu": cpu,
        "cores": os.cpu_count(),
        "torch_threads": torch.get_num_threads(),
        "cpu_math": process_mode(),
        "gpu": gpu,
        "CUDA": torch.version.cuda if gpu else None,
        "driver": (gpu_driver() or None) if gpu else None,
    }


def format_table(rows: list[dict]) -> str:
    lines = [
        "| setup | batch | ours: median step | TRL: median step | ours/TRL step time | "
        "ours tok/s | TRL tok/s | ours peak mem | TRL peak mem | log-prob check |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        s = r["setup"]
        mem = r.get("memory")
        lines.append(
            f"| {s.name} | {s.prompts}×{s.generations}, {s.new_tokens} new | {r['ours']['median_step_s'] * 1000:.1f} ms | "
            f"{r['trl']['median_step_s'] * 1000:.1f} ms | **{r['ratio']:.2f}** | {r['ours']['tokens_per_s']:.0f} | "
            f"{r['trl']['tokens_per_s']:.0f} | "
            + (f"{mem['ours'] / 2**20:.0f} MiB | {mem['trl'] / 2**20:.0f} MiB | " if mem else "– | – | ")
            + f"{r['logps_max_abs_diff']:.1e} |"
        )
    return "\n".join(lines)


def run_bench(
    setup_names: list[str],
    knobs: Knobs,
    steps: Optional[int],
    warmup: Optional[int],
    block: int,
    memory: bool,
    out: Optional[str],
    command: str,
) -> int:
    try:
        import trl  # noqa: F401
    except ImportError:
        raise UserInputError("grpo bench needs TRL: pip install -e '.[bench]'") from None
    if knobs.device == "cuda" and not torch.cuda.is_available():
        raise UserInputError("--device cuda: no CUDA device here; allowed on this machine: cpu")
    for name in setup_names:
        if SETUPS[name].gpu_only and knobs.device != "cuda":
            raise UserInputError(
                f"--setup {name}: runs on a GPU only (--device cuda); allowed here: "
                + ", ".join(n for n, s in SETUPS.items() if not s.gpu_only)
            )
    Path(knobs.cache_dir).mkdir(parents=True, exist_ok=True)
    rows = []
    for name in setup_names:
        setup = SETUPS[name]
        n, w = steps or setup.steps, setup.warmup if warmup is None else warmup
        print(
            f"[bench] {name}: {setup.description}; {w} warm-up + {n} measured steps each, "
            f"alternating in blocks of {block}",
            flush=True,
        )
        row = {"setup": setup, **time_side_by_side(setup, knobs, n, w, block)}
        row["ratio"] = row["ours"]["median_step_s"] / row["trl"]["median_step_s"]
        if memory:
            row["memory"] = measure_memory(setup, knobs, steps=w + 2)
        rows.append(row)
        print(f"[bench] {name}: ours/TRL median step time = {row['ratio']:.2f}", flush=True)
    env = environment()
    table = format_table(rows)
    print(table)
    if out:
        steps_note = "; ".join(
            f"{r['setup'].name}: {r['ours']['steps']} measured steps each after "
            f"{r['setup'].warmup if warmup is None else warmup} warm-up"
            for r in rows
        )
        text = [
            f"# grpo bench ({knobs.device})",
            "",
            f"Command: `{command}` at commit {_git_commit()}, {time.strftime('%Y-%m-%d')}.",
            "",
            f"Both trainers: same model folder, task (addition; smollm2-lora: data/real/add_small.jsonl through "
            f"the chat template, math_answer, LoRA r 16 / α 32 on every linear layer), prompts per step, "
            f"completions per prompt, "
            f"max_completion_length, β = {knobs.beta}, loss_type = {knobs.loss_type}, learning rate "
            f"{knobs.learning_rate}, seed {knobs.seed}, temperature 1, constant schedule. One process; they "
            f"take turns in blocks of {block} optimizer steps ({steps_note}). Step time: TRL from its "
            f"step-begin to its step-end callback (sampling, scoring, loss, backward, optimizer step); "
            f"ours around `GRPOTrainer.train_step` (the same work). Tokens per second: completion tokens "
            f"of a step over its time, median over steps. Peak memory: one fresh child process per trainer, "
            f"peak RSS above the RSS after imports (CPU) or `torch.cuda.max_memory_allocated` (GPU). "
            f"Log-prob check: max |Δ| between the log-probs our loss uses and a plain forward pass's "
            f"log-softmax, float32.",
            "",
            "Machine and versions: " + ", ".join(f"{k} {v}" for k, v in env.items() if v is not None) + ".",
            "",
            table,
            "",
        ]
        Path(out).parent.mkdir(parents=True, exist_ok=True)
        Path(out).write_text("\n".join(text))
        print(f"[bench] wrote {out}")
    return 0
