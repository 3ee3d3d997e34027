"""The same numbers on every machine of this kind: runs made on another machine (and on this
project's development machine) must come out bit for bit here, through the `grpo` command with its
default CPU math (`cpu_math: reproducible`, grpo_core/util/cpu_math.py). Where they come from:
tests/data/repro/*/README.md."""

import json
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from repro_runs import first_difference, read_configs, train_many

DATA = Path(__file__).resolve().parent / "data" / "repro"


def _steps(args: list[str]) -> int:
    return next(int(a.split("=")[1]) for a in args if a.startswith("max_steps="))


PREFIX = 40  # steps of a constant-learning-rate reference rerun: the drift an unpinned run shows starts by step 39


def _as_trained(args: list[str]) -> list[str]:
    """A reference config as the check trains it: one with a constant learning rate and no warmup
    stops at PREFIX steps, the prefix of the longer run it was made with (no row before the last
    step depends on max_steps then); a schedule that depends on max_steps runs in full."""
    keys = dict(a.split("=", 1) for a in args)
    constant = keys.get("lr_scheduler_type", "constant") == "constant" and not any(
        float(keys.get(k, 0)) for k in ("warmup_ratio", "warmup_steps")
    )
    if constant and _steps(args) > PREFIX:
        return [a for a in args if not a.startswith("max_steps=")] + [f"max_steps={PREFIX}"]
    return args


def cpu_vendor() -> str:
    """The CPU's vendor string (/proc/cpuinfo's vendor_id: AuthenticAMD, GenuineIntel), or ''."""
    try:
        text = Path("/proc/cpuinfo").read_text()
    except OSError:
        return ""
    return next((line.split(":", 1)[1].strip() for line in text.splitlines() if line.startswith("vendor_id")), "")


# MKL's products differ between AMD and Intel CPUs even when pinned to its AVX2 path (README.md in each
# folder): each vendor's machines are checked against references made on a machine of that vendor
TINY_REFERENCES = {"AuthenticAMD": ("other-machine", "this-machine"), "GenuineIntel": ("intel-xeon",)}
REAL_REFERENCES = {"AuthenticAMD": "real-amd", "GenuineIntel": "real-intel"}


@pytest.mark.slow
def test_reference_runs_reproduce_bit_for_bit():
    # every reference made on this CPU vendor's machines (AMD: the other machine's and this project's
    # development machine's; Intel: the same configs made on a Xeon), in two processes, one per core,
    # with about as many steps each (longest first, to the lighter); constant-rate ones for PREFIX steps
    vendor = cpu_vendor()
    if vendor not in TINY_REFERENCES:
        pytest.skip(f"no tiny-model reference made on a {vendor or 'unknown'} CPU (references: {TINY_REFERENCES})")
    runs = {}
    for machine in TINY_REFERENCES[vendor]:
        configs = read_configs(DATA / machine)
        assert configs and all((DATA / machine / f"{name}.jsonl").is_file() for name in configs)
        runs.update({(machine, name): _as_trained(args) for name, args in configs.items()})
    halves, load = ([], []), [0, 0]
    for key in sorted(runs, key=lambda k: -_steps(runs[k])):
        lighter = load.index(min(load))
        halves[lighter].append(key)
        load[lighter] += _steps(runs[key])
    with ThreadPoolExecutor(2) as pool:
        rows = pool.map(lambda half: train_many([runs[k] for k in half]), halves)
        results = {key: r for half, got in zip(halves, rows) for key, r in zip(half, got)}
    differences = {}
    for (machine, name), got in results.items():
        want = [json.loads(line) for line in (DATA / machine / f"{name}.jsonl").read_text().splitlines() if line]
        assert len(want) >= PREFIX and len(got) == min(len(want), _steps(runs[machine, name]))
        if where := first_difference(got, want[: len(got)]):
            differences[f"{machine}/{name}"] = where
    assert not differences, f"runs that differ from their references: {differences}"


