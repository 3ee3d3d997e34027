"""The README's config reference, generated from GRPOConfig's field docstrings."""

from __future__ import annotations

import ast
import dataclasses
import inspect

from grpo_core.config.schema import GRPOConfig


def field_docs() -> dict[str, str]:
    """Map field name -> the docstring written under it in config.py."""
    tree = ast.parse(inspect.getsource(GRPOConfig))
    body = tree.body[0].body
    docs = {}
    for node, nxt in zip(body, body[1:]):
        if isinstance(node, ast.AnnAssign) and isinstance(nxt, ast.Expr) and isinstance(nxt.value, ast.Constant):
            docs[node.target.id] = " ".join(str(nxt.value.value).split())
    return docs


def markdown_table() -> str:
    docs = field_docs()
    rows = ["| key | default | meaning |", "|---|---|---|"]
    for f in dataclasses.fields(GRPOConfig):
        default = f.default if f.default is not dataclasses.MISSING else f.default_factory()
        rows.append(f"| `{f.name}` | `{default!r}` | {docs[f.name].replace('|', '/')} |")
    return "\n".join(rows)


if __name__ == "__main__":
    print(markdown_table())
