"""dropout_add_layernorm_forward on the GPU: every CUDA version, dtype and block size against the NumPy
reference (u given), and the seeded kernel against CupyBackend.uniform's draws, batch-major and time-major.
Skipped (visibly) without CuPy and a working GPU.

Shapes: D = d_model; leading axes are rows.
"""
import numpy as np
import pytest

import minitensor as mt
from minitensor.dtypes import BF16
from minitensor.kernels.bf16_cast.reference import as_float64
from minitensor.kernels.dropout_add_layernorm_forward import cupy_launch
from minitensor.kernels.dropout_add_layernorm_forward.reference import dropout_add_layernorm_forward_ref
from minitensor.testing import assert_close
from tests.minitensor.kernels._gpu import GPU_MARKS, cp, to_gpu
from tests.minitensor.kernels.test_dropout_add_layernorm_forward import inputs

pytestmark = GPU_MARKS

DTYPES = [np.float32, np.float16, np.float64, BF16]
CASES = [(v, block) for v, blocks in cupy_launch.BLOCKS.items() for block in blocks]
SHAPES = [(1, 1), (7, 33), (2, 3, 100), (300, 512), (3, 1024)]


def _check(got, want, name, dtype):
    for part, a, b in zip(("y", "z", "mean", "rstd"), got, want):
        assert a.dtype == b.dtype and a.shape == b.shape, part
        loose = dtype in (np.float16, BF16)
        assert_close(as_float64(a.get()), as_float64(b), f"{name} {part}",
                     atol=2e-2 if loose else 1e-5, rtol=2e-2 if loose else 1e-5)


@pytest.mark.parametrize("version,block", CASES)
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("p,with_bias", [(0.0, False), (0.3, True)])
@pytest.mark.parametrize("shape", SHAPES)
def test_dropout_add_layernorm_forward_gpu_matches_reference(version, block, dtype, p, with_bias, shape):
    args = inputs(np.random.default_rng(0), shape, dtype, p, with_bias)
    dev = to_gpu(*args[:3]) + (p,) + to_gpu(*args[4:7]) + (args[7],)
    got = cupy_launch.VERSIONS[version](*dev, block=block)
    _check(got, dropout_add_layernorm_forward_ref(*args), f"v{version} block {block}", dtype)


@pytest.mark.parametrize("time_major", [False, True])
def test_seeded_kernel_draws_cupy_backends_numbers(time_major):
    """The inline draws are CupyBackend.uniform(seed)'s, of the (B, T, D) transpose when time-major."""
    backend = mt.get_backend("cuda")
    x, s, _, _, bias, gamma, beta, eps = inputs(np.random.default_rng(1), (6, 4, 64), np.float32, 0.0, True)
    u = backend.draws(5, x.shape, time_major)
    want = cupy_launch.dropout_add_layernorm_forward(*to_gpu(x, s, u), 0.2, *to_gpu(bias, gamma, beta), eps)
    got = cupy_launch.dropout_add_layernorm_forward_seeded(*to_gpu(x, s), 5, 0.2, *to_gpu(bias, gamma, beta), eps,
                                                           time_major=time_major)
    for a, b in zip(got, want):
        np.testing.assert_array_equal(a.get(), b.get())
