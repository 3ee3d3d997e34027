"""The power simulation behind each section's "n per set" and "smallest effect it could detect"
(sweeps/deciding/power.py): hand-made cases, and agreement with the textbook power of the signed-rank test."""

import math

import numpy as np

import pytest

from sweeps.deciding import power
from sweeps.deciding import statistics as st


def test_a_shift_with_no_spread_is_always_found_and_too_few_pairs_never():
    noise = power.centered([[2, 2, 2, 2, 2, 2]])  # every seed the same difference: no spread at all
    assert noise.tolist() == [0.0] * 6
    assert power.power(noise, 6, 1.0, direction="lower") == 1.0  # 6 of 6 pairs lower: p = 2/64 < 0.05
    assert power.power(noise, 6, 1.0, m=2, direction="lower") == 0.0  # Holm over 2 needs p < 0.025
    assert power.detectable_effect(noise, 6) == 0.0  # any shift at all is found
    assert power.detectable_effect(noise, 5) == math.inf  # 5 pairs: the smallest p is 1/16
    assert power.detectable_effect(np.zeros(0), 8) != power.detectable_effect(np.zeros(0), 8)  # nan: no model


def test_the_claimed_direction_counts_and_no_effect_is_rejected_at_most_alpha_of_the_time():
    noise = power.centered([[-3, -2, -1, 1, 2, 3, -0.5, 0.5]])  # symmetric: under no effect the test's size
    assert power.power(noise, 12, 0.0, direction=None) < 0.05 + 0.03  # α plus the simulation's error
    assert power.power(noise, 12, 3.0, direction="lower") > 0.9
    # the same shift pointing the other way is significant, but it is no detection of a speed-up
    assert power.power(-noise, 12, -3.0, direction="lower") == 0.0


def test_power_agrees_with_the_signed_rank_tests_textbook_power():
    # normal differences, shift of one standard deviation, 10 pairs, two-sided 5%: the t-test's power is
    # 0.80, the signed-rank test's (efficiency 3/π) a little below: about 0.77-0.79
    noise = np.random.default_rng(1).normal(0, 1, 4000)
    noise -= np.median(noise)  # symmetric: its median is its center
    assert 0.70 < power.power(noise, 10, 1.0, direction=None, draws=2000) < 0.85


def test_more_pairs_detect_smaller_effects_and_larger_effects_need_fewer_seeds():
    noise = power.centered([[-6, 3, 0, -9, 4, -2, 5, 8, -7, 1]])
    small, large = power.detectable_effect(noise, 8), power.detectable_effect(noise, 16)
    assert math.isfinite(small) and large < small
    assert power.power(noise, 16, large, direction="lower") >= power.POWER
    few, many = power.seeds_needed(noise, 6.0), power.seeds_needed(noise, 3.0)
    assert few is not None and many is not None and few < many
    assert power.seeds_needed(noise, 0.01, most=20) is None  # more than 20 seeds


def test_the_planning_command_reads_a_pilots_run_folders(tmp_path, capsys):
    import json

    import yaml

    for seed in range(8):
        for lr, stl in ((1e-4, 14 + seed % 3), (2e-4, 9 + seed % 2)):
            folder = tmp_path / f"trial-{seed}-{lr}"
            folder.mkdir()
            (folder / "config.yaml").write_text(yaml.safe_dump({"seed": seed, "learning_rate": lr, "max_steps": 30}))
            (folder / "summary.json").write_text(json.dumps({"status": "finished", "steps_to_learn": stl}))
    assert (
        power.main(
            [str(tmp_path), "--axis", "learning_rate", "--control", "1e-4", "--treatment", "2e-4", "--effect", "2"]
        )
        == 0
    )
    out = capsys.readouterr().out
    assert out.startswith("8 pairs;") and "effect 2:" in out and "seeds per set" in out


def _pilot(tmp_path, values, status="finished"):
    import json

    import yaml

    for seed, (control, treated) in enumerate(values):
        for lr, stl in ((1e-4, control), (2e-4, treated)):
            folder = tmp_path / f"trial-{seed}-{lr}"
            folder.mkdir()
            (folder / "config.yaml").write_text(yaml.safe_dump({"seed": seed, "learning_rate": lr, "max_steps": 30}))
            (folder / "summary.json").write_text(json.dumps({"status": status, "steps_to_learn": stl}))


ARGS = ["--axis", "learning_rate", "--control", "1e-4", "--treatment", "2e-4"]


