"""Decode rate of the sampler: milliseconds per token step for each KV-cache mode. Figures: results/benchmarks/gpu.md and docs/howto/gpu.md.

Samples `--rows` completions of `--tokens` tokens (random weights of the chosen shape, so no
row ends early and every mode decodes the full length) with `decode` = dynamic, static and, on
CUDA, graph; alternates the modes over `--reps` repetitions and reports the median per-token
time of each and the ratio to the dynamic cache. The first repetition of each mode is a
warm-up (CUDA-graph capture, allocator) and is not counted. Also checks that every mode samples
the same tokens from the same generator. Usage:

    .venv/bin/python benchmarks/decode_rate.py --shape smollm2-135m --device cuda --rows 64 --tokens 128
    .venv/bin/python benchmarks/decode_rate.py --shape tiny --rows 64 --tokens 8       # the CPU testbed
"""

from __future__ import annotations

import argparse
import statistics
import time

import torch

from benchmarks.trl_bench import QWEN2_05B, SMOLLM2_135M
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


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--shape", choices=list(SHAPES), default="smollm2-135m")
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    parser.add_argument("--rows", type=int, default=64)
    parser.add_argument("--tokens", type=int, default=128)
    parser.add_argument("--prompt-length", type=int, default=48)
    parser.add_argument("--reps", type=int, default=5)
    args = parser.parse_args()
    dtype = torch.bfloat16 if args.device == "cuda" and args.shape != "tiny" else torch.float32
    model, tokenizer = build(args.shape, args.device, dtype)
    gen = torch.Generator(device="cpu").manual_seed(0)
    prompt_ids = torch.randint(4, len(tokenizer), (args.rows // 8, args.prompt_length), generator=gen)
    prompt_ids = prompt_ids.repeat_interleave(8, dim=0).to(args.device)  # groups of 8, as in training
    prompt_mask = torch.ones_like(prompt_ids)
    modes = {"dynamic": None, "static": StaticDecoder(model)}
    if args.device == "cuda":
        modes["graph"] = StaticDecoder(model, use_graph=True)
    times: dict[str, list[float]] = {m: [] for m in modes}
    tokens: dict[str, torch.Tensor] = {}
    for rep in range(args.reps + 1):
        for mode, decoder in modes.items():
            generator = torch.Generator(device=args.device).manual_seed(1)
            if args.device == "cuda":
                torch.cuda.synchronize()
            start = time.perf_counter()
            ids, mask = sample_completions(
                model,
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
    print(
        f"decode: {args.shape}, {args.rows} rows × {args.tokens} tokens, prompt {args.prompt_length}, "
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


if __name__ == "__main__":
    main()
