"""Shared test setup: one CPU thread, the hypothesis profile and the backend parametrisation.

A backend that does not work here (no GPU, no CuPy) shows up as a visible
skip, not as a missing test.
"""
import os

# One BLAS thread, here and in every process a test starts: on 2 shared cores, threads that spin
# waiting for each other make a step 10-25x slower (train/threads.py); a test that wants more asks.
os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
os.environ.setdefault("OMP_NUM_THREADS", "1")

import numba  # noqa: E402 - after the variables above, before the one below
import numpy as np  # noqa: E402
import pytest  # noqa: E402
from hypothesis import HealthCheck, settings  # noqa: E402

import minitensor as mt  # noqa: E402

# Numba's threads start at 1 too; its limit stays what it read at import (never change NUMBA_NUM_THREADS
# in a process once Numba is imported: it refuses), so a test may still ask for 2 (test_threads_agree.py).
# Processes started through tests/cli_helpers.py get NUMBA_NUM_THREADS=1 from the start.
numba.set_num_threads(1)

# deadline=None: JIT compiles blow through deadlines. The `backend` fixture is a plain
# string, so sharing it across generated examples is safe.
settings.register_profile("minitensor", deadline=None, max_examples=25, derandomize=True,
                          suppress_health_check=[HealthCheck.function_scoped_fixture])
settings.load_profile("minitensor")

# The cupy runs are also marked gpu, so `pytest -m gpu` (benchmarks/gpu_lease.sh) selects every GPU test.
BACKENDS = [
    pytest.param(name, marks=[pytest.mark.skipif(not mt.available(name), reason=f"backend {name} not available"),
                              *([pytest.mark.gpu] if name == "cupy" else [])],
                 id=name)
    for name in ("numpy", "numba", "cupy")
]


@pytest.fixture(params=BACKENDS)
def backend(request):
    return request.param


@pytest.fixture
def rng():
    return np.random.default_rng(1234)


# MT_REQUIRE_GPU=1 (set by benchmarks/gpu_lease.sh when nvidia-smi answers): a test marked gpu that would
# skip (no CuPy, no device, no NCCL, a broken NVRTC) fails instead, with the skip's reason, so a GPU test
# run on a machine whose GPU stack is broken cannot read as green.
REQUIRE_GPU = os.environ.get("MT_REQUIRE_GPU") == "1"


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    outcome = yield
    report = outcome.get_result()
    if REQUIRE_GPU and report.skipped and item.get_closest_marker("gpu") is not None:
        reason = report.longrepr[2] if isinstance(report.longrepr, tuple) else str(report.longrepr)
        reason = reason.removeprefix("Skipped: ")
        report.outcome = "failed"
        report.longrepr = f"MT_REQUIRE_GPU=1, and this GPU test would skip: {reason}"
