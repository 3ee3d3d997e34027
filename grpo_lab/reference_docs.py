"""The documentation's generated pages: the config reference (from GRPOConfig's field docstrings),
the variant axes (from the table in grpo_core/algo/axes.py and its registries) and the CLI reference
(from the `grpo` command's parsers). tests/test_docs.py fails when the
committed pages drift from what this writes.

    .venv/bin/python -m grpo_lab.reference_docs        # rewrites docs/reference/*.md
"""

from __future__ import annotations

import os
from pathlib import Path

DOCS = Path(__file__).resolve().parents[1] / "docs"
WIDTH = "100"  # argparse wraps help to the terminal: a fixed width, so the page is the same everywhere


def config_page() -> str:
    from grpo_core.config.doc import markdown_table

    return (
        "# Config reference\n\n"
        "Every key of `GRPOConfig` (`grpo_core/config/schema.py`), its default and meaning; generated from the dataclass "
        "by `python -m grpo_lab.reference_docs`. A YAML config, `--set key=value`, a sweep spec's `base`, `grid` "
        "and `search`, and `grpo_lab.config(**values)` all take these keys.\n\n" + markdown_table() + "\n"
    )


def axes_page() -> str:
    from grpo_core.algo.axes import STAGES, markdown_table

    return (
        "# Variant axes\n\n"
        "Every variant axis: the config keys that set it, the stage of a step where it acts "
        f"({' → '.join(STAGES)}), its values and the claim it tests. Generated from the table in "
        "`grpo_core/algo/axes.py` by `python -m grpo_lab.reference_docs`: a name registered in a registry "
        "(`grpo_core/util/registry.py`) is an allowed value of its key, and appears here, with no other change. "
        "Keys and values are spelled as TRL spells them where TRL has the axis. The math: "
        "[the GRPO math](../concepts/grpo-math.md).\n\n" + markdown_table()
    )


def cli_page() -> str:
    from .parser import build_parser

    saved = os.environ.get("COLUMNS")
    os.environ["COLUMNS"] = WIDTH
    try:
        parser = build_parser()
        commands = next(a for a in parser._actions if a.__class__.__name__ == "_SubParsersAction")
        helps = {a.dest: a.help for a in commands._choices_actions}
        parts = [
            "# CLI reference\n",
            "The `grpo` command (`grpo_lab/cli.py`), generated from its parsers by "
            "`python -m grpo_lab.reference_docs`. Bad input: one line on stderr naming what is wrong and what is "
            "allowed, exit code 2, nothing written.\n",
        ]
        for name, sub in commands.choices.items():
            parts += [f"## grpo {name}\n", f"{helps.get(name) or ''}\n", "```text", sub.format_help().rstrip(), "```\n"]
        return "\n".join(parts)
    finally:
        if saved is None:
            os.environ.pop("COLUMNS", None)
        else:
            os.environ["COLUMNS"] = saved


PAGES = {"reference/config.md": config_page, "reference/axes.md": axes_page, "reference/cli.md": cli_page}


def main() -> int:
    for name, page in PAGES.items():
        (DOCS / name).parent.mkdir(parents=True, exist_ok=True)
        (DOCS / name).write_text(page())
        print(f"wrote {DOCS / name}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
