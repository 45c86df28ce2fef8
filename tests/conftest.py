"""Shared test setup: the hypothesis profile and the backend parametrisation.

A backend that does not work here (no GPU, no CuPy) shows up as a visible
skip, not as a missing test.
"""
import numpy as np
import pytest
from hypothesis import HealthCheck, settings

import minitensor as mt

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