def test_cpu_math_is_recorded_and_native_is_an_opt_out(tmp_path):
    from conftest import run_grpo, run_grpo_here

    for mode, run in (("reproducible", run_grpo_here), ("native", run_grpo)):  # native: a process of its own
        out = tmp_path / mode
        proc = run(
            "train",
            "--no-mlflow",
            "--no-progress",
            "--set",
            "max_steps=2",
            "--set",
            f"cpu_math={mode}",
            "--set",
            "baseline_prompts=16",
            "--set",
            "stl_window=1",
            "--out",
            str(out),
        )
        assert proc.returncode == 0, proc.stderr
        summary = json.loads((out / "summary.json").read_text())
        assert summary["cpu_math"] == mode and summary["cpu_capability"]
        assert f"cpu_math: {mode}" in (out / "config.yaml").read_text()
        # the branch MKL computed with: MKL_CBWR=AVX2 holds on Intel CPUs only (Intel's CNR docs); AMD gets AUTO
        vendor = next(
            (
                line.split(":")[1].strip()
                for line in Path("/proc/cpuinfo").read_text().splitlines()
                if line.startswith("vendor_id")
            ),
            "",
        )
        wanted = "OFF" if mode == "native" else {"GenuineIntel": "AVX2", "AuthenticAMD": "AUTO"}.get(vendor)
        if wanted is not None:
            assert summary["mkl_branch"] == wanted, (vendor, summary["mkl_branch"])
        assert summary["mkl_branch"] in ("OFF", "AUTO", "AVX2", "no MKL")


def test_a_config_whose_cpu_math_differs_from_the_process_is_refused(cfg_factory):
    from grpo_core.util import cpu_math
    from grpo_core.util.errors import ConfigError
    from grpo_core.trainer import GRPOTrainer

    assert cpu_math.process_mode() == "reproducible"  # conftest imported grpo_core before torch
    with pytest.raises(ConfigError, match="cpu_math: this process already loaded torch with reproducible"):
        GRPOTrainer(cfg_factory(cpu_math="native"))


def test_mode_read_before_torch_loads(tmp_path):
    from grpo_core.util import cpu_math
    from grpo_core.util.errors import UserInputError

    config = tmp_path / "c.yaml"
    config.write_text("cpu_math: native\n")
    assert cpu_math.mode_for_train(str(config), []) == "native"
    assert cpu_math.mode_for_train(str(config), ["cpu_math=reproducible"]) == "reproducible"
    assert cpu_math.mode_for_train(None, []) == "reproducible"
    assert cpu_math.mode_for_train(str(tmp_path / "missing.yaml"), []) == "reproducible"  # validation says why
    a, b = tmp_path / "a.yaml", tmp_path / "b.yaml"
    a.write_text("base: {cpu_math: native}\n")
    b.write_text("base: {task: addition}\n")
    assert cpu_math.mode_for_specs([a]) == "native"
    with pytest.raises(UserInputError, match="different modes"):
        cpu_math.mode_for_specs([a, b])


@pytest.mark.longest  # ~35 s on one core: 2 steps of a LoRA run of SmolLM2
def test_real_model_reference_reproduces_bit_for_bit(smollm2):
    # SmolLM2-135M-Instruct with LoRA, 8 steps, made on another machine: every metric of every step
    # equal. MKL's products differ between AMD and Intel CPUs at this model's sizes even when pinned
    # (tests/data/repro/real-amd/README.md), so each vendor has its reference, made on a machine of it.
    vendor = cpu_vendor()
    if vendor not in REAL_REFERENCES:
        pytest.skip(f"no real-model reference made on a {vendor or 'unknown'} CPU (references: {REAL_REFERENCES})")
    folder = DATA / REAL_REFERENCES[vendor]
    ((name, args),) = read_configs(folder).items()
    want = [json.loads(line) for line in (folder / f"{name}.jsonl").read_text().splitlines() if line]
    # the untrained baseline draws from a fixed stream of its own and no metrics.jsonl row depends on it
    # (checked: the 8 rows are the same with it cut to 2 prompts): cut, it saves ~100 s of sampling.
    # The first 2 of the 8 steps: the learning rate is constant (warmup_ratio=0), so a short run is the
    # 8-step run's prefix (checked: a 4-step run's rows equal the reference's first 4). Step 2 is the first
    # computed after an optimizer update (sampling, log-probs, loss, backward, Adam, sampling again); between
    # vendors the runs part at step 1 already (real-amd/README.md)
    args = [a for a in args if not a.startswith(("baseline_prompts=", "max_steps="))]
    got = train_many([[*args, "baseline_prompts=1", "stl_delta=8", "max_steps=2"]])[0]
    assert len(want) == 8 and len(got) == 2
    assert not (where := first_difference(got, want[:2])), f"{folder.name}/{name} differs from its reference: {where}"
