"""cupy_blas on the GPU: every plan of tests/minitensor/backends/test_cupy_blas.py through real cuBLAS (bf16 and fp16,
transposed, sliced, batched, shared and split-head operands, float32 output, bias) against
np.matmul, and CupyBackend's half-precision pieces (matmul, the bf16 add kernel, the seeded
dropout) against their NumPy definitions. Skipped (visibly) without CuPy and a working GPU.

Shapes: a (..., M, K), b (..., K, N) or (K, N).
"""
import numpy as np
import pytest

import minitensor as mt
from minitensor.backends import cupy_blas
from minitensor.kernels.bf16_cast.reference import bf16_to_float32, float_to_bf16
from minitensor.kernels.dropout_forward.reference import dropout_forward_ref
from minitensor.testing import assert_close
from tests.minitensor.kernels._gpu import GPU_MARKS, cp
from tests.minitensor.backends.test_cupy_blas import CASES, _half, _values, over_every_plan

pytestmark = GPU_MARKS


@over_every_plan
def test_cublas_plans_match_np_matmul(case, dtype, out):
    make_a, make_b, _ = CASES[case]
    a, b = make_a(dtype), make_b(dtype)
    bias = _half(np.random.default_rng(1).standard_normal(b.shape[-1]), dtype) if out == "bias" else None
    out_dtype = np.float32 if out == "float32" else None
    dev = [_device_view(x) for x in (a, b)]
    c = cupy_blas.matmul(*dev, out_dtype, None if bias is None else cp.asarray(bias), xp=cp, gemm=cupy_blas.cublas_gemm)
    want = _values(a) @ _values(b) + (0 if bias is None else _values(bias))
    got = c.get()
    assert got.dtype == np.dtype(out_dtype or dtype)
    assert_close(got, _half(want, got.dtype) if got.dtype != np.float32 else want.astype(np.float32),
                 f"cuBLAS {case}", dtype=np.float32, atol=2e-2, rtol=2e-2)


def _device_view(x):
    """x on the device as the same view (strides and offset) of a device copy of its whole buffer."""
    root = x
    while isinstance(root.base, np.ndarray):
        root = root.base
    offset = (x.__array_interface__["data"][0] - root.__array_interface__["data"][0]) // x.itemsize
    flat = cp.asarray(np.ascontiguousarray(root).reshape(-1))
    return cp.lib.stride_tricks.as_strided(flat[offset:], x.shape, x.strides)


def test_device_views_keep_the_layout():
    x = np.arange(60, dtype=np.float16).reshape(5, 12)[:, 2:9].T
    np.testing.assert_array_equal(_device_view(x).get(), x)


def test_cupy_backend_matmul_add_and_dropout():
    backend = mt.get_backend("cuda")
    rng = np.random.default_rng(2)
    x = rng.standard_normal((3, 40, 24)).astype(np.float32)
    bits = float_to_bf16(x)
    w = float_to_bf16(rng.standard_normal((24, 16)))
    y = backend.matmul(cp.asarray(bits), cp.asarray(w), out_dtype=np.float32).get()
    assert_close(y, _values(bits) @ _values(w), "bf16 Linear-shaped product", atol=1e-2, rtol=1e-2)
    s = backend.add(cp.asarray(bits), cp.asarray(bits[:1])).get()                     # broadcasts like +
    np.testing.assert_array_equal(s, float_to_bf16(bf16_to_float32(bits) + bf16_to_float32(bits[:1])))
    u = backend.uniform(7, x.shape, "float32")
    for data in (x, bits):
        seeded = backend.dropout(cp.asarray(data), 0.1, 7).get()
        assert_close(seeded, dropout_forward_ref(data, u.get(), 0.1), "seeded dropout: the same draws")


def test_cupy_backend_time_major_dropout_and_bf16_scale():
    """Time-major dropout draws the numbers of the (B, T, ...) transpose; scale is one rounding on bf16 bits."""
    backend = mt.get_backend("cuda")
    x = np.random.default_rng(3).standard_normal((5, 4, 64)).astype(np.float32)   # (T, B, D)
    time_major = backend.dropout(cp.asarray(x), 0.3, 9, time_major=True).get()
    batch_major = backend.dropout(cp.asarray(np.ascontiguousarray(x.swapaxes(0, 1))), 0.3, 9).get()
    np.testing.assert_array_equal(time_major, batch_major.swapaxes(0, 1))
    bits = float_to_bf16(x[0])
    factor = np.linspace(0.5, 2, 4, dtype=np.float32)[:, None]
    scaled = backend.scale(cp.asarray(bits), cp.asarray(factor)).get()
    np.testing.assert_array_equal(scaled, float_to_bf16(bf16_to_float32(bits) * factor))


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_float32_and_float64_plans_and_strided_outputs_through_cublas(dtype):
    """Every plan in float32 and float64 (COMPUTE_32F, 64F), and a product written into each head's slot of a
    time-major (T, B, H·K) array, then added to it (beta = 1)."""
    for case, (make_a, make_b, _) in CASES.items():
        a, b = make_a(np.float64).astype(dtype), make_b(np.float64).astype(dtype)
        c = cupy_blas.matmul(_device_view(a), _device_view(b), xp=cp, gemm=cupy_blas.cublas_gemm).get()
        assert_close(c, (a.astype(np.float64) @ b.astype(np.float64)).astype(dtype), f"cuBLAS {case} {dtype}",
                     atol=1e-4, rtol=1e-4)
    T, B, H, K, M = 5, 2, 3, 4, 6
    wide = cp.zeros((T, B, H * K), dtype=dtype)
    heads = wide.reshape(T, B, H, K).transpose(1, 2, 0, 3)
    rng = np.random.default_rng(4)
    a, b = rng.standard_normal((B, H, T, M)).astype(dtype), rng.standard_normal((B, H, M, K)).astype(dtype)
    for _ in range(2):
        cupy_blas.matmul(cp.asarray(a), cp.asarray(b), xp=cp, gemm=cupy_blas.cublas_gemm, out=heads, accumulate=True)
    assert_close(heads.get(), 2 * (a @ b), "written in place, added", atol=1e-4, rtol=1e-4)
