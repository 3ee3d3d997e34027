"""The sequential design's parts, by hand: the spending functions, the boundaries of a small exact
case, a one-look design equal to the fixed signed-rank test, and a simulated null that stops (at
any look) no more often than the α it spends."""

import math

import numpy as np
import pytest

from sweeps.deciding import statistics as st
from sweeps.deciding.sequential import boundaries, decide, spent, z_statistic


def test_spending_by_hand():
    # O'Brien-Fleming type at t = 0.5: 2 − 2Φ(1.959964 / √0.5) = 2 − 2Φ(2.771808) = 2 × 0.0027873
    assert spent(0.05, 0.5, "obrien_fleming") == pytest.approx(0.0055746, abs=1e-6)
    # Pocock type at t = 0.5: 0.05 · ln(1 + (e − 1)/2) = 0.05 · ln(1.859141) = 0.0310057
    assert spent(0.05, 0.5, "pocock") == pytest.approx(0.0310057, abs=1e-6)
    assert spent(0.05, 1.0, "obrien_fleming") == pytest.approx(0.05) and spent(0.05, 1.0, "pocock") == pytest.approx(
        0.05
    )
    assert spent(0.05, 0.25, "obrien_fleming") < spent(0.05, 0.25, "pocock")  # O'Brien-Fleming spends little early


def test_boundaries_of_a_small_case_by_hand():
    # six pairs with |d| = 1..6, looks at 4 and 6 pairs, Pocock. Look 1: W = ±1±2±3±4, |W| ≤ 10, and
    # P(|W| = 10) = 2/16 = 0.125 > α(4/6) = 0.05·ln(1 + (e − 1)·2/3) = 0.0382: no boundary can be met.
    # Look 2: Σr² = 91, P(|W| = 21) = 2/64 = 0.031 ≤ 0.05 < P(|W| ≥ 19) = 4/64: b = 21/√91 = 2.2014.
    b = boundaries([1, -2, 3, 4, -5, 6], [4, 6], 6, 0.05, "pocock")
    assert b[0] == math.inf and b[1] == pytest.approx(21 / math.sqrt(91))
    assert z_statistic([1, 2, 3, 4, 5, 6]) == pytest.approx(21 / math.sqrt(91))
    assert decide([1, 2, 3, 4, 5, 6], [4, 6], kind="pocock").outcome == "effect"  # all one sign: crosses at look 2
    assert decide([1, 2, 3, 4, 5, -6], [4, 6], kind="pocock").outcome == "undecided"  # |W| = 9: budget spent


def test_one_look_is_the_fixed_signed_rank_test():
    rng = np.random.default_rng(3)
    for _ in range(40):
        d = np.round(rng.normal(0.8, 2.0, 10))  # integer steps: ties and zeros, as steps_to_learn has
        (b,) = boundaries(d, [10], 10, 0.05, "obrien_fleming")
        assert (abs(z_statistic(d)) >= b) == (st.signed_rank_test(d) <= 0.05), d


def test_a_null_stops_no_more_often_than_the_alpha_it_spends():
    """300 null data sets of 12 pairs (integer differences symmetric about 0), read at 6, 9 and 12
    pairs: the share that ever stops with an effect stays within α (here its Monte-Carlo bound), and
    the share stopped by look 2 within α(9/12)."""
    rng = np.random.default_rng(11)
    looks, stops, early = [6, 9, 12], 0, 0
    for _ in range(300):
        d = np.round(rng.normal(0, 3, 12))
        result = decide(d, looks)
        stops += result.outcome == "effect"
        early += result.outcome == "effect" and result.look < 3
    se = math.sqrt(0.05 * 0.95 / 300)
    assert stops / 300 <= 0.05 + 3 * se
    assert early / 300 <= spent(0.05, 9 / 12, "obrien_fleming") + 3 * se


def test_a_clear_effect_stops_early_and_a_null_within_the_margin_reads_equivalent():
    looks = [8, 12, 16]
    shifted = decide([-6, -5, -7, -4, -6, -8, -5, -6, -7, -6, -5, -4, -6, -7, -5, -6], looks)
    assert shifted.outcome == "effect" and shifted.look == 2 and shifted.z < 0  # 8 pairs cannot reach α(0.5) here
    tied = decide([0, 1, -1, 0, 1, -1, 0, 0, 1, -1, 0, 1, -1, 0, 0, 1], looks, margin=3)
    assert tied.outcome == "equivalent"
    assert decide([0, 1, -1, 0, 1, -1, 0, 0, 1, -1, 0, 1, -1, 0, 0, 1], looks).outcome == "undecided"


