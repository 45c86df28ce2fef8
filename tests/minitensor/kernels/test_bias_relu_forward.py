"""bias_relu_forward: every Numba version vs the reference; the reference vs max(0, x + b); the GPU launcher's
host code on the CPU (NumPy for CuPy, its kernels emulated): in place, the bias's dtype pairs, the 2-d grid.

Shapes: R rows, C columns (d_ff); x (..., C), bias (C,).
"""
import numpy as np
import pytest

from minitensor.dtypes import BF16
from minitensor.kernels.bf16_cast.reference import bf16_to_float32
from minitensor.kernels.bias_relu_forward import cupy_launch, numba_cpu
from minitensor.kernels.bias_relu_forward.reference import bias_relu_forward_ref
from tests.minitensor.kernels._close import as_dtype, assert_close
from tests.minitensor.kernels._gpu import launcher_on_numpy as on_numpy

SHAPES = [(1, 1), (7, 5), (33, 17), (2, 3, 100), (64, 2048)]


@pytest.mark.parametrize("version", sorted(numba_cpu.VERSIONS))
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("shape", SHAPES)
def test_bias_relu_forward_matches_reference(monkeypatch, version, dtype, shape):
    monkeypatch.setattr(numba_cpu, "DEFAULT", version)
    rng = np.random.default_rng(0)
    x = rng.standard_normal(shape).astype(dtype)
    bias = rng.standard_normal(shape[-1]).astype(dtype)
    got = numba_cpu.bias_relu_forward(x.copy(), bias)
    assert got.dtype == dtype and got.shape == shape
    assert_close(got, bias_relu_forward_ref(x.copy(), bias), f"bias_relu_forward v{version}")


def test_bias_relu_forward_reference_is_max_0_x_plus_b_in_place():
    x = np.array([[1.0, -2.0, 0.5], [-1.0, 3.0, -0.25]])
    out = bias_relu_forward_ref(x, np.array([0.5, 1.0, -1.0]))
    assert out is x
    np.testing.assert_array_equal(out, [[1.5, 0.0, 0.0], [0.0, 4.0, 0.0]])
    bits = as_dtype(np.array([[1.0, -3.0]]), BF16)
    bias_relu_forward_ref(bits, np.array([0.5, 1.0], np.float32))   # bf16 bits, a float32 master bias
    np.testing.assert_array_equal(bf16_to_float32(bits), [[1.5, 0.0]])


# ---- the GPU launcher's host code, run on the CPU ----------------------------------------------
def _emulated_kernel(name):
    """What cuda.cu's kernel `name` does to the arrays the launcher passes (the CUDA runs in *_gpu.py)."""
    def run(grid, block, args):
        x, bias, n_or_rows, C = args
        assert bias.dtype in (x.dtype, np.float32), name         # the instantiated (T, B) pairs
        assert int(n_or_rows) in (x.size, x.size // int(C)), name
        bias_relu_forward_ref(x, bias)
    return run


@pytest.fixture
def launcher_on_numpy(monkeypatch):
    return on_numpy(monkeypatch, cupy_launch, _emulated_kernel)


@pytest.mark.parametrize("version", sorted(cupy_launch.VERSIONS))
@pytest.mark.parametrize("dtype,bias_dtype", [(np.float32, np.float32), (BF16, BF16), (BF16, np.float32),
                                              (np.float16, np.float64)], ids=["f32", "bf16", "bf16-f32", "f16-f64"])
def test_gpu_launcher_writes_in_place_and_casts_an_odd_bias(launcher_on_numpy, version, dtype, bias_dtype):
    rng = np.random.default_rng(1)
    x = as_dtype(rng.standard_normal((4, 6)), dtype)
    bias = as_dtype(rng.standard_normal(6), bias_dtype)
    read = bias if np.dtype(bias_dtype) in (np.dtype(dtype), np.dtype(np.float32)) else as_dtype(bias, dtype)
    want = bias_relu_forward_ref(x.copy(), read)                     # another bias dtype: cast to x's first
    got = launcher_on_numpy.VERSIONS[version](x, bias)
    assert got is x
    np.testing.assert_array_equal(got, want)
    with pytest.raises(ValueError, match="C-contiguous"):
        launcher_on_numpy.VERSIONS[version](x.T, bias[:4])
