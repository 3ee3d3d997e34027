"""Decode rate of the sampler: milliseconds per token step for each KV-cache mode. Figures: results/benchmarks/gpu.md, docs/howto/gpu.md and docs/development/measurements.md.

Samples `--rows` completions of `--tokens` tokens (random weights of the chosen shape, or a
fetched model's folder with `--model`; no row ends early, so every mode decodes the full length)
with `decode` = dynamic, static and, on CUDA, graph; alternates the modes over `--reps`
repetitions and reports the median per-token time of each and the ratio to the dynamic cache.
The first repetition of each mode is a warm-up (CUDA-graph capture, allocator) and is not
counted. `--general` adds the general path (HF's forward per token, which the dynamic cache takes
for a model fast_decode does not know, and for a LoRA-wrapped one: see measurements.md); `--peft`
wraps the model in LoRA adapters as the real runs do; `--head` times the LM head alone on the
same rows. Also checks that every mode samples the same tokens from the same generator. Usage:

    .venv/bin/python benchmarks/decode_rate.py --shape smollm2-135m --device cuda --rows 64 --tokens 128
    .venv/bin/python benchmarks/decode_rate.py --shape tiny --rows 64 --tokens 8       # the CPU testbed
    .venv/bin/python benchmarks/decode_rate.py --model results/local/models/gemma-3-270m --rows 32 \
        --tokens 16 --prompt-length 128 --general --peft --head --threads 1          # a real run's decode
"""

from __future__ import annotations

import argparse
import statistics
import time

import torch

from benchmarks.trl_bench import QWEN2_05B, SMOLLM2_135M
from grpo_core.sampling import fast_decode
from grpo_core.sampling.generation import sample_completions
from grpo_core.tasks.models import build_tiny_tokenizer
from grpo_core.sampling.static_decode import StaticDecoder

SHAPES = {"tiny": None, "smollm2-135m": SMOLLM2_135M, "qwen2-0.5b": QWEN2_05B}


def build(shape: str, device: str, dtype: torch.dtype):
    from transformers import AutoConfig, AutoModelForCausalLM

    from grpo_core.tasks.models import build_tiny_model

    tokenizer = build_tiny_tokenizer(None if SHAPES[shape] is None else SHAPES[shape]["vocab_size"])
    if SHAPES[shape] is None:
        model = build_tiny_model(tokenizer)
    else:
        arch = dict(SHAPES[shape])
        config = AutoConfig.for_model(arch.pop("model_type"), **arch)
        config._attn_implementation = "sdpa"
        torch.manual_seed(0)
        model = AutoModelForCausalLM.from_config(config)
    return model.to(device=device, dtype=dtype).eval(), tokenizer


def load(folder: str):
    """A fetched model (float32, SDPA) and its vocabulary size, for --model."""
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(folder, dtype=torch.float32, attn_implementation="sdpa")
    return model.eval(), model.config.vocab_size


def with_lora(model):
    """LoRA r 16 on every linear layer, as the real specs train; B drawn, so the adapters act."""
    from peft import LoraConfig, get_peft_model

    wrapped = get_peft_model(model, LoraConfig(r=16, lora_alpha=32, target_modules="all-linear", task_type="CAUSAL_LM"))
    with torch.no_grad():
        for name, p in wrapped.named_parameters():
            if "lora_B" in name:
                p.normal_(0, 0.02, generator=torch.Generator().manual_seed(len(name)))
    return wrapped.eval()


