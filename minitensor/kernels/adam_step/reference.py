"""Adam update (§5.3: beta1 = 0.9, beta2 = 0.98, eps = 1e-9), the spec: NumPy, float64 math.

Shapes: P = number of parameters (flat buffers in practice; any same shape works).
"""
import numpy as np

from ..bf16_cast.reference import from_float64


def adam_step_ref(param, grad, m, v, lr, beta1, beta2, eps, step, half=None):
    """In place: m = b1 m + (1-b1) g; v = b2 v + (1-b2) g^2;
    param -= lr * (m / (1 - b1^step)) / (sqrt(v / (1 - b2^step)) + eps). Returns None.

    half (optional, param's shape, float16 or bf16 as uint16 bits): receives the updated param
    rounded to its dtype, the copy the forward pass of mixed precision multiplies with.
    """
    g = np.asarray(grad, dtype=np.float64)
    m64 = beta1 * m.astype(np.float64) + (1.0 - beta1) * g
    v64 = beta2 * v.astype(np.float64) + (1.0 - beta2) * g * g
    m_hat = m64 / (1.0 - beta1**step)  # bias correction: m starts at 0
    v_hat = v64 / (1.0 - beta2**step)
    p64 = param.astype(np.float64) - lr * m_hat / (np.sqrt(v_hat) + eps)
    m[...] = m64
    v[...] = v64
    param[...] = p64
    if half is not None:
        half[...] = from_float64(param, half.dtype)  # from the stored param: one rounding to half
