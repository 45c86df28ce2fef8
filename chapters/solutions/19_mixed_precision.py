"""Solutions to chapter 19's exercises (checked by `check_to_bits`, `check_compensated_updates`) and the answer
key PREDICT."""
import numpy as np


def to_bits(values, exp_bits, man_bits):
    """Bit patterns of exactly representable values: sign, then exponent and mantissa from frexp.

    frexp writes |x| = f · 2^k with 0.5 <= f < 1, so a normal number has E = k − 1 + bias and
    M = (2f − 1) · 2^m; below the smallest normal (E would be <= 0) the number is subnormal:
    E = 0 and M = |x| / 2^(1 − bias − m). Infinity has all exponent bits set and M = 0.
    """
    values = np.asarray(values, dtype=np.float64)
    bias = 2 ** (exp_bits - 1) - 1
    a = np.abs(values)
    f, k = np.frexp(np.where(np.isinf(a), 1.0, a))
    exponent = k - 1 + bias
    normal = (exponent.astype(np.int64) << man_bits) | np.round((2 * f - 1) * 2 ** man_bits).astype(np.int64)
    tiny = np.where((exponent >= 1) | np.isinf(a), 0.0, a)                    # the subnormals (and zeros) only
    subnormal = np.round(np.ldexp(tiny, bias - 1 + man_bits)).astype(np.int64)
    inf = ((1 << exp_bits) - 1) << man_bits
    bits = np.where(np.isinf(a), inf, np.where((exponent >= 1) & (a > 0), normal, subnormal))
    return bits | (np.signbit(values).astype(np.int64) << (exp_bits + man_bits))


def compensated_updates(w0, update, steps):
    """Kahan summation in fp16: `lost` holds the part of each addition that rounding dropped,
    and is added back into the next update, so the small updates accumulate instead of vanishing."""
    w, lost = np.float16(w0), np.float16(0.0)
    for _ in range(steps):
        y = np.float16(update - lost)            # this update plus what the last addition lost
        t = np.float16(w + y)                    # rounded: the low part of y may be gone
        lost = np.float16(np.float16(t - w) - y)  # (what was added) − (what we meant to add); exact in fp16
        w = t
    return w


PREDICT = """Exercise 1. fp16: 512.0. Between 512 and 1024 fp16 numbers are 2^(9−10) = 0.5 apart, so 512.2
rounds back to 512 every time (0.2 < 0.25, half the gap). bf16: 512.0 as well (the gap there is 2^(9−7) = 4).
fp32: 514.0 (up to float32 rounding, 513.99994...): the gap at 512 is 2^(9−23) ≈ 6e-5, so every update counts.
This is why the master weights that Adam updates stay in fp32."""
