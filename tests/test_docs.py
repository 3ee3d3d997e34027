"""The documentation: the generated references match the code, the site builds with no broken
link (mkdocs build --strict), the README stays a short entry point, and CI runs its test command."""

import os
import subprocess

import pytest
import sys
from pathlib import Path

from conftest import ROOT


def test_generated_reference_pages_are_current():
    # the config reference from GRPOConfig's docstrings, the CLI reference from the parsers:
    # a key or flag added without regenerating (python -m grpo_lab.reference_docs) fails here
    from grpo_lab.reference_docs import DOCS, PAGES

    for name, page in PAGES.items():
        assert (DOCS / name).read_text() == page(), f"docs/{name} is stale: run python -m grpo_lab.reference_docs"


@pytest.fixture(scope="module")
def site(tmp_path_factory):
    """The documentation site, built once for this module's tests (strictly: a warning fails it)."""
    out = tmp_path_factory.mktemp("site")
    mkdocs = Path(sys.executable).with_name("mkdocs")
    res = subprocess.run(
        [str(mkdocs), "build", "--strict", "-d", str(out)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        env={**os.environ, "NO_MKDOCS_2_WARNING": "1"},
    )
    assert res.returncode == 0, res.stderr[-3000:]
    return out


def test_the_documentation_site_builds_strictly(site):
    api = (site / "reference" / "api" / "index.html").read_text()
    assert "grpo_lab.api.train" in api or "def train" in api or "train(" in api  # mkdocstrings rendered the API
    assert (site / "reference" / "config" / "index.html").is_file()


# where the results page's figure and first table sit once the page is drawn (None until the document and
# the figure have loaded: on a busy machine the figure loaded while the table had its header row only)
FIRST_SCREEN = """(() => { const img = document.querySelector('article img'), table = document.querySelector('article table');
  if (document.readyState !== 'complete' || !img || !table || !img.complete || !img.naturalHeight) return null;
  const i = img.getBoundingClientRect(), t = table.getBoundingClientRect();
  return {figure_top: i.top, figure_bottom: i.bottom, table_top: t.top, rows: table.rows.length,
          height: window.innerHeight, width: window.innerWidth}; })()"""


def test_the_results_page_opens_on_the_figure_and_the_table(site, tmp_path):
    """docs/results.md as the site renders it, in a headless browser at 1400×900: the first screen
    shows the whole forest plot and the start of the per-claim table under it."""
    from browser import chromium, evaluate

    shot = ROOT / "results" / "local" / "test-artifacts" / "results-first-screen.png"
    shot.parent.mkdir(parents=True, exist_ok=True)
    found = evaluate(
        chromium(),
        (site / "results" / "index.html").as_uri(),
        tmp_path / "profile",
        FIRST_SCREEN,
        shot,
        timeout=60,
        size="1400,900",
    )
    assert found is not None, "the results page drew no figure or no table"
    assert found["width"] == 1400 and found["rows"] > 5
    assert 0 <= found["figure_top"] < found["figure_bottom"] <= found["height"], found  # the whole figure
    assert found["figure_bottom"] <= found["table_top"] < found["height"] - 60, found  # and the table's start


def test_readme_is_a_short_entry_point_whose_links_resolve():
    import re

    readme = (ROOT / "README.md").read_text()
    assert len(readme.splitlines()) <= 250
    for target in re.findall(r"\]\(([^)#]+)", readme):
        assert (ROOT / target).exists(), target


def test_ci_runs_the_readme_test_command():
    readme = (ROOT / "README.md").read_text()
    assert "bash scripts/run-tests.sh" in readme
    assert "bash scripts/run-tests.sh" in (ROOT / ".ci" / "run").read_text()


def test_the_layout_page_names_every_module():
    """docs/development/layout.md is where a newcomer finds a module: each one is named there, the
    library's by its wing (`config/`) and its name within it."""
    import re

    page = (ROOT / "docs" / "development" / "layout.md").read_text()
    modules = [
        p
        for package in ("grpo_lab", "sweeps", "benchmarks", "grpo_peer")
        for p in (ROOT / package).rglob("*.py")
        if p.name not in ("__init__.py", "__main__.py")
    ]  # sweeps' wings included
    library = [p for p in (ROOT / "grpo_core").rglob("*.py") if p.name != "__init__.py"]
    assert len(modules) >= 25 and len(library) >= 35  # the five packages, found
    assert [str(p.relative_to(ROOT)) for p in modules if f"`{p.name}`" not in page] == []
    wings = {p.parent.name for p in library if p.parent.name != "grpo_core"}
    assert sorted(wings) == ["algo", "config", "record", "sampling", "tasks", "util"]
    assert [w for w in wings if f"\n{w}/ " not in page] == []
    assert [str(p.relative_to(ROOT)) for p in library if not re.search(rf"\b{p.stem}\b", page)] == []


def test_nothing_local_is_tracked():
    """The local stores, caches, fetched models and the virtual environment never enter the
    repository, as a folder or as a link to one (a committed link to results/local once replaced
    a checkout's own folder on the next merge)."""
    import subprocess

    tracked = subprocess.run(
        ["git", "ls-files", "results/local", ".venv", "results/local/*"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=True,
    ).stdout.split()
    assert tracked == []


def test_the_project_speaks_only_of_itself():
    """Code, docs, tests and results describe grpo-lab: no file outside the committed run folders
    names a file that is not in this repository (a claims or spec document beside it), a path of the
    machine it was written on, or an issue of its own tracker by number (upstream ones, `TRL issue
    #2995`, carry their project's name and a `#`). The run folders record what made them, as is."""
    import re

    names = subprocess.run(
        ["git", "ls-files"], cwd=ROOT, capture_output=True, text=True, check=True
    ).stdout.splitlines()
    pattern = re.compile(r"\b(?:CLAIMS|SPEC|STYLE)\.md\b|/work/|\.\./shared\b|\b[Ii]ssues? \d+\b")
    found = []
    for name in names:
        if re.match(r"results/real/(?:[^/]+/)?runs/", name) or name == "tests/test_docs.py":
            continue
        try:
            text = (ROOT / name).read_text()
        except (UnicodeDecodeError, FileNotFoundError, IsADirectoryError):
            continue
        found += [
            f"{name}:{n}: {line.strip()[:120]}" for n, line in enumerate(text.splitlines(), 1) if pattern.search(line)
        ]
    assert not found, "\n".join(found)
