"""GPU test helpers: is a CuPy device usable here, poisoned memory for unwritten outputs, and a
launcher's host code run on the CPU.

The GPU kernel tests (test_*_gpu.py) use GPU_MARKS: they are marked `gpu` and skip visibly,
with the reason, when CuPy is missing or no device works (CI has neither).
"""
import sys
import types

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


def launcher_on_numpy(monkeypatch, launcher, emulated_kernel):
    """`launcher` (a kernel's cupy_launch module) with NumPy standing in for CuPy and its kernels emulated:
    `emulated_kernel(name)` does to the arrays it is passed what cuda.cu's kernel `name` does. What the
    launcher allocates, checks, passes and hands back is then its own code, run on the CPU (the CUDA
    itself runs in the *_gpu.py tests)."""
    def function(name):
        kernel = emulated_kernel(name)
        kernel.max_threads_per_block = 1024                     # what fit_block asks a kernel
        return kernel

    monkeypatch.setitem(sys.modules, "cupy", np)
    monkeypatch.setattr(launcher, "CUDA", types.SimpleNamespace(function=function))
    return launcher
