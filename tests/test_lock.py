"""The locked versions (requirements/lock-cpu.txt, installed by scripts/bootstrap.sh) are the ones
installed: the report's numbers are bit-reproducible only with the same versions."""

from importlib import metadata

from conftest import ROOT

REPORTED = ("transformers", "accelerate", "datasets", "peft", "optuna", "mlflow", "scipy", "trl")  # provenance.versions


def test_the_installed_versions_are_the_locked_ones():
    pins = _pins()
    assert all(name in pins for name in REPORTED)
    differ = {name: (metadata.version(name), pins[name]) for name in REPORTED if metadata.version(name) != pins[name]}
    assert not differ, f"installed vs locked: {differ} (scripts/bootstrap.sh installs the lock)"
    # every locked package is installed at its locked version
    wrong = {}
    for name, version in pins.items():
        try:
            installed = metadata.version(name)
        except metadata.PackageNotFoundError:
            installed = None
        if installed != version:
            wrong[name] = (installed, version)
    assert not wrong, wrong
    assert metadata.version("torch").split("+")[0] == "2.13.0"


def test_reproduce_warns_in_one_line_when_runs_were_made_with_other_versions():
    from grpo_core.record.provenance import versions
    from sweeps.deciding.runs import Run
    from sweeps.reporting.summary import versions_warning

    here = ", ".join(f"{k} {v}" for k, v in versions().items())
    same = Run({}, {}, {"versions": here}, [])
    other = Run(
        {}, {}, {"versions": here.replace(f"transformers {versions()['transformers']}", "transformers 5.23.0")}, []
    )
    assert versions_warning([same]) == ""
    line = versions_warning([same, other])
    assert "transformers 5.23.0" in line and "\n" not in line and "lock-cpu.txt" in line


UNLOCKED = {"torch", "setuptools", "pip"}  # installed before the lock: torch's own step, the venv's tools


def _pins() -> dict[str, str]:
    pins = {}
    for line in (ROOT / "requirements" / "lock-cpu.txt").read_text().splitlines():
        if line and not line.startswith("#"):
            name, version = line.split("==")
            pins[_norm(name)] = version
    return pins


def _norm(name: str) -> str:
    return name.lower().replace("_", "-").replace(".", "-")


def test_the_lock_holds_everything_the_project_and_its_extras_need():
    """scripts/bootstrap.sh installs the lock with --no-deps (no resolver pass: the lock is the
    resolution), then `pip check`. pip check does not follow the extras asked for (`.[dev,bench]`,
    `mkdocstrings[python]`): this walks grpo-lab's requirements with its extras, and theirs, and
    requires every one installed at a version its specifier allows, and locked (UNLOCKED aside)."""
    from packaging.requirements import Requirement

    pins, seen, missing, wrong = _pins(), set(), [], []
    todo = [("grpo-lab", ("dev", "bench"))]
    while todo:
        name, extras = todo.pop()
        for text in metadata.requires(name) or []:
            req = Requirement(text)
            if req.marker is not None and not any(req.marker.evaluate({"extra": e}) for e in ("", *extras)):
                continue
            key = (_norm(req.name), tuple(sorted(req.extras)))
            if key in seen:
                continue
            seen.add(key)
            try:
                installed = metadata.version(req.name)
            except metadata.PackageNotFoundError:
                missing.append(f"{req} (needed by {name})")
                continue
            if not req.specifier.contains(installed.split("+")[0], prereleases=True):
                wrong.append(f"{req.name} {installed} does not meet {req} (needed by {name})")
            if _norm(req.name) not in pins and _norm(req.name) not in UNLOCKED:
                missing.append(f"{req.name} not in requirements/lock-cpu.txt (needed by {name})")
            todo.append((req.name, tuple(req.extras)))
    assert not missing and not wrong, missing + wrong
    assert len(seen) > 50  # the walk went past the project's own list
