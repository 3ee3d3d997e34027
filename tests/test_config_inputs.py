"""validate checks values without reading anything but whether paths exist, and never changes
the config it is given; check_inputs reads what must be read (datasets, reward modules)."""

import pytest

from grpo_core.config.schema import GRPOConfig
from grpo_core.config.validation import check_inputs, validate
from grpo_core.util.errors import ConfigError
from grpo_core.tasks.catalog import dataset_task


def test_validate_reads_no_file_and_leaves_the_config_alone(tmp_path):
    data = tmp_path / "rows.jsonl"
    data.write_text("this is not JSON\n")  # exists: validate is content; reading it would fail
    cfg = GRPOConfig(dataset=str(data), reward_funcs=["not_a_pkg_xyz.mod:f"])
    checked = validate(cfg)
    assert cfg.tiny_pretrain_steps is None  # the given object is untouched
    assert checked.tiny_pretrain_steps == 1200 and checked is not cfg  # the addition task's value, filled in
    with pytest.raises(ConfigError, match="dataset: cannot load"):
        check_inputs(checked)
    with pytest.raises(ConfigError, match="dataset: no such file"):
        validate(GRPOConfig(dataset=str(tmp_path / "missing.csv")))
    # a local file of another type is not a hub id: it was sent to the hub (~30 s of retries offline)
    (tmp_path / "rows.txt").write_text("What is 1+1?\t2\n")
    with pytest.raises(
        ConfigError,
        match=r"rows.txt' is a local file of a type grpo does not read \(.txt\); "
        r"allowed: a local .jsonl/.json/.csv/.parquet file, a folder of them",
    ):
        validate(GRPOConfig(dataset=str(tmp_path / "rows.txt")))


def test_csv_answers_stay_the_strings_written(tmp_path):
    """datasets reads the file; CSV columns are strings, so `007` is not turned into 7.0."""
    data = tmp_path / "rows.csv"
    data.write_text("question,solution\nwhat is 3+4?,007\nhalf of 3?,1.50\n")
    task = dataset_task(str(data), "question", "solution")
    assert sorted(task.examples()) == [("half of 3?", "1.50"), ("what is 3+4?", "007")]
    with pytest.raises(ConfigError, match="answer_column: .* has no column 'answer'"):
        check_inputs(validate(GRPOConfig(dataset=str(data), prompt_column="question")))


def test_json_file_with_a_data_field(tmp_path):
    data = tmp_path / "rows.json"
    data.write_text('{"data": [{"prompt": "1+1=", "answer": 2}, {"prompt": "2+2=", "answer": 4}]}')
    assert sorted(dataset_task(str(data), "prompt", "answer").examples()) == [("1+1=", "2"), ("2+2=", "4")]


def test_a_sweep_checks_its_checkpoint_against_every_grid_point(tmp_path):
    """check_inputs runs once per distinct input, but a checkpoint is compared with the whole
    config: a grid point that differs from the checkpoint's run is refused before anything runs."""
    import yaml

    from sweeps.spec import load_spec

    checkpoint = tmp_path / "run" / "checkpoint-4"
    checkpoint.mkdir(parents=True)
    (checkpoint / "trainer_state.pt").write_bytes(b"")  # only its existence is checked here
    (checkpoint / "config.yaml").write_text(yaml.safe_dump(validate(GRPOConfig(learning_rate=1e-4)).to_dict()))
    spec = tmp_path / "resume.yaml"
    spec.write_text(
        yaml.safe_dump(
            {
                "name": "resume",
                "base": {"resume_from_checkpoint": str(checkpoint)},
                "grid": {"learning_rate": [1e-4, 3e-4]},
                "seeds": [0],
            }
        )
    )
    with pytest.raises(ConfigError, match="checkpoint was written with learning_rate=0.0001"):
        load_spec(spec)


def test_one_rule_splits_the_batch_for_one_process_and_for_several():
    import dataclasses

    from grpo_core.config.validation import batch_split_problem

    cfg = GRPOConfig(prompts_per_step=4, num_generations=4, gradient_accumulation_steps=4)  # 16 completions
    # 1, 2 or 4 processes: 16, 8 or 4 completions each, in 4 equal micro-batches
    assert all(batch_split_problem(cfg, p) is None for p in (1, 2, 4))
    cfg = dataclasses.replace(cfg, gradient_accumulation_steps=16)  # one completion per micro-batch on one process
    assert batch_split_problem(cfg, 1) is None
    assert str(batch_split_problem(cfg, 2)) == (
        "gradient_accumulation_steps: got 16; allowed: a divisor of the "
        "completions of each of 2 processes = 8 completions"
    )
    assert (
        str(batch_split_problem(cfg, 3))
        == "prompts_per_step: 4 does not split over 3 processes; allowed: a multiple of 3"
    )
    with pytest.raises(
        ConfigError,
        match="gradient_accumulation_steps: got 3; allowed: a divisor of the generation "
        "batch prompts_per_step × num_generations = 16 completions",
    ):
        validate(dataclasses.replace(cfg, gradient_accumulation_steps=3))