@pytest.mark.parametrize(
    "extra, needle",
    [
        (["--comparisons", "0"], "--comparisons 0; allowed: an integer ≥ 1"),
        (["--comparisons", "-2"], "--comparisons -2; allowed"),
        (["--effect", "nan"], "--effect nan; allowed: a number > 0"),
        (["--metric", "steps_to_lern"], "--metric steps_to_lern; allowed: steps_to_learn"),
    ],
)
def test_the_planning_command_refuses_nonsense_in_one_line(tmp_path, capsys, extra, needle):
    _pilot(tmp_path, [(14, 9), (15, 10), (16, 9)])
    assert power.main([str(tmp_path), *ARGS, *extra]) == 2
    err = capsys.readouterr().err
    assert needle in err and err.count("\n") == 1


def test_the_planning_command_names_what_it_cannot_use(tmp_path, capsys):
    """Killed runs are not pairs; an unknown axis, a missing folder, all-censored runs are refused in
    one line; one tied pair plans nothing without saying there is no noise estimate."""
    _pilot(tmp_path, [(14, 9), (15, 10)], status="killed")
    assert power.main([str(tmp_path), *ARGS]) == 2
    captured = capsys.readouterr()
    assert "trial-0-0.0001 (killed)" in captured.out and "no seed ran both" in captured.err
    (tmp_path / "trial-x").mkdir()  # a folder without its files
    assert power.main([str(tmp_path), "--axis", "learnin_rate", "--control", "1", "--treatment", "2"]) == 2
    assert "trial-x (no summary.json)" in capsys.readouterr().out
    assert power.main([str(tmp_path / "nowhere"), *ARGS]) == 2
    assert "nowhere: no such folder" in capsys.readouterr().err
    censored = tmp_path / "censored"
    censored.mkdir()
    _pilot(censored, [(None, None), (None, None)])
    assert power.main([str(censored), *ARGS]) == 2
    assert "no run of either arm reached steps_to_learn" in capsys.readouterr().err
    one = tmp_path / "one"
    one.mkdir()
    _pilot(one, [(14, 9)])
    assert power.main([str(one), *ARGS, "--effect", "2"]) == 0
    assert "no noise estimate: one pair" in capsys.readouterr().out
    assert power.main([str(one), "--axis", "learnin_rate", "--control", "1e-4", "--treatment", "2e-4"]) == 2
    assert (
        "--axis learnin_rate: not a key of these runs' config.yaml; allowed: a grid axis, e.g. learning_rate"
        in capsys.readouterr().err
    )


# ---- tests across several levels (Friedman's): one level shifted from the others -------------------------
def test_blocks_are_centered_per_level_on_each_seeds_differences_to_the_first_level():
    # seeds' (grpo, dapo, dr_grpo) values: differences to grpo are dapo (1, 3, 2) and dr_grpo (-2, 0, -4);
    # their Hodges-Lehmann estimates are 2 and -2, so the rows are (0, -1, 0), (0, 1, 2), (0, 0, -2)
    rows = power.centered_blocks([[[10, 11, 8], [12, 15, 12], [9, 11, 5]], []])
    assert rows.tolist() == [[0.0, -1.0, 0.0], [0.0, 1.0, 2.0], [0.0, 0.0, -2.0]]
    assert power.centered_blocks([[[1, float("nan"), 2]]]).size == 0  # not a number: no model


def test_a_shift_of_one_level_with_no_spread_is_found_and_too_few_seeds_never():
    rows = power.centered_blocks([[[5, 7, 6]] * 6])  # every seed the same differences: no spread
    assert power.shift_power(rows, 6, 1.0, level=1) == 1.0  # 6 seeds ranking alike: Friedman p = 0.0025
    assert power.detectable_shift(rows, 6) == 0.0
    assert st.smallest_friedman_p(2, 3) > 0.05 and power.detectable_shift(rows, 2) == math.inf
    assert st.smallest_friedman_p(6, 2) == 2 / 64  # two levels: the signed-rank test's
    assert math.isnan(power.detectable_shift(np.zeros((0, 0)), 8))


