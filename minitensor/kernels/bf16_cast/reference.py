"""float <-> bfloat16 conversion, the spec: plain NumPy on the bits (bf16 is stored as uint16).

bf16 keeps float32's sign and 8 exponent bits and the top 7 of its 23 mantissa bits, so
    widen:   float32 bits = bf16 bits << 16                              (exact)
    narrow:  bf16 bits = (u + 0x7FFF + ((u >> 16) & 1)) >> 16,  u = float32 bits
             round to nearest, ties to even; a carry out of the mantissa bumps the exponent,
             so the largest finite floats round to inf, as IEEE rounding does;
             inf stays inf; NaN stays NaN: (u >> 16) | 0x40 keeps the sign and sets the quiet bit
             (plain rounding could carry a NaN's payload into inf);
             float64 and float16 inputs go through float32 first.
Shapes: any; the output has the input's shape.
"""
import numpy as np

from minitensor.dtypes import BF16


def float_to_bf16(x):
    """bf16 bits (uint16) of x (float16/32/64), rounded to nearest even through float32."""
    u = np.asarray(x, dtype=np.float32).view(np.uint32).astype(np.uint64)   # no overflow in the sum below
    is_nan = (u & 0x7FFFFFFF) > 0x7F800000
    rounded = (u + 0x7FFF + ((u >> 16) & 1)) >> 16                          # nearest, ties to even
    return np.where(is_nan, (u >> 16) | 0x40, rounded).astype(BF16)


def bf16_to_float32(bits):
    """float32 values of bf16 bits (uint16): exact."""
    return (np.asarray(bits, dtype=BF16).astype(np.uint32) << 16).view(np.float32)


def bf16_cast_ref(x, dtype):
    """x float (16/32/64) -> bf16 bits when dtype is uint16; x bf16 bits (uint16) -> float `dtype`."""
    dtype = np.dtype(dtype)
    if dtype == BF16:
        if np.asarray(x).dtype.kind != "f":
            raise TypeError(f"bf16_cast: to bf16 needs a float input, got {np.asarray(x).dtype}")
        return float_to_bf16(x)
    if np.asarray(x).dtype != BF16 or dtype.kind != "f":
        raise TypeError(f"bf16_cast: from bf16 needs uint16 bits and a float dtype, "
                        f"got {np.asarray(x).dtype} -> {dtype}")
    return bf16_to_float32(x).astype(dtype)


def as_float64(x):
    """A kernel input in float64 for a reference to compute in: bf16 bits widened, floats converted."""
    x = np.asarray(x)
    return bf16_to_float32(x).astype(np.float64) if x.dtype == BF16 else x.astype(np.float64)


def from_float64(y, dtype):
    """A reference's float64 result in a kernel output dtype (bf16 bits rounded through float32)."""
    return float_to_bf16(y) if np.dtype(dtype) == BF16 else np.asarray(y).astype(dtype)