def test_the_report_reads_each_comparison_under_the_declared_design():
    from types import SimpleNamespace

    from sweeps.deciding.sequential import sequential_lines

    def found(name, *diffs):
        comparisons = [SimpleNamespace(label=f"beta={i}", diffs=list(d)) for i, d in enumerate(diffs)]
        return SimpleNamespace(name=name, verdict=SimpleNamespace(comparisons=comparisons))

    clear = [-6, -5, -7, -4, -6, -8, -5, -6, -7, -6, -5, -4]
    lines = sequential_lines(
        {"looks": [6, 9, 12], "spending": "pocock"},
        [found("discovery", clear, [1, -1] * 6), found("replication", clear[:4])],
        margin=3,
    )
    text = "\n".join(lines)
    assert "looks at 6, 9, 12 pairs per seed set" in text and "Pocock spending of α = 0.05" in text
    assert "- discovery, beta=0: effect at look" in text  # α/2 each: two comparisons in the set
    assert "- discovery, beta=1: equivalent at look" in text
    assert "- replication, beta=0: before its first look (4 of 6 pairs)" in text


def test_a_tests_standing_for_the_tables_and_the_forest_plot():
    # decided only when every set's every comparison crossed; the budget spent on one: undecided
    from types import SimpleNamespace

    from sweeps.deciding.sequential import test_reading

    def found(name, d):
        return SimpleNamespace(name=name, verdict=SimpleNamespace(comparisons=[SimpleNamespace(label="x", diffs=d)]))

    design = {"looks": [6, 9, 12], "spending": "pocock"}
    clear, flat = [-6, -5, -7, -4, -6, -8, -5, -6, -7, -6, -5, -4], [1, -1] * 6
    assert test_reading(design, [found("discovery", clear), found("replication", clear[:9])], None) == (
        "decided at look 2 (9 pairs)"
    )
    assert test_reading(design, [found("discovery", clear), found("replication", clear[:6])], None) == (
        "open at look 1 (6 pairs)"
    )  # 6 pairs cannot reach Pocock's α at 6 of 12
    assert test_reading(design, [found("discovery", clear), found("replication", flat[:9])], None) == (
        "open at look 2 (9 pairs)"
    )
    assert test_reading(design, [found("discovery", clear), found("replication", flat)], None) == (
        "undecided at 12 pairs (budget spent)"
    )
    assert test_reading(design, [found("discovery", clear), found("replication", flat)], 3) == (
        "decided at look 2 (9 pairs)"
    )  # the flat set is equivalent within ±3 at look 1, the clear one an effect at look 2
    assert test_reading(design, [found("discovery", clear[:4])], None) == "before its first look (4 of 6 pairs)"


CISPO_AGAINST_DAPO = {  # a paired test the spec-validation cases below share
    "kind": "paired",
    "statement": "s",
    "metric": "steps_to_learn",
    "axis": "loss_type",
    "treatment": ["cispo"],
    "control": "dapo",
    "direction": "lower",
}


@pytest.mark.parametrize(
    "design, needle",
    [
        ({"looks": [8, 8]}, "sequential.looks: [8, 8]; allowed: increasing pair counts"),
        ({"looks": [1, 4]}, "sequential.looks: [1, 4]"),
        (
            {"looks": [8, 16], "spending": "haybittle"},
            "sequential.spending: 'haybittle'; allowed: obrien_fleming, pocock",
        ),
        ({"looks": [8, 16], "alpha": 0.5}, "sequential.alpha: 0.5; allowed: a number in (0, 0.5)"),
        ({"looks": [8, 16], "budget": 40}, "sequential.budget: unknown key"),
    ],
)
def test_a_bad_sequential_design_is_one_line_before_anything_runs(design, needle):
    from grpo_core.util.errors import UserInputError
    from sweeps.report_spec import validate_report
    from sweeps.spec import SweepSpec

    test = dict(CISPO_AGAINST_DAPO)
    spec = SweepSpec(
        name="m",
        base={},
        grid={"loss_type": ["dapo", "cispo"]},
        seeds=[0, 1],
        replication_seeds=[2, 3],
        report={"tests": [test], "sequential": design},
    )
    with pytest.raises(UserInputError) as err:
        validate_report(spec)
    assert needle in str(err.value) and "\n" not in str(err.value)


