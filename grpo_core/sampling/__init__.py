"""Sampling completions: generation with a KV cache (generation), the packed shared-prompt and
static decoders (fast_decode, static_decode), and the generation batch the steps consume (batch).
Imports nothing from grpo_core."""
