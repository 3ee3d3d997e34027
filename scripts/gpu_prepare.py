"""Prepare what travels to a lent GPU machine, and fit each transfer under its 64 MiB (issue 23).

    python3 scripts/gpu_prepare.py            # ../shared/gpu/prepare.sh, then trim and check
    python3 scripts/gpu_prepare.py --check    # only trim and check an existing .gpu/

Every call to the device machine sends the working tree (tracked and untracked-not-ignored files)
with the folders it carries, 64 MiB in all (/work/.library/device/README.md, "Limits").
`../shared/gpu/prepare.sh` writes `.gpu/whl/`, a wheel of every package in `.venv` that the GPU
image lacks: on 2026-11-24, 61.3 MB of wheels beside 8.1 MB of tree, over the limit, so the first
call (`install`) would have been refused. This script

1. runs prepare.sh (creating `.git/info/`, which it writes to and some checkouts lack);
2. removes from `.gpu/whl/` the wheels of NOT_NEEDED: nothing the GPU agenda runs imports them
   (`tests/test_gpu_agenda.py` runs the agenda's dry run with these modules made unimportable);
3. if the install call is still over the limit, moves the largest wheels to `.gpu/whl2/`, which
   one more call installs (printed);
4. prints every call in order with its size and what it leaves to spare; exit 1 if one cannot fit.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
GPU = ROOT / ".gpu"
LIMIT = 64 * 2**20  # what one call may send: working tree + carried folders
HEADROOM = 2**20  # kept free: the tree grows between this check and the call
# distribution (as in a wheel's file name) -> (the module it provides, why the GPU machine never imports it)
NOT_NEEDED = {
    "grimp": ("grimp", "import-linter's graph builder (tests/test_layers.py)"),
    "import_linter": ("importlinter", "the layering contract of pyproject.toml, a test"),
    "pyflakes": ("pyflakes", "a linter"),
    "docker": ("docker", "MLflow's model serving in containers"),
    "skops": ("skops", "MLflow's scikit-learn flavour"),
    "prettytable": ("prettytable", "only skops uses it"),
    "wcwidth": ("wcwidth", "only prettytable uses it"),
    "gunicorn": ("gunicorn", "the MLflow server's HTTP workers (`grpo ui`, not run there)"),
    "huey": ("huey", "the MLflow server's job runner"),
    "graphene": ("graphene", "the MLflow server's GraphQL API"),
    "graphql_core": ("graphql", "the MLflow server's GraphQL API"),
    "graphql_relay": ("graphql_relay", "the MLflow server's GraphQL API"),
    # the documentation site's toolchain (tests/test_docs.py): nothing run there builds the docs
    "mkdocs": ("mkdocs", "the documentation site's builder"),
    "mkdocs_material": ("material", "the documentation site's theme"),
    "mkdocs_material_extensions": ("materialx", "the documentation site's theme"),
    "mkdocstrings": ("mkdocstrings", "the documentation's API pages"),
    "mkdocstrings_python": ("mkdocstrings_handlers", "the documentation's API pages"),
    "mkdocs_autorefs": ("mkdocs_autorefs", "the documentation's cross-references"),
    "mkdocs_get_deps": ("mkdocs_get_deps", "mkdocs's plugin resolver"),
    "griffelib": ("griffe", "mkdocstrings' source reader"),
    "pymdown_extensions": ("pymdownx", "the documentation's Markdown extensions"),
    "babel": ("babel", "the documentation theme's translations"),
    "backrefs": ("backrefs", "the documentation theme's search"),
    "paginate": ("paginate", "the documentation theme"),
    "ghp_import": ("ghp_import", "mkdocs gh-deploy"),
    "pyyaml_env_tag": ("yaml_env_tag", "mkdocs's config"),
    "mergedeep": ("mergedeep", "mkdocs's config"),
    "watchdog": ("watchdog", "mkdocs serve"),
}
INSTALL2 = ("python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade "
            "--target /tmp/site .gpu/whl2/*.whl && . .gpu/bin/on-device.sh env")


def dist_name(wheel: str) -> str:
    return wheel.split("-", 1)[0].lower()


def tree_bytes(root: Path = ROOT) -> int:
    """What every call sends besides its carried folders: tracked and untracked-not-ignored files."""
    listed = subprocess.run(["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"], cwd=root,
                            capture_output=True, check=True).stdout.decode().split("\0")
    files = {root / name for name in listed if name}
    if (root / "shared").is_dir():  # a shared/ inside the checkout travels too
        files |= {p for p in (root / "shared").rglob("*") if p.is_file()}
    return sum(p.stat().st_size for p in files if p.is_file() and not p.is_symlink())


def folder_bytes(folder: Path) -> int:
    return sum(p.stat().st_size for p in folder.rglob("*") if p.is_file()) if folder.is_dir() else 0


def split_wheels(tree: int, carried: int, wheels: dict[str, int], limit: int = LIMIT,
                 headroom: int = HEADROOM) -> tuple[list[str], list[str]]:
    """The wheels of the install call and those of a second call: the largest leave the first until
    tree + carried + first fits in limit - headroom. ValueError when the second does not fit either."""
    first = sorted(wheels, key=lambda w: (-wheels[w], w))
    second: list[str] = []
    while first and tree + carried + sum(wheels[w] for w in first) > limit - headroom:
        second.append(first.pop(0))
    if tree + carried + sum(wheels[w] for w in second) > limit - headroom:
        raise ValueError(f"the wheels need more than two calls: {sum(wheels.values()) / 1e6:.1f} MB beside a "
                         f"{tree / 1e6:.1f} MB tree; allowed: {limit / 1e6:.1f} MB a call")
    return sorted(first), sorted(second)


def trim(whl: Path) -> list[str]:
    """Remove the NOT_NEEDED wheels; the names of those removed."""
    removed = [w.name for w in sorted(whl.glob("*.whl")) if dist_name(w.name) in NOT_NEEDED]
    for name in removed:
        (whl / name).unlink()
    return removed


def agenda_call(state: Path) -> tuple[str, list[str], str]:
    """Every later call: a slice of the GPU agenda, going on from the last pack when there is one
    (`scripts/gpu_agenda.py --collect` keeps it as .gpu/state/agenda.tgz)."""
    command = ('. .gpu/bin/on-device.sh env && python3 scripts/gpu_agenda.py --out /tmp/grpo-agenda --budget 540 '
               '--pack "$OUT/agenda.tgz"')
    if state.is_file():
        return "agenda slices", [".gpu/bin", ".gpu/state"], command + f" --resume {state.relative_to(ROOT)}"
    return "agenda slices", [".gpu/bin"], command


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--check", action="store_true", help="do not run prepare.sh: trim and check .gpu/ as it is")
    args = parser.parse_args(argv)
    if not args.check:
        prepare = ROOT.parent / "shared" / "gpu" / "prepare.sh"
        if not prepare.is_file():
            print(f"gpu_prepare: {prepare} is missing; allowed: a checkout with ../shared beside it", file=sys.stderr)
            return 2
        (ROOT / ".git" / "info").mkdir(parents=True, exist_ok=True)
        subprocess.run(["bash", str(prepare)], cwd=ROOT, check=True)
    whl, whl2 = GPU / "whl", GPU / "whl2"
    if not whl.is_dir():
        print("gpu_prepare: .gpu/whl is missing; allowed: run without --check first", file=sys.stderr)
        return 2
    for wheel in sorted(whl2.glob("*.whl")) if whl2.is_dir() else []:  # a rerun starts from one folder
        wheel.rename(whl / wheel.name)
    removed = trim(whl)
    tree, bin_ = tree_bytes(), folder_bytes(GPU / "bin")
    try:
        first, second = split_wheels(tree, bin_, {w.name: w.stat().st_size for w in whl.glob("*.whl")})
    except ValueError as exc:
        print(f"gpu_prepare: {exc}", file=sys.stderr)
        return 1
    if second:
        whl2.mkdir(exist_ok=True)
        for name in second:
            (whl / name).rename(whl2 / name)
    print(f"left out of .gpu/whl ({len(removed)}, never imported there): {', '.join(removed) or 'none'}")
    calls = [("install", [".gpu/whl", ".gpu/bin"], ". .gpu/bin/on-device.sh install")]
    if second:
        calls.append(("install, part 2", [".gpu/whl2", ".gpu/bin"], INSTALL2))
    calls += [("model-a", [".gpu/m1", ".gpu/bin"], ". .gpu/bin/on-device.sh model-a"),
              ("model-b", [".gpu/m2", ".gpu/bin"], ". .gpu/bin/on-device.sh model-b"),
              agenda_call(GPU / "state" / "agenda.tgz")]
    worst = LIMIT
    print(f"the calls, in order (tree {tree / 1e6:.1f} MB; each call may send {LIMIT / 1e6:.1f} MB):")
    for what, carry, command in calls:
        size = tree + sum(folder_bytes(ROOT / c) for c in carry)
        worst = min(worst, LIMIT - size)
        print(f"  {what:16} carry {carry!s:28} {size / 1e6:5.1f} MB ({(LIMIT - size) / 1e6:4.1f} MB to spare): {command}")
    if worst < 0:
        print("gpu_prepare: a call is over the limit (see above); allowed: 64 MiB a call", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