def test_no_shift_is_rejected_about_alpha_of_the_time_and_a_large_one_nearly_always():
    rows = power.centered_blocks([np.random.default_rng(2).normal(0, 1, (200, 3))])
    assert power.shift_power(rows, 12, 0.0, level=1, draws=2000) < 0.05 + 0.03  # α plus the simulation's error
    assert power.shift_power(rows, 12, 3.0, level=0) > 0.9
    small, large = power.detectable_shift(rows, 8), power.detectable_shift(rows, 16)
    assert math.isfinite(small) and large < small
    # whichever level is shifted by it, 16 seeds find it (up to the simulation's wobble off monotone)
    assert min(power.shift_power(rows, 16, large, level) for level in (0, 1, 2)) >= power.POWER - 0.05
    few, many = power.blocks_needed(rows, 3.0), power.blocks_needed(rows, 1.5)
    assert few is not None and many is not None and few < many
    assert power.blocks_needed(rows, 0.01, most=10) is None


def test_the_tied_model_finds_no_partial_effect_where_the_shift_model_finds_any():
    """All pairs tied (C6's drop: 11 of 16 pairs equal): moving every pair by any amount is found
    (detectable 0: the shift model), but an effect that reaches only 5 of 16 pairs leaves too few
    non-zero pairs for the signed-rank test at 8 pairs, at any size; one reaching 90% is found at a
    small size. The share comes from the differences themselves."""
    import numpy as np

    noise = np.zeros(16)
    assert power.detectable_effect(noise, 8) == 0.0
    assert power.detectable_effect(noise, 8, moved=5 / 16) == float("inf")
    assert 0 < power.detectable_effect(noise, 8, moved=0.9) < 1
    assert power.moved_share([[0, 0, 1, 0], [0, -2, 0, 0]]) == 0.25


def test_the_old_command_name_runs_the_whole_plan(tmp_path):
    """`python -m sweeps.power` (the name in committed reports) runs the command to its end, not
    only its --help: every import of the module works when it runs as __main__ under that name."""
    import subprocess
    import sys
    from pathlib import Path

    _pilot(tmp_path, [(14, 9), (15, 10), (16, 9), (13, 9)])
    root = Path(__file__).resolve().parent.parent
    proc = subprocess.run(
        [sys.executable, "-m", "sweeps.power", str(tmp_path), *ARGS, "--effect", "2"],
        cwd=root,
        capture_output=True,
        text=True,
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert proc.stdout.startswith("4 pairs;") and "effect 2:" in proc.stdout


def test_the_verdicts_power_in_whole_steps_by_hand():
    # eight tied pairs: an effect of 1 step moves every pair by 1 (p = 2/2^8 on each set: always
    # significant); an effect of 0.5 moves each pair by 1 with probability 1/2, and a set is
    # significant when 6 or more of its 8 pairs moved (p = 2/2^6 = 0.031; 5 give 0.0625):
    # P = (28 + 8 + 1)/256 = 0.145 per set, its square for the verdict (both sets)
    from sweeps.deciding import power

    tied = [[0] * 8, [0] * 8]
    assert power.verdict_power(tied, 1.0) == 1.0
    assert power.verdict_power(tied, 0.5) == pytest.approx(((28 + 8 + 1) / 256) ** 2, abs=0.006)
    assert power.verdict_power(tied, 0.5, direction="higher") == pytest.approx(((28 + 8 + 1) / 256) ** 2, abs=0.006)


def test_the_tied_model_reads_the_graded_controls_as_they_came_out():
    # calibration on the committed known effects: ×1.25 (−1.7 steps on average) was detected on
    # neither seed set, and the tied model gives its verdict little power at that size; ×1.5 (−3.4)
    # was detected on both, with most of the power; the shift model's "1.37 steps detectable with 80%
    # power" (each set) had called ×1.25 easy
    from pathlib import Path

    from sweeps.deciding import power
    from sweeps.deciding.replication import replicated_verdicts
    from sweeps.reporting.report_inputs import collect_runs
    from sweeps.spec import load_spec

    root = Path(__file__).resolve().parents[1]
    spec = load_spec(root / "experiments/real/cpu/r0_positive_control_room_graded_cpu.yaml", check_points=False)
    runs, _ = collect_runs(root / "results/real/cpu/runs", spec)
    steps = [(v, found) for v, found in replicated_verdicts(spec, runs) if "AUC" not in v.statement]
    got = {}
    for v, found in steps:
        sets = [f.verdict.comparisons[0].diffs for f in found]
        effect = -sum(map(sum, sets)) / sum(map(len, sets))
        got[v.verdict] = power.verdict_power(sets, effect)
    assert got["no effect detected"] < 0.3 < 0.5 < got["supported"]
