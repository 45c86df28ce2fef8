"""Scalar math helpers shared by the Numba CPU kernels (softmax, cross-entropy).

Numba has no vectorised exp on this kind of machine (no Intel SVML), so a loop calling np.exp
runs one libm call per element (~2.4 ns), about 5x slower than NumPy's SIMD exp. exp_fast is
exp written as plain arithmetic (range reduction + polynomial + exponent bits), which LLVM can
vectorise; for float32 it is within ~2 ulp of expf. Float64 inputs keep np.exp (gradchecks).
Works unchanged under NUMBA_DISABLE_JIT=1 (NumPy scalars support the same calls).
"""
import numpy as np
from numba import njit

LOG2E = 1.4426950408889634
LN2_HI = 0.693359375  # ln 2 split in two (Cody-Waite) so k * LN2_HI is exact in float32
LN2_LO = -2.12194440e-4


@njit(inline="always")
def exp_f32(x):
    """exp(x) for a float32 x: x = k ln2 + r with |r| <= ln2/2, exp(r) by a degree-7 polynomial."""
    x = min(max(x, np.float32(-87.0)), np.float32(88.0))  # keep 2^k a normal float32
    k = np.floor(x * np.float32(LOG2E) + np.float32(0.5))
    r = x - k * np.float32(LN2_HI) - k * np.float32(LN2_LO)
    p = np.float32(1.9875691500e-4)  # Cephes expf coefficients
    p = p * r + np.float32(1.3981999507e-3)
    p = p * r + np.float32(8.3334519073e-3)
    p = p * r + np.float32(4.1665795894e-2)
    p = p * r + np.float32(1.6666665459e-1)
    p = p * r + np.float32(5.0000001201e-1)
    p = p * r * r + r + np.float32(1.0)
    two_k = np.int32((np.int32(k) + np.int32(127)) << np.int32(23))  # exponent bits of 2^k
    return p * two_k.view(np.float32)


@njit(inline="always")
def exp_like(x, template):
    """exp(x) as exp_f32 when the template array is float32, else np.exp (float64 stays exact)."""
    if template.itemsize == 4:  # float32 arrays; loop-invariant, so LLVM unswitches the loop
        return exp_f32(x)
    return np.exp(x)


MAX_LANES = 64  # running maxima kept side by side in row_max: a multiple of every SIMD width


@njit(inline="always")
def row_max(row):
    """max of a 1-D array whose loop vectorises: a `m = max(m, x)` loop stays scalar in Numba
    (~1 ns/element, measured), so MAX_LANES independent maxima run over aligned blocks first."""
    lanes = np.full(MAX_LANES, row[0])
    full = row.size - row.size % MAX_LANES
    for start in range(0, full, MAX_LANES):
        for lane in range(MAX_LANES):
            x = row[start + lane]
            lanes[lane] = x if x > lanes[lane] else lanes[lane]
    m = row[0]
    for lane in range(MAX_LANES):
        m = lanes[lane] if lanes[lane] > m else m
    for j in range(full, row.size):
        m = row[j] if row[j] > m else m
    return m
