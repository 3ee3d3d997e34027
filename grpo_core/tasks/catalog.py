"""Built-in verifiable tasks, each with a fixed held-out eval split.

Every row has a `prompt` (plain text, no chat markup) and an `answer` column; the reward
functions get the columns as keyword arguments (TRL's convention). Splits are generated from
fixed seeds, so every run and every machine sees the same train and eval rows.
"""

from __future__ import annotations

import random
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

EVAL_SIZE = 500
_SPLIT_SEED = 1234


@dataclass(frozen=True)
class Task:
    name: str
    description: str
    default_rewards: tuple[str, ...]
    examples: Callable[[], list[tuple[str, str]]]  # every (prompt, answer) of the task, fixed order
    tiny_pretrain_steps: int  # calibrated so the tiny model starts at roughly 20-40% sampled reward
    eval_size: int = EVAL_SIZE

    def splits(self) -> tuple[Split, Split]:
        """(train, eval): eval is a fixed random eval_size rows, disjoint from train, kept in its
        shuffled order so that its first n rows are an unbiased sample for any n."""
        rows = self.examples()
        order = list(range(len(rows)))
        random.Random(_SPLIT_SEED).shuffle(order)
        eval_idx, train_idx = order[: self.eval_size], sorted(order[self.eval_size :])

        def build(idx: list[int]) -> Split:
            return Split({"prompt": [rows[i][0] for i in idx], "answer": [rows[i][1] for i in idx]})

        return build(train_idx), build(eval_idx)


class Split:
    """One split of a task, its rows by column (`prompt`, `answer`), read as a `datasets.Dataset` is
    read: a column by name, a row by position, a dict of columns for a slice or a list of positions.
    The trainer reads no more than that, so a run over a built-in task or a JSON Lines file does not
    import `datasets` (1.2 s of every process). `to_dataset()` gives the `datasets.Dataset` (TRL takes one)."""

    def __init__(self, columns: dict[str, list]):
        self._columns = columns

    def __len__(self) -> int:
        return len(next(iter(self._columns.values())))

    def __getitem__(self, key):
        if isinstance(key, str):
            return list(self._columns[key])
        if isinstance(key, (int, slice)):
            return {name: values[key] for name, values in self._columns.items()}
        return {name: [values[i] for i in key] for name, values in self._columns.items()}

    def __iter__(self):
        return (self[i] for i in range(len(self)))

    def to_dataset(self):
        from datasets import Dataset

        return Dataset.from_dict(self._columns)


def _addition_examples() -> list[tuple[str, str]]:
    # Every pair a, b in [0, 99]: "23+45=" -> "68"
    return [(f"{a}+{b}=", str(a + b)) for a in range(100) for b in range(100)]


def _reverse_examples() -> list[tuple[str, str]]:
    # 20,000 distinct digit strings of length 3-5 (fixed seed): "r:1234=" -> "4321"
    rng = random.Random(_SPLIT_SEED)
    seen: set[str] = set()
    while len(seen) < 20_000:
        n = rng.randint(3, 5)
        seen.add("".join(rng.choice("0123456789") for _ in range(n)))
    return [(f"r:{s}=", s[::-1]) for s in sorted(seen)]


def _repeat_examples() -> list[tuple[str, str]]:
    # 20,000 distinct (unit, k): a 2-4 digit unit written k = 3..9 times, "407*5=" -> "407407407407407".
    # Answers are 6-36 characters long and their length is what the model must get right (claim C5).
    rng = random.Random(_SPLIT_SEED)
    seen: set[tuple[str, int]] = set()
    while len(seen) < 20_000:
        n = rng.randint(2, 4)
        seen.add(("".join(rng.choice("0123456789") for _ in range(n)), rng.randint(3, 9)))
    return [(f"{u}*{k}=", u * k) for u, k in sorted(seen)]


TASKS: dict[str, Task] = {
    "addition": Task(
        name="addition",
        description="two-number addition a+b with a, b in [0, 99]; exact-match reward",
        default_rewards=("exact_match",),
        examples=_addition_examples,
        tiny_pretrain_steps=1200,  # measured: ~23% sampled exact match on train prompts
    ),
    "reverse": Task(
        name="reverse",
        description="reverse a string of 3-5 digits; exact-match reward",
        default_rewards=("exact_match",),
        examples=_reverse_examples,
        tiny_pretrain_steps=75,  # reverse is easy for attention: ~29% sampled, ~51% greedy
    ),
    "repeat": Task(
        name="repeat",
        description="write a 2-4 digit unit k = 3..9 times (answers of 6-36 characters); exact-match reward",
        default_rewards=("exact_match",),
        examples=_repeat_examples,
        tiny_pretrain_steps=2000,  # measured: ~26% sampled exact match on train prompts, 23 ± 9 characters (~3 min)
    ),
}


