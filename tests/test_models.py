"""Models: a Hugging Face model directory (with a chat template) trains like the built-in one."""

from conftest import make_cfg
from grpo_core.tasks.models import build_tiny_model, build_tiny_tokenizer
from grpo_core.trainer import GRPOTrainer

TEMPLATE = "{% for m in messages %}q:{{ m['content'] }}{% endfor %}{% if add_generation_prompt %}a:{% endif %}"


def test_local_model_directory_with_chat_template(tmp_path):
    tok = build_tiny_tokenizer()
    tok.chat_template = TEMPLATE
    build_tiny_model(tok, seed=1).save_pretrained(tmp_path)
    tok.save_pretrained(tmp_path)
    trainer = GRPOTrainer(make_cfg(model=str(tmp_path), reward_funcs=["reward_helpers:negative_length"]))
    ids, _ = trainer._encode(["12+3="])
    assert trainer.tokenizer.decode(ids[0]) == "q:12+3=a:"  # prompt went through the template
    metrics = trainer.optimize(trainer.generate_batch())
    assert metrics["grad_norm"] > 0


def test_tiny_base_model_is_deterministic_and_cached(tmp_path):
    from grpo_core.tasks.models import ensure_tiny_model

    a = ensure_tiny_model(tmp_path / "a", "reverse", 3)
    b = ensure_tiny_model(tmp_path / "b", "reverse", 3)
    assert (a / "model.safetensors").read_bytes() == (b / "model.safetensors").read_bytes()
    mtime = (a / "model.safetensors").stat().st_mtime_ns
    assert ensure_tiny_model(tmp_path / "a", "reverse", 3) == a
    assert (a / "model.safetensors").stat().st_mtime_ns == mtime  # second call reuses the cache
