"""`grpo bench` runs both trainers side by side and prints a ratio. Speed itself is never
asserted here: benchmarks report medians and ratios (results/benchmarks/), tests check that
the benchmark works."""

import re

import pytest

from conftest import CACHE, run_grpo, run_grpo_here

pytest.importorskip("trl", reason="TRL is the [bench] extra; scripts/bootstrap.sh installs it")


def test_bench_tiny_two_steps_prints_ratio_memory_and_logps_check(tmp_path):
    out = tmp_path / "bench.md"
    proc = run_grpo(
        "bench", "--setup", "tiny", "--steps", "2", "--warmup", "1", "--cache-dir", str(CACHE), "--out", str(out)
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert re.search(r"ours/TRL median step time = \d+\.\d\d", proc.stdout)
    row = next(line for line in out.read_text().splitlines() if line.startswith("| tiny"))
    cells = [c.strip() for c in row.strip("|").split("|")]
    ratio, ours_mem, trl_mem, check = float(cells[4].strip("*")), cells[7], cells[8], float(cells[9])
    assert ratio > 0
    assert ours_mem.endswith("MiB") and trl_mem.endswith("MiB")
    assert check <= 1e-5  # the log-probs the loss uses equal a plain forward's
    assert "trl 1." in out.read_text() and "Command: `grpo bench" in out.read_text()


@pytest.mark.parametrize(
    "args, message",
    [
        (["--setup", "nope"], "--setup: unknown value 'nope'; allowed: tiny, smollm2-135m, qwen2-0.5b"),
        (["--setup", "qwen2-0.5b"], "--setup qwen2-0.5b: runs on a GPU only"),
        (["--steps", "0"], "--steps: got 0; allowed: an integer ≥ 1"),
        (["--loss-type", "ppo"], "--loss-type: unknown value 'ppo'"),
        (
            ["--out", "/proc/no-such-dir/cpu.md"],
            "--out /proc/no-such-dir/cpu.md: cannot be written",
        ),  # before the bench runs
    ],
)
def test_bench_bad_input_one_line_exit_2(args, message):
    proc = run_grpo_here("bench", *args)
    assert proc.returncode == 2
    assert message in proc.stderr and len(proc.stderr.strip().splitlines()) == 1


def test_suite_time_sums_each_specs_finished_runs_from_their_folders(tmp_path, capsys):
    import json

    from benchmarks import suite_time

    exp, runs = tmp_path / "exp", tmp_path / "runs"
    exp.mkdir()
    for name, claim in (("a", "calibration"), ("b", "C2"), ("c", "C3")):
        (exp / f"{name}.yaml").write_text(f"name: s-{name}\nclaim: {claim}\nreport: {{tests: []}}\n")
    summaries = {
        "s-a": [(600.0, 7.0, "finished"), (300.0, 5.0, "finished"), (9999.0, 1.0, "killed")],
        "s-b": [(120.0, 3.0, "finished")],
    }  # s-c has no run folder: no row
    for sweep, rows in summaries.items():
        for i, (wall, median, status) in enumerate(rows):
            folder = runs / sweep / f"trial-{i:04d}"
            folder.mkdir(parents=True)
            (folder / "summary.json").write_text(
                json.dumps(
                    {
                        "status": status,
                        "wall_time_s": wall,
                        "median_step_time_s": median,
                        "steps_completed": 12,
                        "device_name": "AMD EPYC 7B13",
                    }
                )
            )
    (runs / "s-b" / "trial-0009").mkdir()
    (runs / "s-b" / "trial-0009" / "summary.json").write_text('{"status": "fini')  # cut: left out
    assert suite_time.main(["--experiments", str(exp), "--runs", str(runs), "--workers", "2"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[2] == "| `a.yaml` | 2 | 12 | 15.0 | 7.5 | 6.0 | AMD EPYC |"  # (600 + 300) s; median of 7 and 5
    assert lines[3] == "| `b.yaml` | 1 | 12 | 2.0 | 1.0 | 3.0 | AMD EPYC |" and len(lines) == 4
    assert suite_time.main(["--experiments", str(tmp_path / "none")]) == 2
    assert suite_time.main(["--experiments", str(exp), "--workers", "0"]) == 2
