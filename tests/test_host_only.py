"""HostOnlyBackend (backends/host_only.py) records what CountingBackend records, computing nothing.

The record of a training step is the same launch for launch (by kind), sync for sync, array for
array, byte for byte: its shape rules stand in for every computation the step makes (none runs
for real), so the host time `bench --host-only` reports is the step's own Python. Its arrays
take address space, not memory, and never overlap.
"""
import json
import resource
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from minitensor.backends.counting import CountingBackend
from minitensor.backends.host_only import Arena, HostOnlyBackend
from tests.test_launch_count import counted_step

ROOT = Path(__file__).resolve().parents[1]


@pytest.mark.parametrize("precision", ["bf16", "fp32", "fp16"])
def test_a_step_records_what_the_counting_backend_counts(precision):
    counted, _, _ = counted_step(precision, CountingBackend())
    backend = HostOnlyBackend()
    recorded, stats, _ = counted_step(precision, backend)
    assert recorded == counted
    assert backend.counts.executed == {}, "computed for real on the host: give these a shape rule"
    assert stats.stepped                                              # the host reads zeros: finite


def test_bytes_flops_and_arrays_made_are_the_counting_backends():
    backends = [CountingBackend(), HostOnlyBackend()]
    for backend in backends:
        counted_step("bf16", backend)
    counting, host_only = (b.counts for b in backends)
    assert host_only.bytes_by_kind == counting.bytes_by_kind and host_only.flops_by_kind == counting.flops_by_kind
    assert sorted(host_only.allocations, key=str) == sorted(counting.allocations, key=str)
    assert counting.flops_by_kind["cublas gemm"] > 0


def test_the_arena_hands_out_distinct_untouched_memory():
    arena = Arena()
    before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    big = [arena.empty((1 << 30,), np.float32) for _ in range(8)]     # 32 GiB of arrays
    assert resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - before < 100 * 1024   # < 100 MiB more resident
    starts = sorted(a.__array_interface__["data"][0] for a in big)
    assert all(b - a >= (1 << 32) for a, b in zip(starts, starts[1:]))
    f = arena.empty((3, 5), np.float64, "F")
    assert f.flags.f_contiguous and f.shape == (3, 5)
    k = arena.empty_like(np.empty((4, 6, 2)).transpose(1, 0, 2))     # order K keeps the stride order
    assert k.shape == (6, 4, 2) and k.strides[1] > k.strides[0] > k.strides[2]


def test_bench_host_only_cli_reports_the_step():
    done = subprocess.run([sys.executable, "-m", "train", "bench", "--backend", "cuda", "--precision", "bf16",
                           "--host-only", "--preset", "cpu", "--steps", "2", "--warmup", "0", "--json"],
                          capture_output=True, text=True, cwd=ROOT, timeout=300)
    assert done.returncode == 0, done.stderr
    result = json.loads(done.stdout.strip().splitlines()[-1])
    assert result["host_ms_per_step"] > 0 and result["syncs_per_step"] == 1
    assert result["launches_per_step"] == sum(c["launches"] for c in result["by_class"].values())
    assert result["by_class"]["cuBLAS"]["tflop"] > 0 and result["executed_on_host"] == {}
