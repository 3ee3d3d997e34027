"""A password in a tracking URI (or a storage URL, a dataset address) is never printed, never
written in clear to a run folder, an Optuna store or MLflow: through train, sweep, reproduce and ui,
a marker password is looked for in every printed line and every byte the commands left."""

from pathlib import Path

import pytest

from conftest import CACHE, run_grpo_here as grpo_here

MARK = "Hunter2mark"  # the password: found nowhere but in the test's own arguments


def _leaks(root: Path) -> list[str]:
    """Files under root holding the marker (any bytes: SQLite pages, artifacts, journals)."""
    return [
        str(p.relative_to(root)) for p in sorted(root.rglob("*")) if p.is_file() and MARK.encode() in p.read_bytes()
    ]


def _claim(folder: Path) -> Path:
    folder.mkdir()
    spec = folder / "c.yaml"
    spec.write_text(
        f"name: secret-claim\nclaim: C2\nbase: {{cache_dir: {CACHE}, max_steps: 2, stl_window: 1, "
        f"baseline_prompts: 8}}\ngrid: {{warmup_ratio: [0.0, 0.5]}}\nseeds: [0]\nreplication_seeds: [1]\n"
        f"report: {{figures: [reward], tests: [{{kind: paired, statement: warmup off learns sooner, "
        f"axis: warmup_ratio, treatment: [0.0], control: 0.5, direction: lower}}]}}\n"
        f"quick: {{max_steps: 2, seeds: [0], replication_seeds: [1]}}\n"
    )
    return spec


@pytest.mark.longest
def test_a_marker_password_appears_nowhere(tmp_path):
    from servers import mlflow_server

    work = tmp_path / "work"
    work.mkdir()
    printed = []
    with mlflow_server(tmp_path / "server") as url:
        tracking = url.replace("http://", f"http://grpo:{MARK}@")
        journal = f"journal:///{work}/j.log"
        spec = _claim(work / "experiments")
        for args in (
            [
                "train",
                "--no-progress",
                "--set",
                f"cache_dir={CACHE}",
                "--set",
                "max_steps=2",
                "--set",
                "stl_window=1",
                "--set",
                "baseline_prompts=8",
                "--set",
                f"mlflow_tracking_uri={tracking}",
                "--out",
                str(work / "run"),
            ],
            ["sweep", str(spec), "--storage", journal, "--tracking-uri", tracking, "--out-root", str(work / "sweeps")],
            ["trials", str(spec), "--storage", journal],
            [
                "reproduce",
                "--quick",
                "--experiments",
                str(spec.parent),
                "--out",
                str(work / "report"),
                "--tracking-uri",
                tracking,
            ],
        ):
            res = grpo_here(*args, cwd=work)
            assert res.returncode == 0, res.stderr[-3000:]
            printed.append(res.stdout + res.stderr)
        for args in (  # refused: the line names the address, with its password masked
            ["ui", "--tracking-uri", f"postgresql://grpo:{MARK}@127.0.0.1:1/db"],
            ["sweep", str(spec), "--storage", f"journal://grpo:{MARK}@/{work}/j2.log"],
            ["sweep", str(spec), "--storage", f"postgresql://grpo:{MARK}@127.0.0.1:1/optuna"],
            ["train", "--set", f"dataset=https://grpo:{MARK}@127.0.0.1:1/rows.jsonl", "--out", str(work / "r2")],
            ["train", "--set", f"mlflow_tracking_uri=http://grpo:{MARK}@127.0.0.1:1", "--out", str(work / "r3")],
        ):
            res = grpo_here(*args, cwd=work)
            assert res.returncode == 2 and "***" in res.stderr, res.stderr[-3000:]
            printed.append(res.stdout + res.stderr)
    assert (work / "run" / "config.yaml").is_file() and (work / "report" / "REPORT.md").is_file()
    assert [i for i, text in enumerate(printed) if MARK in text] == []
    assert _leaks(work) == [] and _leaks(tmp_path / "server") == []
    assert "mlflow_tracking_uri: http://grpo:***@127.0.0.1" in (work / "run" / "config.yaml").read_text()
