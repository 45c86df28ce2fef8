"""bfloat16 in minitensor: a uint16 array of bits, because NumPy and CuPy have no bfloat16 dtype.

A bf16 value is the top half of the float32 with the same sign and exponent: widening is a
16-bit shift, narrowing rounds to nearest even (kernels/bf16_cast/reference.py is the spec).
So an array of dtype BF16 (= uint16) holds bf16 numbers wherever minitensor meets one, and only
code that knows this may compute on it: the kernels (every kernels/*/ that lists bf16 in its
contract), `Backend.matmul` (cuBLAS with CUDA_R_16BF on the GPU), `Backend.add`, and the Cast
and Relu Functions. Movement ops (reshape, transpose, gathers, concatenation) copy bits and
are exact as they are. Everything else would treat the bits as integers: don't.
"""
from __future__ import annotations

import numpy as np

BF16 = np.dtype(np.uint16)
HALF_DTYPES = (np.dtype(np.float16), BF16)   # the activation dtypes of mixed precision


def is_bf16(dtype) -> bool:
    return np.dtype(dtype) == BF16


def is_half(dtype) -> bool:
    return np.dtype(dtype) in HALF_DTYPES
