"""Adam update on the CPU with Numba (§5.3); spec: reference.py.

v1: naive port of the reference, one element per prange iteration, bias corrections recomputed per element
v2: bias corrections folded into two scalars before the loop, math in the parameters' dtype, fastmath

Shapes: flat (P,) views of param, grad, m and v; updated in place. The optional half copy
(float16 or bf16) is written by a second pass after either version (bf16_cast / astype).
"""
import numpy as np
from numba import njit, prange

from minitensor.dtypes import BF16
from minitensor.kernels.bf16_cast.numba_cpu import bf16_cast

FASTMATH = {"nsz", "arcp", "contract", "afn", "reassoc"}


@njit(cache=True, parallel=True)
def adam_step_v1(param, grad, m, v, lr, beta1, beta2, eps, step):
    for i in prange(param.size):
        g = np.float64(grad[i])
        m_i = beta1 * m[i] + (1.0 - beta1) * g
        v_i = beta2 * v[i] + (1.0 - beta2) * g * g
        m_hat = m_i / (1.0 - beta1**step)
        v_hat = v_i / (1.0 - beta2**step)
        param[i] -= lr * m_hat / (np.sqrt(v_hat) + eps)
        m[i] = m_i
        v[i] = v_i


@njit(cache=True, parallel=True, fastmath=FASTMATH)
def adam_step_v2(param, grad, m, v, lr, beta1, beta2, eps, step):
    t = param.dtype.type
    # lr * (m / bc1) / (sqrt(v / bc2) + eps) = step_size * m / (sqrt(v) * inv_sqrt_bc2 + eps)
    step_size = t(lr / (1.0 - beta1**step))
    inv_sqrt_bc2 = t(1.0 / np.sqrt(1.0 - beta2**step))
    b1, b2, eps_t = t(beta1), t(beta2), t(eps)
    one_b1, one_b2 = t(1.0 - beta1), t(1.0 - beta2)
    for i in prange(param.size):
        g = grad[i]
        m_i = b1 * m[i] + one_b1 * g
        v_i = b2 * v[i] + one_b2 * g * g
        param[i] -= step_size * m_i / (np.sqrt(v_i) * inv_sqrt_bc2 + eps_t)
        m[i] = m_i
        v[i] = v_i


VERSIONS = {1: adam_step_v1, 2: adam_step_v2}
DEFAULT = 2


def adam_step(param, grad, m, v, lr, beta1, beta2, eps, step, half=None):
    """In place on same-shaped contiguous arrays (half: the updated param in float16 or bf16); returns None."""
    arrays = (param, grad, m, v) + (() if half is None else (half,))
    if not all(a.flags.c_contiguous and a.shape == param.shape for a in arrays):
        raise ValueError("adam_step needs same-shaped C-contiguous arrays (it updates in place)")
    flat = [a.reshape(-1) for a in arrays[:4]]  # (P,) views, so the updates land in the callers' arrays
    VERSIONS[DEFAULT](*flat, float(lr), float(beta1), float(beta2), float(eps), int(step))
    if half is not None:
        half[...] = bf16_cast(param, BF16) if half.dtype == BF16 else param