# ---- your own data ---------------------------------------------------------------------------
DATASET_SUFFIXES = (".jsonl", ".json", ".csv", ".parquet")
DATASET_REWARDS = ("math_answer", "think_answer_format")
_LOADED: dict[str, list[dict]] = {}


def _read_rows(source: str) -> list[dict]:
    """Rows of a local .jsonl/.json/.csv/.parquet file, or of a `datasets` hub dataset's train
    split, read with `datasets.load_dataset`. CSV columns stay strings (type inference would turn
    an answer `007` into `7.0`); a .json file holds a list of rows or {"data": [rows]}."""
    if source in _LOADED:
        return _LOADED[source]

    path = Path(source).expanduser()
    if path.suffix in DATASET_SUFFIXES:
        if not path.is_file():
            raise ValueError(f"no such file {source!r}")
        if path.suffix in (".jsonl", ".json"):  # read as written: datasets casts a column to one type ("2" → 2)
            rows = _read_json_rows(path)
            if not rows or not all(isinstance(r, dict) for r in rows):
                raise ValueError(f"{source!r} holds no rows of named columns")
            _LOADED[source] = rows
            return rows
    from datasets import Features, Value, load_dataset  # CSV, Parquet and the hub
    from datasets.utils.logging import disable_progress_bar

    disable_progress_bar()
    if path.suffix in DATASET_SUFFIXES:
        kind, extra = {".csv": "csv", ".parquet": "parquet"}[path.suffix], {}
        if path.suffix == ".csv":
            import csv

            with open(path, newline="", encoding="utf-8-sig") as f:  # a byte-order mark is not part of a name
                header = next(csv.reader(f), [])
            extra["features"] = Features({name: Value("string") for name in header})
            extra["encoding"] = "utf-8-sig"
        rows = list(load_dataset(kind, data_files=str(path), split="train", keep_in_memory=True, **extra))
    else:
        from grpo_core.tasks.hub import check_hub_reachable

        check_hub_reachable("dataset", source)
        rows = list(load_dataset(source, split="train"))
    if not rows or not all(isinstance(r, dict) for r in rows):
        raise ValueError(f"{source!r} holds no rows of named columns")
    _LOADED[source] = rows
    return rows


def _read_json_rows(path: Path) -> list:
    """A .jsonl file (one JSON object per line) or a .json file (a list of rows, or {"data": rows})."""
    import json

    text = path.read_text(encoding="utf-8-sig")
    if path.suffix == ".json":
        try:
            data = json.loads(text)
        except ValueError as exc:
            raise ValueError(f"not JSON ({exc})") from None
        return data.get("data", []) if isinstance(data, dict) else data
    rows = []
    for n, line in enumerate(text.splitlines(), 1):
        if line.strip():
            try:
                rows.append(json.loads(line))
            except ValueError:
                raise ValueError(f"line {n} is not JSON") from None
    return rows


def _value_kind(value) -> str:
    if isinstance(value, str):
        return "text"
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        return "numbers"
    return {bool: "true/false", list: "lists", dict: "mappings"}.get(type(value), type(value).__name__)


def _first_byte(path) -> bytes:
    """The first byte of a file that is not white space (b"" for a blank file), read without reading
    the whole file; as bytes, so a binary .parquet file reads too."""
    with open(path, "rb") as f:
        while chunk := f.read(4096):
            if chunk.strip():
                return chunk.strip()[:1]
    return b""


def check_dataset_source(source: str) -> None:
    """Without reading it: a local data file (by its suffix) exists; anything else is taken for a
    hub dataset id, which loads (or fails with one line) when the run starts."""
    from grpo_core.util.errors import ConfigError

    path = Path(source).expanduser()
    if path.suffix in DATASET_SUFFIXES and not path.is_file():
        raise ConfigError(
            "dataset",
            f"no such file {source!r}; allowed: a local {'/'.join(DATASET_SUFFIXES)} file or a hub dataset id",
        )
    if path.suffix not in DATASET_SUFFIXES and path.is_file():  # not a hub id: asking the hub took ~30 s of retries
        raise ConfigError(
            "dataset",
            f"{source!r} is a local file of a type grpo does not read "
            f"({path.suffix or 'no suffix'}); allowed: a local {'/'.join(DATASET_SUFFIXES)} "
            f"file, a folder of them, or a hub dataset id",
        )


