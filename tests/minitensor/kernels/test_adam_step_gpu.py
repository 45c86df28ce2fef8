"""adam_step on the GPU: every CUDA version, dtype pair, odd size and block size against the NumPy
reference, over several steps. Skipped (visibly) without CuPy and a working GPU.

Shapes: P = number of parameters (flat buffers).
"""
import numpy as np
import pytest

from minitensor.dtypes import BF16
from minitensor.kernels.adam_step import cupy_launch
from minitensor.kernels.adam_step.reference import adam_step_ref
from minitensor.kernels.bf16_cast.reference import from_float64
from minitensor.testing import assert_close
from tests.minitensor.kernels._gpu import GPU_MARKS, cp, to_gpu

pytestmark = GPU_MARKS

DTYPE_PAIRS = [(np.float32, np.float32), (np.float32, np.float16), (np.float64, np.float64)]
CASES = [(v, block) for v, blocks in cupy_launch.BLOCKS.items() for block in blocks]
SIZES = [(1,), (1000,), (4097,), (3, 5, 7), (300_001,)]


@pytest.mark.parametrize("version,block", CASES)
@pytest.mark.parametrize("param_dtype,grad_dtype", DTYPE_PAIRS)
@pytest.mark.parametrize("shape", SIZES)
def test_adam_step_gpu_matches_reference(version, block, param_dtype, grad_dtype, shape):
    rng = np.random.default_rng(0)
    param = rng.standard_normal(shape).astype(param_dtype)
    m = np.zeros(shape, param_dtype)
    v = np.zeros(shape, param_dtype)
    param_gpu, m_gpu, v_gpu = to_gpu(param, m, v)
    hyper = dict(lr=1e-3, beta1=0.9, beta2=0.98, eps=1e-9)  # §5.3
    for step in (1, 2, 3):
        grad = rng.standard_normal(shape).astype(grad_dtype)
        cupy_launch.VERSIONS[version](param_gpu, cp.asarray(grad), m_gpu, v_gpu, step=step, block=block,
                                      **hyper)
        adam_step_ref(param, grad, m, v, step=step, **hyper)
    name = f"adam_step v{version} block {block}"
    assert_close(param_gpu, param, f"{name} param")
    assert_close(m_gpu, m, f"{name} m")
    assert_close(v_gpu, v, f"{name} v")


def test_adam_step_gpu_default_wrapper_and_errors():
    p, g, m, v = (cp.ones(10, cp.float32) for _ in range(4))
    cupy_launch.adam_step(p, g, m, v, 0.1, 0.9, 0.98, 1e-9, 1)
    assert bool((p < 1).all()), "a positive gradient must lower the parameters"
    with pytest.raises(TypeError):
        cupy_launch.adam_step(p, g, m.astype(cp.float64), v, 0.1, 0.9, 0.98, 1e-9, 1)


@pytest.mark.parametrize("version,block", CASES)
@pytest.mark.parametrize("grad_dtype", [np.float32, np.float16])
@pytest.mark.parametrize("half_dtype", [np.float16, BF16], ids=["fp16", "bf16"])
def test_adam_step_gpu_writes_the_half_copy(version, block, grad_dtype, half_dtype):
    rng = np.random.default_rng(4)
    param = rng.standard_normal(4097).astype(np.float32)
    m, v = np.zeros_like(param), np.zeros_like(param)
    half = np.zeros(param.shape, half_dtype)
    param_gpu, m_gpu, v_gpu, half_gpu = to_gpu(param, m, v, half)
    hyper = dict(lr=1e-3, beta1=0.9, beta2=0.98, eps=1e-9)
    for step in (1, 2):
        grad = rng.standard_normal(param.shape).astype(grad_dtype)
        cupy_launch.VERSIONS[version](param_gpu, cp.asarray(grad), m_gpu, v_gpu, step=step, half=half_gpu,
                                      block=block, **hyper)
        adam_step_ref(param, grad, m, v, step=step, half=half, **hyper)
    assert_close(param_gpu, param, "adam param with half copy")
    # the half copy is the kernel's own param rounded once: bit for bit
    np.testing.assert_array_equal(half_gpu.get(), from_float64(param_gpu.get(), half_dtype))
