"""Softmax forward, the spec (§3.2.1 Eq. (1), masking §3.2.3): plain NumPy, float64 sums.

Shapes: L = length of the last axis (keys); leading axes are any batch of rows.

Non-finite values, per row of z = scale * x with blocked entries set to -inf first:
  - -inf entries get weight 0; a row with no entry above -inf (every entry blocked, or all -inf)
    gives zeros, not NaN;
  - a row whose max is +inf gives its +inf entries equal shares and every other entry 0 (the
    limit of softmax as those entries grow together);
  - a NaN in an unblocked entry makes the whole row NaN, so the step's finiteness check sees it.
"""
import numpy as np

from ..bf16_cast.reference import as_float64, from_float64


def softmax_forward_ref(x, scale, mask):
    """y = softmax(scale * x) over the last axis; mask True = blocked (set to -inf first).

    Non-finite entries as in the module docstring. Returns y in x's dtype (bf16 as uint16 bits).
    """
    z = as_float64(x) * scale  # (..., L)
    if mask is not None:
        z = np.where(np.broadcast_to(mask, z.shape), -np.inf, z)  # §3.2.3: blocked -> -inf
    row_max = z.max(axis=-1, keepdims=True)  # (..., 1): -inf on empty rows, NaN on rows with a NaN
    with np.errstate(invalid="ignore", over="ignore"):
        shift = np.where(np.isfinite(row_max), row_max, 0.0)  # keep exp(-inf - 0) = 0, no NaN
        e = np.where(row_max == np.inf, z == np.inf, np.exp(z - shift))  # (..., L); +inf rows: 1 on +inf
        total = e.sum(axis=-1, keepdims=True)  # (..., 1): NaN when the row has a NaN
        y = np.where(total > 0, e / np.where(total > 0, total, 1.0), np.where(np.isnan(total), np.nan, 0.0))
    return from_float64(y, x.dtype)
