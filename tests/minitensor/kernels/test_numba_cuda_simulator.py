"""numba.cuda kernels (softmax, layernorm, bf16 conversion) under the CUDA simulator (runs in CI
without a GPU), plus the compat shim.

NUMBA_ENABLE_CUDASIM must be set before numba.cuda is first imported, so the kernels run in a
fresh Python subprocess that compares them with the NumPy references on small shapes.
"""
import os
import subprocess
import sys
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parents[3]

SCRIPT = r"""
import numpy as np
from minitensor.kernels.layernorm_forward import numba_cuda as ln
from minitensor.kernels.layernorm_forward.reference import layernorm_forward_ref
from minitensor.kernels.softmax_forward import numba_cuda as sm
from minitensor.kernels.softmax_forward.reference import softmax_forward_ref
from minitensor.testing import assert_close
from numba import cuda

assert cuda.simulator_enabled if hasattr(cuda, "simulator_enabled") else True
rng = np.random.default_rng(0)
for dtype in (np.float32, np.float64):
    x = (rng.standard_normal((2, 1, 3, 70)) * 4).astype(dtype)  # L = 70 > THREADS: strided loop
    mask = rng.random((2, 1, 1, 70)) < 0.3
    mask[0] = True  # fully blocked rows -> zeros
    assert_close(sm.softmax_forward(x, 0.7, mask), softmax_forward_ref(x, 0.7, mask), "softmax sim")
    assert_close(sm.softmax_forward(x, 0.7, None), softmax_forward_ref(x, 0.7, None), "softmax sim nomask")
    special = np.array([[np.inf, 1, np.inf, -np.inf], [-np.inf] * 4, [np.nan, 1, 2, 3], [-np.inf, 0, 1, 2]], dtype)
    assert_close(sm.softmax_forward(special, 1.0, None), softmax_forward_ref(special, 1.0, None), "softmax sim inf/nan")
    x = (rng.standard_normal((3, 70)) * 2 + 1).astype(dtype)
    gamma, beta = rng.standard_normal(70), rng.standard_normal(70)
    got, ref = ln.layernorm_forward(x, gamma, beta, 1e-5), layernorm_forward_ref(x, gamma, beta, 1e-5)
    for name, g, r in zip(("y", "mean", "rstd"), got, ref):
        assert_close(g, r, f"layernorm sim {name}", atol=1e-5 if dtype == np.float32 else None)
from minitensor.dtypes import BF16
from minitensor.kernels.bf16_cast import numba_cuda as bc
from minitensor.kernels.bf16_cast.reference import bf16_cast_ref
x = (rng.standard_normal((3, 50)) * 100).astype(np.float32)
x[0, :6] = [np.inf, -np.inf, np.nan, -0.0, 3.4e38, 1.00390625]  # specials, a tie, the carry into inf
bits = bc.bf16_cast(x, BF16)
assert bits.dtype == BF16 and (bits == bf16_cast_ref(x, BF16)).all(), "bf16 narrow sim"
back = bc.bf16_cast(bits, np.float32)
assert np.array_equal(back, bf16_cast_ref(bits, np.float32), equal_nan=True), "bf16 widen sim"
print("SIMULATOR OK")
"""


def test_numba_cuda_kernels_match_reference_under_simulator():
    env = dict(os.environ, NUMBA_ENABLE_CUDASIM="1", PYTHONPATH=str(REPO))
    done = subprocess.run([sys.executable, "-c", SCRIPT], cwd=REPO, env=env, capture_output=True,
                          text=True, timeout=300)
    assert done.returncode == 0 and "SIMULATOR OK" in done.stdout, done.stdout + done.stderr


def test_import_numba_cuda_restores_row_stack_only_when_missing(monkeypatch):
    from minitensor.kernels.numba_cuda_compat import import_numba_cuda

    if "row_stack" in vars(np):  # NumPy < 2.5: pretend it is 2.5, where the alias is gone
        monkeypatch.delattr(np, "row_stack")
    cuda = import_numba_cuda()
    assert np.row_stack is np.vstack
    assert hasattr(cuda, "jit")
