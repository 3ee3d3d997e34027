"""The locked versions (requirements/lock-cpu.txt, installed by scripts/bootstrap.sh) are the ones
installed: the report's numbers are bit-reproducible only with the same versions."""

from importlib import metadata

from conftest import ROOT

REPORTED = ("transformers", "accelerate", "datasets", "peft", "optuna", "mlflow", "scipy", "trl")  # provenance.versions


def test_the_installed_versions_are_the_locked_ones():
    pins = {}
    for line in (ROOT / "requirements" / "lock-cpu.txt").read_text().splitlines():
        if line and not line.startswith("#"):
            name, version = line.split("==")
            pins[name.lower().replace("_", "-")] = version
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
    from grpo_core.provenance import versions
    from sweeps.report import Run
    from sweeps.reproduce import versions_warning

    here = ", ".join(f"{k} {v}" for k, v in versions().items())
    same = Run({}, {}, {"versions": here}, [])
    other = Run({}, {}, {"versions": here.replace(f"transformers {versions()['transformers']}", "transformers 5.23.0")}, [])
    assert versions_warning([same]) == ""
    line = versions_warning([same, other])
    assert "transformers 5.23.0" in line and "\n" not in line and "lock-cpu.txt" in line