def test_the_simulation_reads_both_designs_on_drawn_data_sets():
    from sweeps.reporting.sequential_sim import simulate

    d = [-3, 2, 0, 5, -1, 4, -6, 1, 2, -2, 3, 0]  # the observed differences: their |d| with random signs is the null
    r = simulate(d, [6, 9, 12], 0.05, "obrien_fleming", target=-4.0, margin=2.0, draws=60)
    assert 0 <= r["null_seq"] <= 0.05 + 3 * math.sqrt(0.05 * 0.95 / 60)
    assert r["tgt_seq"] > r["null_seq"] and r["tgt_all"] >= r["tgt_8"]  # more pairs, more power
    assert 6 <= r["pairs_tgt"] <= r["pairs_null"] <= 12  # an effect stops sooner than a null
    # the exact interval at the fixed budget holds the true shift at least 95% of the time (ties make it wider)
    assert r["cover_all"] >= 0.95 - 3 * math.sqrt(0.05 * 0.95 / 60) and 0 < r["cover_stop"] <= 1


def test_a_sweep_until_decided_trains_look_by_look_and_stops_when_decided(tmp_path, monkeypatch):
    """Looks at 2 and 3 pairs per seed set: decided at the first look (forced here), only its seeds
    train; read as they are, 2 and 3 pairs can cross no boundary, so the next invocation trains the
    second look's seeds alone (the first look's folders are done) and ends with the budget spent; a
    third trains nothing."""
    import yaml

    import sweeps.deciding.sequential as sequential
    from conftest import CACHE, run_grpo_here
    from sweeps.deciding.sequential import SequentialResult

    spec = {
        "name": "until",
        "base": {"task": "addition", "max_steps": 3, "stl_window": 1, "baseline_prompts": 4, "cache_dir": str(CACHE)},
        "grid": {"advantage_scale": [1.0, 10.0]},
        "seeds": [0, 1],
        "replication_seeds": [10, 11],
        "objective": "steps_to_learn",
        "report": {
            "tests": [
                {
                    "kind": "paired",
                    "statement": "x10 learns sooner",
                    "metric": "steps_to_learn",
                    "axis": "advantage_scale",
                    "treatment": [10.0],
                    "control": 1.0,
                    "direction": "lower",
                }
            ],
            "sequential": {"looks": [2, 3], "streams": {"seeds": [0, 1, 2], "replication_seeds": [10, 11, 12]}},
        },
    }
    (tmp_path / "until.yaml").write_text(yaml.safe_dump(spec, sort_keys=False))
    args = ("sweep", "until.yaml", "--until-decided", "--out-root", str(tmp_path / "runs"))

    def folders():
        return sorted(p.name for p in (tmp_path / "runs" / "until").glob("trial-*/summary.json"))

    with monkeypatch.context() as m:
        m.setattr(sequential, "decide", lambda *a, **k: SequentialResult("effect", 1, 2, -3.0, 2.0, 0.01))
        done = run_grpo_here(*args, cwd=tmp_path)
    assert done.returncode == 0, done.stderr[-2000:]
    assert "every paired test decided at look 1 (2 pairs per set)" in done.stdout and len(folders()) == 8
    done = run_grpo_here(*args, cwd=tmp_path)
    assert done.returncode == 0 and "look 2 of 2, 3 pairs per seed set" in done.stdout
    assert "look 2, replication seeds: trains advantage_scale 10.0, 1.0 (what its open tests compare)" in done.stdout
    assert "budget spent (3 pairs per set)" in done.stdout and len(folders()) == 12
    first = folders()
    assert run_grpo_here(*args, cwd=tmp_path).returncode == 0 and folders() == first  # nothing trains again
    refused = run_grpo_here(
        "sweep", "until.yaml", "--until-decided", "--storage", f"journal:///{tmp_path}/j.log", cwd=tmp_path
    )
    assert refused.returncode == 2 and refused.stderr.startswith("grpo: error: --until-decided: beside --storage")


