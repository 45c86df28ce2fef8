"""float <-> bfloat16 conversion with numba.cuda; spec: reference.py (bf16 is uint16 bits).

v1: one thread per element, the same bit arithmetic as cuda.cu on the float32's bits

Python you can step through: it also runs on the CPU under the CUDA simulator
(NUMBA_ENABLE_CUDASIM=1, set before Python starts), which is how CI tests it.
Shapes: flat views of x and y.
"""
from __future__ import annotations

import numpy as np

from ..numba_cuda_compat import import_numba_cuda
from ...dtypes import BF16

cuda = import_numba_cuda()
THREADS = 128


@cuda.jit
def _narrow(bits, y):
    """bits: float32 bits as uint32 -> y: bf16 bits (uint16), nearest even, NaN kept."""
    i = cuda.grid(1)
    if i < bits.size:
        u = np.uint64(bits[i])
        if (u & 0x7FFFFFFF) > 0x7F800000:
            y[i] = np.uint16((u >> 16) | 0x40)
        else:
            y[i] = np.uint16((u + 0x7FFF + ((u >> 16) & 1)) >> 16)


@cuda.jit
def _widen(x, bits):
    """x: bf16 bits (uint16) -> bits: float32 bits (uint32), exact."""
    i = cuda.grid(1)
    if i < x.size:
        bits[i] = np.uint32(x[i]) << 16


def _array_module(x):
    if hasattr(x, "__cuda_array_interface__"):  # a CuPy array: stay on the device
        import cupy

        return cupy
    return np  # NumPy: numba copies to the device and back


def launch_v1(x, dtype):
    xp = _array_module(x)
    x1 = xp.ascontiguousarray(x).reshape(-1)
    blocks = max(1, (x1.size + THREADS - 1) // THREADS)
    if np.dtype(dtype) == BF16:
        y = xp.empty(x1.size, BF16)
        if x1.size:
            _narrow[blocks, THREADS](x1.astype(np.float32).view(np.uint32), y)
    else:
        bits = xp.empty(x1.size, np.uint32)
        if x1.size:
            _widen[blocks, THREADS](x1, bits)
        y = bits.view(np.float32).astype(dtype)
    return y.reshape(x.shape)


VERSIONS = {1: launch_v1}
DEFAULT = 1


def bf16_cast(x, dtype):
    """x float -> bf16 bits (dtype uint16), or bf16 bits -> float dtype."""
    return VERSIONS[DEFAULT](x, dtype)
