"""The GPU benchmarks' CPU-side parts, on hand-built inputs (no GPU here): the step profile's report
(one row per phase, each kernel counted once) and the worker-count benchmark's spec."""

from types import SimpleNamespace

from torch.autograd import DeviceType

from benchmarks.profile_step import report


def event(key, device, count=1, cpu=0.0, self_device=0.0, device_total=0.0):
    return SimpleNamespace(
        key=key,
        device_type=device,
        count=count,
        cpu_time_total=cpu,
        self_cpu_time_total=cpu,
        self_device_time_total=self_device,
        device_time_total=device_total,
    )


class Prof:
    def __init__(self, events):
        self.events = events

    def key_averages(self):
        return self.events


def test_gpu_report_merges_a_phase_and_counts_each_kernel_once():
    steps, wall_s = 2, 2.0  # 1 s per step
    events = [
        # a phase's host event (wall) and its device-side span (gpu_user_annotation), in µs over 2 steps
        event("phase: sample", DeviceType.CPU, cpu=1_200_000, device_total=60_000),
        event("phase: sample", DeviceType.CUDA, device_total=1_100_000),
        event("phase: optimize", DeviceType.CPU, cpu=600_000, device_total=10_000),
        event("phase: optimize", DeviceType.CUDA, device_total=580_000),
        # aten::mm launched the gemm kernel: both carry its 200 ms
        event("aten::mm", DeviceType.CPU, count=10, cpu=50_000, self_device=200_000, device_total=200_000),
        event("gemm_kernel", DeviceType.CUDA, count=10, self_device=200_000, device_total=200_000),
        event("elementwise_kernel", DeviceType.CUDA, count=40, self_device=100_000, device_total=100_000),
        event("ProfilerStep#1", DeviceType.CPU, cpu=2_000_000),
    ]
    lines = report(Prof(events), wall_s, steps, cuda=True, top=5)
    phase_rows = [line for line in lines if line.startswith("| sample") or line.startswith("| optimize")]
    assert phase_rows == ["| sample | 600.0 | 60% | 550.0 |", "| optimize | 300.0 | 30% | 290.0 |"]
    ops = [line for line in lines if line.startswith("| `")]
    assert [line.split("`")[1] for line in ops] == ["gemm_kernel", "elementwise_kernel"]  # no host operator
    assert "of 150.0 ms per step" in "\n".join(lines)
    # kernels 300 ms of 2 s: 85% of the wall time had none running (aten::mm counted again would say 75%)
    assert lines[-1].startswith("CPU-side share: **85%**") and "kernels 150.0 ms of 1000.0 ms per step" in lines[-1]


def test_cpu_report_ranks_host_operators():
    events = [
        event("phase: sample", DeviceType.CPU, cpu=900_000),
        event("aten::mm", DeviceType.CPU, count=4, cpu=300_000),
        event("aten::add", DeviceType.CPU, count=8, cpu=100_000),
    ]
    lines = report(Prof(events), 1.0, 1, cuda=False, top=5)
    assert "| sample | 900.0 | 90% |" in lines
    assert [line.split("`")[1] for line in lines if line.startswith("| `")] == ["aten::mm", "aten::add"]
    assert not any(line.startswith("CPU-side share") for line in lines)


def test_gpu_workers_share_spec_is_a_valid_spec_for_every_real_spec(tmp_path):
    """8 workers share one GPU: seeds 0..7 of each real spec's first point (whose own replication
    seeds may be among them) must make a spec the sweep accepts."""
    from pathlib import Path

    import yaml

    from benchmarks.gpu_workers import share_spec
    from sweeps.spec import load_spec

    real = sorted((Path(__file__).resolve().parents[1] / "experiments" / "real").glob("*.yaml"))
    assert real
    for path in real:
        target = tmp_path / f"{path.stem}.yaml"
        target.write_text(yaml.safe_dump(share_spec(path, 8, 6), sort_keys=False))
        spec = load_spec(str(target), check_points=False)
        assert list(spec.seeds) == list(range(8)) and not spec.replication_seeds
        assert all(len(values) == 1 for values in spec.grid.values())