def test_the_next_look_trains_only_what_the_open_tests_compare(tmp_path, monkeypatch):
    # arms a, b, c; "b vs a" decided on both sets, "c vs a" open on the replication set alone: the next
    # look trains a and c on the replication seeds, nothing on the discovery seeds
    from types import SimpleNamespace

    import yaml

    import sweeps.reporting.until_decided as until
    from sweeps.deciding.sequential import SequentialResult
    from sweeps.spec import load_spec

    tests = [
        {"kind": "paired", "statement": s, "metric": "steps_to_learn", "axis": "arm", "treatment": [t], "control": "a"}
        for s, t in (("b sooner", "b"), ("c sooner", "c"))
    ]
    spec = {
        "name": "three",
        "base": {"task": "addition", "max_steps": 3},
        "arms": {"a": {"learning_rate": 1e-4}, "b": {"learning_rate": 2e-4}, "c": {"learning_rate": 3e-4}},
        "seeds": [0, 1],
        "replication_seeds": [10, 11],
        "objective": "steps_to_learn",
        "report": {"tests": tests, "sequential": {"looks": [2, 3]}},
    }
    (tmp_path / "three.yaml").write_text(yaml.safe_dump(spec, sort_keys=False))
    loaded = load_spec(tmp_path / "three.yaml", check_points=False)

    def found(test, set_name):
        is_open = test["treatment"] == ["c"] and set_name == "replication"
        return SimpleNamespace(name=set_name, verdict=SimpleNamespace(comparisons=[SimpleNamespace(open=is_open)]))

    monkeypatch.setattr(
        until,
        "replicated_verdicts",  # one entry per report test (each with its reward-AUC twin), as the real one
        lambda spec, runs: [(None, [found(t, "discovery"), found(t, "replication")]) for t in until.report_tests(spec)],
    )
    monkeypatch.setattr(
        until,
        "set_readings",
        lambda design, comparisons, margin: [
            SequentialResult("continue" if c.open else "effect", 1, 2, 0.0, 3.0, 0.01) for c in comparisons
        ],
    )
    assert until.needed(loaded, [], "discovery") == ("arm", [])
    assert until.needed(loaded, [], "replication") == ("arm", ["c", "a"])
    assert until._points_per_seed(loaded, "arm", ["c", "a"]) == 2 and until._points_per_seed(loaded, None, None) == 3
    train = yaml.safe_load(until._training_spec(tmp_path / "three.yaml", [12], "arm", ["c", "a"], tmp_path).read_text())
    assert train["seeds"] == [12] and "replication_seeds" not in train and "report" not in train
    assert list(train["arms"]) == ["a", "c"] and train["name"] == "three"  # the sweep's own folder


def test_seed_streams_must_extend_the_specs_own_lists_disjointly():
    from grpo_core.util.errors import UserInputError
    from sweeps.report_spec import validate_report
    from sweeps.spec import SweepSpec

    test = dict(CISPO_AGAINST_DAPO)
    for streams, needle in (
        ({"seeds": [0, 1, 2], "replication_seeds": [2, 3, 4]}, "the two sets share seeds"),
        ({"seeds": [1, 0, 2], "replication_seeds": [2, 3, 5]}, "streams.seeds: [1, 0, 2]"),
        ({"seeds": [0, 1]}, "streams: {'seeds': [0, 1]}"),
    ):
        spec = SweepSpec(
            name="m",
            base={},
            grid={"loss_type": ["dapo", "cispo"]},
            seeds=[0, 1],
            replication_seeds=[2, 3],
            report={"tests": [test], "sequential": {"looks": [2, 3], "streams": streams}},
        )
        with pytest.raises(UserInputError, match="allowed") as err:
            validate_report(spec)
        assert needle in str(err.value), str(err.value)


def test_the_sign_e_process_by_hand_and_under_the_null():
    from sweeps.deciding.sequential import sign_e_process

    # all positive: the first pair bets nothing (λ = 0), then λ = ½ at each, so the wealth is 1.5^(n−1),
    # which first reaches 1/α = 20 at n − 1 = 8 (1.5^7 = 17.1, 1.5^8 = 25.6): 9 pairs
    assert sign_e_process([3] * 32, 0.05, 32) == (True, 9)
    assert sign_e_process([0, 0, 2, -2] * 8, 0.05, 32) == (False, 32)  # zeros skip, alternating signs never pay
    rng = np.random.default_rng(5)
    passed = sum(sign_e_process(np.round(rng.normal(0, 3, 32)), 0.05, 32)[0] for _ in range(400))
    assert passed / 400 <= 0.05 + 3 * math.sqrt(0.05 * 0.95 / 400)
