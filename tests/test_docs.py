"""The README's config reference is the one generated from the config dataclass."""

from conftest import ROOT
from grpo_core.config_doc import markdown_table


def test_readme_config_reference_is_current():
    assert markdown_table() in (ROOT / "README.md").read_text()


def test_ci_runs_the_readme_test_command():
    readme = (ROOT / "README.md").read_text()
    assert "bash scripts/run-tests.sh" in readme
    assert "bash scripts/run-tests.sh" in (ROOT / ".ci" / "run").read_text()