def load_dataset_rows(source: str, prompt_column: str, answer_column: str) -> list[dict]:
    """The rows, or a one-line ConfigError unless the dataset loads and every row has both columns."""
    from grpo_core.util.errors import ConfigError

    path = Path(source).expanduser()
    if path.suffix in DATASET_SUFFIXES and path.is_file() and not _first_byte(path):
        raise ConfigError("dataset", f"{source!r} is empty; allowed: a file with one row per prompt (two rows or more)")
    try:
        rows = _read_rows(source)
    except ConfigError:
        raise
    except Exception as exc:  # a missing file, malformed JSON, an unreachable hub
        cause = exc.__cause__ or exc  # datasets wraps the reason in "An error occurred while generating the dataset"
        first = str(cause).strip().splitlines()[0][:300] if str(cause).strip() else type(cause).__name__
        raise ConfigError(
            "dataset",
            f"cannot load {source!r}: {first}; allowed: a local "
            f"{'/'.join(DATASET_SUFFIXES)} file or a reachable hub dataset",
        ) from None
    columns = set(rows[0])
    for key, column in (("prompt_column", prompt_column), ("answer_column", answer_column)):
        if column not in columns:
            raise ConfigError(key, f"{source!r} has no column {column!r}; its columns: {', '.join(sorted(columns))}")
        missing = next((i for i, r in enumerate(rows) if r.get(column) is None), None)
        if missing is not None:
            raise ConfigError(
                key,
                f"row {missing + 1} of {source!r} has no {column!r}; allowed: every row with a value for {column!r}",
            )
    for key, column in (("prompt_column", prompt_column), ("answer_column", answer_column)):
        kinds: dict = {}  # kind → its first row
        for i, r in enumerate(rows):
            kinds.setdefault(_value_kind(r[column]), i + 1)
        odd = [k for k in kinds if k not in ("text", "numbers")]
        if odd or len(kinds) > 1:
            seen = ", ".join(f"{k} (row {n})" for k, n in kinds.items())
            raise ConfigError(
                key, f"{column!r} of {source!r} holds {seen}; allowed: one kind per column, all text or all numbers"
            )
    blank = next((i for i, r in enumerate(rows) if not str(r[prompt_column]).strip()), None)
    if blank is not None:  # an empty prompt is no input at all for a model without a chat template
        raise ConfigError(
            "prompt_column",
            f"row {blank + 1} of {source!r} has an empty {prompt_column!r}; allowed: a prompt in every row",
        )
    if len(rows) < 2:  # a run holds rows out for its evaluation and trains on the others
        raise ConfigError(
            "dataset",
            f"{source!r} has {len(rows)} row; allowed: two rows or more (one is held out "
            f"for evaluation, the others are trained on)",
        )
    return rows


def dataset_task(source: str, prompt_column: str, answer_column: str) -> Task:
    """A Task over your rows (`prompt` and `answer` from the given columns); a fixed-seed 10%
    of the rows (at most EVAL_SIZE) is held out."""
    rows = load_dataset_rows(source, prompt_column, answer_column)
    examples = [(str(r[prompt_column]), str(r[answer_column])) for r in rows]
    return Task(
        name=f"dataset:{source}",
        description=f"rows of {source}",
        default_rewards=DATASET_REWARDS,
        examples=lambda: examples,
        tiny_pretrain_steps=0,
        eval_size=max(1, min(EVAL_SIZE, len(rows) // 10)),
    )


def reward_funcs_of(cfg) -> list[str]:
    """The reward functions a run uses: `reward_funcs`, else its task's defaults (a dataset's when
    `dataset` is set); reward_weights line up with these."""
    return list(cfg.reward_funcs) or default_rewards(cfg.dataset, cfg.task)


def default_rewards(dataset, task: str) -> list[str]:
    """The reward functions of a run that names none: a dataset's when it has one, else its task's."""
    return list(DATASET_REWARDS if dataset else get_task(task).default_rewards)


def get_task(name: str) -> Task:
    if name not in TASKS:
        raise ValueError(f"task: unknown value {name!r}; allowed: {', '.join(TASKS)}")
    return TASKS[name]
