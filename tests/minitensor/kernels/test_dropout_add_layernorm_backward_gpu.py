"""dropout_add_layernorm_backward on the GPU: every CUDA version, dtype and block size against the NumPy
reference (one and two gradients, dropout, bias), the seeded kernel against CupyBackend.uniform's draws,
and the sums bit for bit the same twice. Skipped (visibly) without CuPy and a working GPU.

Shapes: D = d_model; leading axes are rows.
"""
import numpy as np
import pytest

import minitensor as mt
from minitensor.dtypes import BF16
from minitensor.kernels.bf16_cast.reference import as_float64
from minitensor.kernels.dropout_add_layernorm_backward import cupy_launch
from minitensor.kernels.dropout_add_layernorm_backward.reference import dropout_add_layernorm_backward_ref
from minitensor.testing import assert_close
from tests.minitensor.kernels._gpu import GPU_MARKS, cp, to_gpu
from tests.minitensor.kernels.test_dropout_add_layernorm_backward import inputs

pytestmark = GPU_MARKS

DTYPES = [np.float32, np.float16, np.float64, BF16]
CASES = [(v, block) for v, blocks in cupy_launch.BLOCKS.items() for block in blocks]
SHAPES = [(1, 1), (7, 33), (2, 3, 100), (3000, 512), (3, 1024)]


def _run(args, **kwargs):
    dys, z, u, p, gamma, mean, rstd, with_bias = args
    return cupy_launch.launch_v1(to_gpu(*dys), *to_gpu(z, u), p, *to_gpu(gamma, mean, rstd), with_bias, **kwargs)


def _check(got, want, name, dtype, rows):
    for part, a, b in zip(("dx", "ds", "dgamma", "dbeta", "dbias"), got, want):
        if b is None:
            assert a is None, part
            continue
        loose = dtype in (np.float16, BF16)
        sums = part in ("dgamma", "dbeta", "dbias")
        atol = 1e-5 * np.sqrt(rows) * 10 if sums else (2e-2 if loose else 1e-5)
        assert_close(as_float64(a.get()), as_float64(b), f"{name} {part}", atol=atol, rtol=2e-2 if loose else 1e-5)


@pytest.mark.parametrize("block", [b for _, b in CASES])
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("p,two,with_bias", [(0.0, False, False), (0.3, True, True)])
@pytest.mark.parametrize("shape", SHAPES)
def test_dropout_add_layernorm_backward_gpu_matches_reference(block, dtype, p, two, with_bias, shape):
    args = inputs(np.random.default_rng(0), shape, dtype, p, two) + (with_bias,)
    got = _run(args, block=block)
    _check(got, dropout_add_layernorm_backward_ref(*args), f"block {block}", dtype, int(np.prod(shape[:-1])))


@pytest.mark.parametrize("time_major", [False, True])
def test_seeded_kernel_draws_cupy_backends_numbers_and_sums_deterministically(time_major):
    backend = mt.get_backend("cuda")
    dys, z, _, _, gamma, mean, rstd = inputs(np.random.default_rng(1), (60, 40, 512), np.float32, 0.0, True)
    u = backend.draws(9, z.shape, time_major)
    want = cupy_launch.launch_v1(to_gpu(*dys), cp.asarray(z), u, 0.2, *to_gpu(gamma, mean, rstd), True)
    got = [cupy_launch.dropout_add_layernorm_backward_seeded(to_gpu(*dys), cp.asarray(z), 9, 0.2,
                                                              *to_gpu(gamma, mean, rstd), True, time_major=time_major)
           for _ in range(2)]
    for a, b, c in zip(got[0], got[1], want):
        np.testing.assert_array_equal(a.get(), c.get())
        assert bool((a == b).all()), "a fixed summation order"
