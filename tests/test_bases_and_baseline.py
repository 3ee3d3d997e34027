"""One base everywhere (committed weights checked against BASES.json) and a baseline measured
where the training reward is measured, with a standard error ≤ δ/4."""

import shutil

import pytest

from conftest import make_cfg
from grpo_core.tasks import models
from grpo_core.util.errors import UserInputError
from grpo_core.tasks.models import committed_base, committed_bases, resolve_model_path, weights_sha256
from grpo_core.tasks.catalog import TASKS
from grpo_core.trainer import GRPOTrainer


@pytest.mark.parametrize("task", sorted(TASKS))
def test_committed_base_matches_its_recorded_checksum(task):
    entry = committed_bases()[task]
    assert entry["pretrain_steps"] == TASKS[task].tiny_pretrain_steps
    folder = models.COMMITTED_BASES / task
    assert weights_sha256(folder) == entry["sha256"]
    # the default tiny model of every task is that committed folder, not a locally pretrained one
    assert resolve_model_path("tiny", "unused-cache", task, TASKS[task].tiny_pretrain_steps) == str(folder)


def test_a_base_that_differs_from_its_checksum_is_refused(tmp_path, monkeypatch):
    shutil.copytree(models.COMMITTED_BASES, tmp_path / "bases")
    monkeypatch.setattr(models, "COMMITTED_BASES", tmp_path / "bases")
    weights = tmp_path / "bases" / "reverse" / "model.safetensors"
    data = bytearray(weights.read_bytes())
    data[-1] ^= 1  # one bit of one weight
    weights.write_bytes(bytes(data))
    with pytest.raises(UserInputError, match="reverse.*SHA-256"):
        committed_base("reverse", TASKS["reverse"].tiny_pretrain_steps)
    assert committed_base("reverse", 3) is None  # other pretraining steps: built and cached here instead


def test_baseline_uses_training_prompts_and_reaches_its_standard_error(tmp_path, monkeypatch):
    trainer = GRPOTrainer(make_cfg(task="addition", baseline_prompts=64, cache_dir=str(tmp_path)))
    seen = []
    original = trainer._mean_rewards

    def record(rows, repeat, greedy, generator):
        seen.extend(rows["prompt"])
        assert repeat == trainer.cfg.num_generations and not greedy  # the training sampler, G samples each
        return original(rows, repeat, greedy, generator)

    monkeypatch.setattr(trainer, "_mean_rewards", record)
    result = trainer.baseline_reward()
    train, held_out = set(trainer.train_set["prompt"]), set(trainer.eval_set["prompt"])
    assert seen and all(p in train for p in seen) and not any(p in held_out for p in seen)
    assert result["baseline_prompts_used"] == len(seen) > 64  # 64 prompts were not enough for δ/4
    assert result["baseline_reward_se"] <= 0.05 / 4
    # computed once per setting: a second trainer reads it back without sampling
    again = GRPOTrainer(make_cfg(task="addition", baseline_prompts=64, cache_dir=str(tmp_path)))
    monkeypatch.setattr(again, "_mean_rewards", lambda *a: pytest.fail("the cached baseline was recomputed"))
    assert again.baseline_reward() == result
    # the baseline does not depend on the run's seed: every variant and seed shares the threshold
    other = GRPOTrainer(make_cfg(task="addition", baseline_prompts=64, cache_dir=str(tmp_path / "fresh"), seed=7))
    assert other.baseline_reward() == result


def test_a_data_files_baseline_is_cached_by_its_content(tmp_path, monkeypatch):
    rows = tmp_path / "rows.jsonl"
    rows.write_text("".join(f'{{"prompt": "{a}+{b}=", "answer": "{a + b}"}}\n' for a in range(20) for b in range(5)))
    settings = dict(
        task="addition",
        dataset=str(rows),
        reward_funcs=["exact_match"],
        baseline_prompts=8,
        stl_delta=0.5,
        cache_dir=str(tmp_path / "cache"),
    )
    first = GRPOTrainer(make_cfg(**settings)).baseline_reward()
    assert len(list((tmp_path / "cache" / "baselines").glob("dataset-*.json"))) == 1
    again = GRPOTrainer(make_cfg(**settings, seed=5))  # every seed of the file's runs shares it
    monkeypatch.setattr(again, "_mean_rewards", lambda *a: pytest.fail("the cached baseline was recomputed"))
    assert again.baseline_reward() == first
    rows.write_text(rows.read_text().replace('"answer": "0"', '"answer": "9"'))  # an edited file: measured again
    edited = GRPOTrainer(make_cfg(**settings))
    calls = []
    original = edited._mean_rewards
    monkeypatch.setattr(edited, "_mean_rewards", lambda *a: calls.append(1) or original(*a))
    edited.baseline_reward()
    assert calls and len(list((tmp_path / "cache" / "baselines").glob("dataset-*.json"))) == 2
