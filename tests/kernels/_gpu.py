"""GPU test helpers: is a CuPy device usable here, and poisoned memory for unwritten outputs.

The GPU kernel tests (test_*_gpu.py) use GPU_MARKS: they are marked `gpu` and skip visibly,
with the reason, when CuPy is missing or no device works (CI has neither).
"""
import numpy as np
import pytest


def _probe():
    try:
        import cupy

        cupy.asarray([1.0]).sum().item()  # compiles and runs a tiny kernel: the device really works
        return cupy, ""
    except Exception as exc:  # ImportError, CUDARuntimeError, NVRTC errors, ...
        return None, f"{type(exc).__name__}: {exc}".splitlines()[0]


cp, WHY = _probe()
GPU_MARKS = [pytest.mark.gpu, pytest.mark.skipif(cp is None, reason=f"no usable CuPy GPU ({WHY})")]


def poison_pool(*outputs):
    """Leave freed blocks of 0xFF bytes (NaN in float16/32/64) of each (shape, dtype) in the pool.

    The launchers allocate outputs with cupy.empty, which reuses freed blocks of the same size,
    so an element a kernel forgets to write stays NaN and fails assert_close (best effort:
    the pool may hand out another block).
    """
    cp.get_default_memory_pool().free_all_blocks()
    blocks = [cp.full(max(int(np.prod(shape)), 1) * np.dtype(dtype).itemsize, 0xFF, dtype=cp.uint8)
              for shape, dtype in outputs]
    cp.cuda.Device().synchronize()
    del blocks


def to_gpu(*arrays):
    """NumPy arrays (or None) to CuPy."""
    return tuple(None if a is None else cp.asarray(a) for a in arrays)
