"""Measurements: `grpo bench` (trl_bench.py), step profiles, the FLOP rate and the one-off measurement
scripts, each saying in its first line what it measured and where its figures are. Nothing here is
imported by the report or by the commands that decide claims; the TRL peer lives in grpo_peer/.
`python -m benchmarks.peer_check` and `benchmarks.peer_step`, the peer's names before it moved, still
run it for one release (grpo_core/util/moved.py)."""

from grpo_core.util.moved import keep_old_names

keep_old_names(
    {
        f"{__name__}.peer_check": "grpo_peer.check",
        f"{__name__}.peer_step": "grpo_peer.one_step",
        f"{__name__}.trl_config": "grpo_peer.trl_config",
    }
)
