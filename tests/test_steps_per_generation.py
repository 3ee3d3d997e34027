"""steps_per_generation (TRL's): one generation batch of k × prompts_per_step prompts feeds k
optimizer steps, one slice of whole groups each; the advantages are computed over the whole
batch, the later steps are off-policy, dapo divides by the batch's tokens ÷ k (TRL's rescaling)."""

import dataclasses
import shutil

import pytest
import torch

from conftest import make_cfg, run_grpo_here
from grpo_core.run import read_metrics, run_training
from grpo_core.trainer import GRPOTrainer


def _counting(trainer):
    calls = []
    original = trainer.generate_batch
    trainer.generate_batch = lambda: calls.append(trainer.step + 1) or original()
    return calls


def test_one_generation_batch_feeds_k_steps_then_a_new_one_is_sampled():
    cfg = make_cfg(
        prompts_per_step=2,
        num_generations=4,
        gradient_accumulation_steps=2,
        steps_per_generation=4,
        max_steps=4,
        learning_rate=3e-2,
        seed=1,
    )
    assert (cfg.steps_per_batch, cfg.reuse_steps, cfg.completions_per_step) == (2, 2, 8)
    trainer = GRPOTrainer(cfg)
    calls = _counting(trainer)
    steps = []
    trainer.train(on_step=steps.append)
    assert calls == [1, 3]  # sampled at steps 1 and 3, each batch feeding two steps
    assert trainer._batch.completion_ids.shape[0] == 16  # 2 slices × 2 prompts × 4 completions
    assert trainer._batch.old_logps is not None  # the second slice is off-policy: stored sampling log-probs
    assert steps[0]["clip_ratio"] == 0.0  # before any update the ratio is exactly 1
    assert steps[1]["reward"] == steps[0]["reward"]  # the generation batch's metrics, logged at both of its steps


def test_each_step_trains_on_its_own_slice():
    # advantages zero on slice 0 and nonzero on slice 1: the first step has no policy gradient, the second has
    cfg = make_cfg(
        prompts_per_step=2,
        num_generations=4,
        steps_per_generation=2,
        loss_type="dapo",
        max_steps=2,
        max_grad_norm=0.0,
        seed=3,
    )
    trainer = GRPOTrainer(cfg)
    batch = trainer.generate_batch()
    B = trainer.local_batch
    assert batch.advantages.shape == (2 * B,)
    advantages = torch.cat([torch.zeros(B), torch.linspace(-1, 1, B)])
    batch = dataclasses.replace(batch, advantages=advantages)
    first = trainer.optimize(batch, 0)
    assert first["loss"] == 0.0 and first["grad_norm"] == 0.0
    second = trainer.optimize(batch, 1)
    assert second["grad_norm"] > 0
    # the first step's zero gradient left the weights (no weight decay), so the ratio to the stored
    # old log-probs is 1 and dapo's policy term is −Σ A·(tokens) over the slice ÷ (the batch's tokens ÷ k)
    # (TRL: num_items_in_batch × gradient_accumulation_steps / steps_per_generation)
    mask = batch.loss_mask[B:].float()
    expected = -(advantages[B:].unsqueeze(1) * mask).sum() / (batch.loss_mask.sum().float() / 2)
    assert second["policy_loss"] == pytest.approx(float(expected), rel=1e-5)


def test_k_of_one_is_the_default_and_changes_nothing():
    base = dict(max_steps=3, seed=5, gradient_accumulation_steps=2, beta=0.04, zero_variance_groups="drop")
    a = GRPOTrainer(make_cfg(**base))
    b = GRPOTrainer(make_cfg(**base, steps_per_generation=2))
    sa, sb = [], []
    a.train(on_step=sa.append)
    b.train(on_step=sb.append)
    drop = ("step_time", "tokens_per_second")
    assert [{k: v for k, v in s.items() if k not in drop} for s in sa] == [
        {k: v for k, v in s.items() if k not in drop} for s in sb
    ]


def test_counts_per_step_add_up_to_the_generation_batch(tmp_path):
    cfg = make_cfg(
        prompts_per_step=2,
        num_generations=4,
        steps_per_generation=2,
        max_steps=4,
        zero_variance_groups="resample",
        max_num_gen_batches=2,
        seed=2,
        log_completions=True,
        log_completions_per_step=0,
    )
    run_training(cfg, tmp_path / "run", progress=False)
    metrics = read_metrics(tmp_path / "run" / "metrics.jsonl")
    for first, second in (metrics[0:2], metrics[2:4]):  # one generation batch each
        assert first["completions/generated"] == second["completions/generated"]
        assert first["completions/generated"] * 2 in (16.0, 32.0)  # one or two rounds of 2 × 2 prompts × 4
    rows = read_metrics(tmp_path / "run" / "completions.jsonl")
    assert sorted({r["step"] for r in rows}) == [1, 3]  # written once, at the step that sampled them
    assert len([r for r in rows if r["step"] == 1]) == 16  # the whole generation batch


def test_resume_between_two_slices_matches_an_uninterrupted_run(tmp_path):
    # k = 2, μ = 2: steps 1-4 consume one generation batch (slices 0, 1, 0, 1); the checkpoint at
    # step 3 falls inside it, and step 4 must train on slice 1 of the restored batch
    values = dict(
        max_steps=4, save_steps=3, steps_per_generation=2, num_iterations=2, beta=0.04, seed=4, advantage_noise_std=0.01
    )
    run_training(make_cfg(**values), tmp_path / "ref", progress=False)
    shutil.copytree(tmp_path / "ref" / "checkpoint-3", tmp_path / "ckpt" / "checkpoint-3")
    shutil.copy(tmp_path / "ref" / "metrics.jsonl", tmp_path / "ckpt" / "metrics.jsonl")
    resumed = make_cfg(**values, resume_from_checkpoint=str(tmp_path / "ckpt" / "checkpoint-3"))
    run_training(resumed, tmp_path / "resumed", progress=False)
    drop = ("step_time", "tokens_per_second", "time")
    clean = lambda rows: [{k: v for k, v in r.items() if k not in drop} for r in rows]  # noqa: E731
    assert clean(read_metrics(tmp_path / "resumed" / "metrics.jsonl")) == clean(
        read_metrics(tmp_path / "ref" / "metrics.jsonl")
    )


@pytest.mark.parametrize("value", ["3", "0", "-2"])
def test_steps_per_generation_not_a_multiple_of_accumulation_is_one_line_exit_2(tmp_path, value):
    r = run_grpo_here(
        "train",
        "--no-mlflow",
        "--out",
        str(tmp_path / "run"),
        "--set",
        "gradient_accumulation_steps=2",
        "--set",
        f"steps_per_generation={value}",
    )
    assert r.returncode == 2
    assert r.stderr.strip().count("\n") == 0 and "steps_per_generation" in r.stderr
    assert "a multiple of gradient_accumulation_steps (2)" in r.stderr
    assert not (tmp_path / "run").exists()


def test_a_steps_slice_is_every_processs_share_of_that_step():
    # on P processes the gathered batch is process-major: each process's k slices in turn
    from types import SimpleNamespace

    fake = SimpleNamespace(cfg=SimpleNamespace(steps_per_batch=2), num_processes=2)
    parts = GRPOTrainer._slices(fake, torch.arange(8), 2)  # process 0: slices [0 1] [2 3]; process 1: [4 5] [6 7]
    assert [p.tolist() for p in parts] == [[0, 1, 4, 5], [2, 3, 6, 7]]
