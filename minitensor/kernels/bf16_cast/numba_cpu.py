"""float <-> bfloat16 conversion on the CPU with Numba; spec: reference.py (bf16 is uint16 bits).

v1: one element per prange iteration: bit arithmetic on the float32's bits (widen: shift left 16;
    narrow: round to nearest even, NaN kept a quiet NaN with its sign)

Shapes: flat views of x and y (any shape, same number of elements).
"""
import numpy as np
from numba import njit, prange

from minitensor.dtypes import BF16


@njit(cache=True, parallel=True)
def bf16_cast_v1_narrow(bits, y):
    for i in prange(bits.size):  # bits: the float32 inputs' bits as uint32
        u = np.uint64(bits[i])
        if (u & 0x7FFFFFFF) > 0x7F800000:
            y[i] = np.uint16((u >> 16) | 0x40)  # NaN: quiet, sign kept
        else:
            y[i] = np.uint16((u + 0x7FFF + ((u >> 16) & 1)) >> 16)  # nearest, ties to even


@njit(cache=True, parallel=True)
def bf16_cast_v1_widen(x, bits):
    for i in prange(x.size):  # bits: the float32 outputs' bits as uint32
        bits[i] = np.uint32(x[i]) << 16


def bf16_cast_v1(x, dtype):
    x1 = np.ascontiguousarray(x).reshape(-1)
    if np.dtype(dtype) == BF16:
        if x1.dtype.kind != "f":
            raise TypeError(f"bf16_cast: to bf16 needs a float input, got {x1.dtype}")
        y = np.empty(x1.size, BF16)
        bf16_cast_v1_narrow(x1.astype(np.float32, copy=False).view(np.uint32), y)
    else:
        if x1.dtype != BF16 or np.dtype(dtype).kind != "f":
            raise TypeError(f"bf16_cast: from bf16 needs uint16 bits and a float dtype, got {x1.dtype} -> {dtype}")
        bits = np.empty(x1.size, np.uint32)
        bf16_cast_v1_widen(x1, bits)
        y = bits.view(np.float32).astype(dtype, copy=False)
    return y.reshape(np.shape(x))


VERSIONS = {1: bf16_cast_v1}
DEFAULT = 1


def bf16_cast(x, dtype):
    """x float -> bf16 bits (dtype uint16), or bf16 bits -> float dtype."""
    return VERSIONS[DEFAULT](x, dtype)
