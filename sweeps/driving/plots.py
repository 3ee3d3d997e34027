"""Per-run figures logged as MLflow artifacts."""

from __future__ import annotations

from pathlib import Path


def reward_curve_png(metrics: list[dict], baseline: float | None, window: int, path: str | Path) -> Path:
    """Training reward per step, its trailing moving average, and the baseline threshold."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from grpo_core.record.run_metrics import moving_average

    steps = [m["step"] for m in metrics]
    rewards = [m["reward"] for m in metrics]
    fig, ax = plt.subplots(figsize=(6, 3.5), dpi=100)
    ax.plot(steps, rewards, lw=0.8, alpha=0.5, label="reward")
    avg = moving_average(rewards, window)
    if avg:
        ax.plot(steps[window - 1 :], avg, lw=1.8, label=f"moving average (w={window})")
    if baseline is not None:
        ax.axhline(baseline, color="grey", ls="--", lw=1, label="baseline")
    ax.set_xlabel("step")
    ax.set_ylabel("reward")
    ax.legend(loc="lower right", fontsize=8)  # a fixed place and fixed margins: one draw, not two
    fig.subplots_adjust(left=0.11, right=0.98, bottom=0.14, top=0.97)
    path = Path(path)
    fig.savefig(path)
    plt.close(fig)
    return path