@pytest.mark.parametrize(
    "text,needle",
    [
        ("", "dataset: '{path}' is empty; allowed: a file with one row per prompt"),
        ("\n  \n", "dataset: '{path}' is empty"),
        ('{"prompt": "1+1=", "answer": 2}\n', "dataset: '{path}' has 1 row; allowed: two rows or more"),
        (
            '{"prompt": "1+1=", "answer": 2}\n{"prompt": "  ", "answer": 4}\n',
            "prompt_column: row 2 of '{path}' has an empty 'prompt'; allowed: a prompt in every row",
        ),
        (
            '{"prompt": "1+1=", "answer": 2}\n{"prompt": "2+2="}\n',
            "answer_column: row 2 of '{path}' has no 'answer'; allowed: every row with a value for 'answer'",
        ),
    ],
)
def test_a_dataset_that_cannot_train_is_refused_by_check_inputs(tmp_path, text, needle):
    """Before a run starts (and before a sweep creates anything): each of these crashed mid-run
    (an empty range in the sampler, a zero-length input in the model) or named a library's error."""
    data = tmp_path / "rows.jsonl"
    data.write_text(text)
    with pytest.raises(ConfigError) as info:
        check_inputs(validate(GRPOConfig(dataset=str(data))))
    assert str(info.value) == needle.format(path=data) or str(info.value).startswith(needle.format(path=data))


def test_a_run_on_your_own_data_is_named_after_the_data_not_the_default_task():
    assert GRPOConfig(dataset="data/real/add_small.jsonl", seed=3).default_run_name().startswith("add_small-grpo-")
    assert GRPOConfig(dataset="org/my data").default_run_name().startswith("my_data-grpo-")
    assert GRPOConfig(task="reverse").default_run_name().startswith("reverse-grpo-")


@pytest.mark.parametrize(
    "rewards,answers,needle",
    [
        (
            ["exact_match"],
            ["4", "   "],
            "exact_match cannot score 1 of the 2 answers of '{path}' (row 2: '   '); "
            "allowed: a non-empty answer in every row",
        ),
        (
            ["last_number"],
            ["4", "four"],
            "last_number cannot score 1 of the 2 answers of '{path}' (row 2: 'four'); allowed: one number",
        ),
        (["last_number"], ["12 345", "x"], "last_number cannot score 2 of the 2 answers"),
    ],
)
def test_a_task_whose_answers_its_reward_cannot_score_is_refused_before_training(tmp_path, rewards, answers, needle):
    """exact_match paid an empty completion 1.0 against an empty answer; last_number paid 0 for ever
    against an answer that is not a number: both trained without a word."""
    import json

    data = tmp_path / "rows.jsonl"
    data.write_text("".join(json.dumps({"prompt": f"q{i}", "answer": a}) + "\n" for i, a in enumerate(answers)))
    with pytest.raises(ConfigError) as info:
        check_inputs(validate(GRPOConfig(dataset=str(data), reward_funcs=rewards)))
    assert str(info.value).startswith("reward_funcs: " + needle.format(path=data))
    # a reward that reads no answer trains on the same rows
    check_inputs(validate(GRPOConfig(dataset=str(data), reward_funcs=["format_digits"])))


def test_last_number_reads_gold_and_completion_by_one_rule():
    from grpo_core.tasks.rewards import last_number, read_number

    # thousands separators (groups of three), decimals and exponents, in both; `1,2345` is 1 and 2345
    assert [read_number(t) for t in ("1,234", " -5.5 ", "1e3", "2.5E-2", "1,23", "12 3", "")] == [
        1234.0,
        -5.5,
        1000.0,
        0.025,
        None,
        None,
        None,
    ]
    completions = ["1,234", "so 1e3", "x 1,2345", "<answer>7</answer> 9", "234"]
    answers = ["1234", "1000", "2345", "7", "1,234"]
    assert last_number(completions, answers) == [1.0, 1.0, 1.0, 1.0, 0.0]  # it read "1,234" as 234 and "1e3" as 3


def test_a_reward_module_outside_the_project_is_not_imported_unless_the_user_trusts_imports(
    tmp_path, monkeypatch, capfd
):
    """A spec is code: `reward_funcs: [module:function]` imported any module on the path and ran its
    top-level code, even when the spec was then refused (`this:nothing` printed the Zen of Python)."""
    from grpo_core.tasks.rewards import TRUST_IMPORTS, resolve_reward

    outside = tmp_path / "elsewhere"
    outside.mkdir()
    ran = tmp_path / "ran"
    (outside / "side_effect_mod.py").write_text(
        f"open({str(ran)!r}, 'w').close()\ndef score(completions, **kw):\n    return [0.0] * len(completions)\n"
    )
    monkeypatch.syspath_prepend(str(outside))
    monkeypatch.delenv(TRUST_IMPORTS, raising=False)
    for name in ("this:nothing", "side_effect_mod:score"):
        with pytest.raises(
            ConfigError,
            match=f"reward_funcs: '{name}' names the module .* outside this project: "
            f"importing it runs its code; allowed: .*{TRUST_IMPORTS}=1",
        ):
            resolve_reward(name)
    assert not ran.exists() and "Beautiful is better" not in capfd.readouterr().out
    with pytest.raises(ConfigError, match="outside this project"):  # a sweep's check of its points refuses it too
        check_inputs(validate(GRPOConfig(reward_funcs=["side_effect_mod:score"])))
    assert not ran.exists()
    monkeypatch.setenv(TRUST_IMPORTS, "1")  # asked for by the user, outside any spec
    assert resolve_reward("side_effect_mod:score")(["a"]) == [0.0] and ran.exists()
    monkeypatch.delenv(TRUST_IMPORTS)
    assert resolve_reward("reward_helpers:held_exact_match")  # the project's own modules need no trust