def head_time(model, rows: int, reps: int) -> float:
    """Median seconds of the LM head alone on `rows` hidden states (one decode step's head)."""
    head = model.get_output_embeddings()
    hidden = torch.randn(rows, 1, head.in_features, generator=torch.Generator().manual_seed(0))
    times = []
    with torch.inference_mode():
        for _ in range(reps + 3):
            start = time.perf_counter()
            head(hidden)
            times.append(time.perf_counter() - start)
    return statistics.median(times[3:])


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--shape", choices=list(SHAPES), default="smollm2-135m")
    parser.add_argument("--model", help="a fetched model's folder instead of --shape (CPU, float32)")
    parser.add_argument("--general", action="store_true", help="also time HF's forward per token")
    parser.add_argument("--peft", action="store_true", help="LoRA r 16 on every linear layer, as the real runs")
    parser.add_argument("--head", action="store_true", help="also time the LM head alone on the same rows")
    parser.add_argument("--threads", type=int, default=0, help="torch threads (0: torch's default)")
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    parser.add_argument("--rows", type=int, default=64)
    parser.add_argument("--tokens", type=int, default=128)
    parser.add_argument("--prompt-length", type=int, default=48)
    parser.add_argument("--reps", type=int, default=5)
    args = parser.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)
    dtype = torch.bfloat16 if args.device == "cuda" and args.shape != "tiny" and not args.model else torch.float32
    if args.model:
        model, vocab = load(args.model)
        model = model.to(args.device)
    else:
        model, tokenizer = build(args.shape, args.device, dtype)
        vocab = len(tokenizer)
    sampled = with_lora(model) if args.peft else model  # the model the sampler is handed, as in training
    core = sampled.get_base_model() if args.peft else model  # LoRA layers inside: fast_decode can walk it
    gen = torch.Generator(device="cpu").manual_seed(0)
    prompt_ids = torch.randint(4, vocab, (args.rows // 8, args.prompt_length), generator=gen)
    prompt_ids = prompt_ids.repeat_interleave(8, dim=0).to(args.device)  # groups of 8, as in training
    prompt_mask = torch.ones_like(prompt_ids)
    modes = {"dynamic": None, "static": StaticDecoder(core)}
    if args.general:
        modes["general"] = None
    if args.device == "cuda":
        modes["graph"] = StaticDecoder(core, use_graph=True)
    times: dict[str, list[float]] = {m: [] for m in modes}
    tokens: dict[str, torch.Tensor] = {}
    lean = fast_decode.supports
    for rep in range(args.reps + 1):
        for mode, decoder in modes.items():
            fast_decode.supports = (lambda m: False) if mode == "general" else lean  # type: ignore[assignment]
            generator = torch.Generator(device=args.device).manual_seed(1)
            if args.device == "cuda":
                torch.cuda.synchronize()
            start = time.perf_counter()
            ids, mask = sample_completions(
                sampled if mode == "general" else core,
                prompt_ids,
                prompt_mask,
                max_new_tokens=args.tokens,
                eos_token_id=-1,
                pad_token_id=0,
                temperature=1.0,
                top_p=1.0,
                top_k=0,
                generator=generator,
                group_size=8,
                decoder=decoder,
                check_every=8 if mode == "graph" else 1,
            )
            if args.device == "cuda":
                torch.cuda.synchronize()
            if rep:
                times[mode].append((time.perf_counter() - start) / ids.shape[1])
            tokens[mode] = ids.cpu()
    fast_decode.supports = lean  # type: ignore[assignment]
    print(
        f"decode: {args.model or args.shape}{' with LoRA' if args.peft else ''}, threads {torch.get_num_threads()}, {args.rows} rows × {args.tokens} tokens, prompt {args.prompt_length}, "
        f"{args.device} {dtype}, torch {torch.__version__}"
        + (f", {torch.cuda.get_device_name()}" if args.device == "cuda" else "")
    )
    base = statistics.median(times["dynamic"])
    for mode, values in times.items():
        med = statistics.median(values)
        same = torch.equal(tokens[mode], tokens["dynamic"])
        print(
            f"  {mode:8s} median {med * 1e3:7.3f} ms per token step  (×{med / base:.2f} of dynamic; "
            f"tokens {'identical' if same else 'DIFFER'} to dynamic)"
        )
    if args.head:
        head = head_time(core, args.rows, args.reps * 4)
        print(f"  LM head alone on {args.rows} rows: median {head * 1e3:7.3f} ms ({head / base:.0%} of a dynamic step)")


if __name__ == "__main__":
    main()
