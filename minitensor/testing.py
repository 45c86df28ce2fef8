"""Checking numbers: the tolerance table, assert_close, and gradcheck.

Shared by the tests and the chapters, so there is one idea of "close enough"
per dtype: |actual − expected| ≤ atol + rtol·|expected|.
"""
from __future__ import annotations

import numpy as np

from .autograd import no_grad
from .dtypes import BF16
from .kernels.bf16_cast.reference import bf16_to_float32

# dtype -> (atol, rtol). float32 kernels must match the float64 reference to
# 1e-5 relative; float16 only to its ~3 significant digits, bfloat16 (uint16 bits, see
# minitensor/dtypes.py; compared as the numbers they hold) to its ~2.4.
#
# The float64 row is derived, not tuned. Two float64 computations of one formula in different orders
# (a fused kernel against op-by-op code, Numba against NumPy, a chapter's own code against the library)
# differ by rounding alone. With unit roundoff u = 2⁻⁵³ ≈ 1.1e-16, a sum of n terms computed in any order is
# within γ_n·Σ|terms| of the exact sum, γ_n = n·u/(1 − n·u) ≈ n·u (Higham, "Accuracy and Stability of
# Numerical Algorithms", chapter 4), so two orders differ by at most 2·n·u·Σ|terms|. Through k dependent
# steps whose condition numbers are at most κ, relative errors grow to about 2·n·u·k·κ.
#   rtol = 1e-8 ≥ 2·n·u·k·κ ≈ 9e-9 for n ≤ 4096 terms per sum, k ≤ 100 steps (a small Transformer's forward
#          and backward, or a few optimizer updates) and κ ≤ 100: everything the tests and chapters compare;
#   atol = 1e-10 ≥ 2·n·u·Σ|terms| ≈ 9e-11 for entries whose exact value is 0 or nearly (a cancelling sum,
#          the gradient of a weight the output hardly depends on), where the error is absolute: Σ|terms| ≤ 100.
# A comparison outside those sizes derives its own bound where it is made (e.g. Adam, which divides a
# near-zero gradient's roundoff by ε: tests/transformer/test_composed_vs_fused.py, roundoff_drift_bound).
TOLERANCES = {
    np.dtype(np.float64): (1e-10, 1e-8),
    np.dtype(np.float32): (1e-6, 1e-5),
    np.dtype(np.float16): (1e-3, 1e-2),
    BF16: (4e-3, 1.6e-2),
}


def _numpy(x) -> np.ndarray:
    if hasattr(x, "numpy") and not isinstance(x, np.ndarray):
        return x.numpy()                                     # a minitensor.Tensor
    if hasattr(x, "get"):
        return x.get()                                       # a CuPy array
    return np.asarray(x)


def assert_close(actual, expected, name: str = "value", dtype=None, atol=None, rtol=None, skip=None):
    """Raise AssertionError naming the worst element unless actual ≈ expected.

    Tolerances come from TOLERANCES for `dtype` (default: actual's dtype). uint16 arrays are
    bfloat16 bits (minitensor/dtypes.py) and are compared as the numbers they hold.
    Entries where `skip` is True are not compared; non-finite expected entries
    must be matched exactly (same inf, or nan for nan).
    """
    a, e = _numpy(actual), _numpy(expected)
    if a.shape != e.shape:
        raise AssertionError(f"{name}: shape {a.shape} != expected {e.shape}")
    default_atol, default_rtol = TOLERANCES.get(np.dtype(dtype or a.dtype), TOLERANCES[np.dtype(np.float32)])
    a, e = (bf16_to_float32(v) if v.dtype == BF16 else v for v in (a, e))   # bf16 bits -> their values
    atol = default_atol if atol is None else atol
    rtol = default_rtol if rtol is None else rtol
    a64, e64 = a.astype(np.float64), e.astype(np.float64)
    compare = np.ones(a.shape, dtype=bool) if skip is None else ~np.broadcast_to(_numpy(skip), a.shape)
    finite = np.isfinite(e64)
    same_nonfinite = (a64 == e64) | (np.isnan(a64) & np.isnan(e64))
    bad_nonfinite = compare & ~finite & ~same_nonfinite
    with np.errstate(invalid="ignore"):                     # inf - inf where both are inf
        err = np.where(compare & finite, np.abs(a64 - e64), 0.0)
    bound = atol + rtol * np.abs(np.where(finite, e64, 0.0))
    excess = np.where(np.isnan(err), np.inf, err - bound)
    if bad_nonfinite.any() or (excess > 0).any():
        worst = tuple(int(i) for i in np.unravel_index(np.argmax(np.where(bad_nonfinite, np.inf, excess)), a.shape)) if a.ndim else ()
        rel = err / np.maximum(np.abs(e64), 1e-300)
        raise AssertionError(
            f"{name}: not close (shape {a.shape}, atol={atol:g}, rtol={rtol:g}); worst at index {worst}: "
            f"actual {a64[worst]!r} vs expected {e64[worst]!r}; max abs diff {np.max(np.nan_to_num(err, nan=np.inf)):.3e}, "
            f"max rel diff {np.max(np.where(compare & finite, np.nan_to_num(rel, nan=np.inf), 0)):.3e}; "
            f"{int((excess > 0).sum() + bad_nonfinite.sum())} of {a.size} entries off; "
            f"first actual {a.ravel()[:4]}, first expected {e.ravel()[:4]}")


class GradcheckError(AssertionError):
    pass


def gradcheck(fn, *inputs, eps: float = 1e-6, atol: float = 1e-7, rtol: float = 1e-6, seed: int = 0) -> bool:
    """Compare autograd's gradients of `fn(*inputs)` with central differences, in float64.

    A random cotangent r turns the output into the scalar Σ out⊙r, so a
    backward that returns e.g. zeros for softmax cannot pass by accident
    (Σ softmax is constant, so checking out.sum() would hide it). Every element
    of every input with requires_grad=True is perturbed by ±eps.

    The tolerances follow from the central difference's two errors in float64 (u = 2⁻⁵³): truncation
    eps²·|F‴|/6 and the rounding of the two evaluations of F = Σ out⊙r, about u·|F|/eps. With eps = 1e-6,
    atol = 1e-7 ≥ u·|F|/eps ≈ 1.1e-10·|F| for |F| ≤ 10³, and rtol = 1e-6 ≥ eps²·|F‴|/(6·|F′|) while the
    third derivative stays below 6·10⁶ times the first: the small, smooth inputs gradchecked here.
    """
    for t in inputs:
        if t.requires_grad and t.dtype != np.float64:
            raise ValueError(f"gradcheck needs float64 inputs, got {t.dtype} of shape {t.shape}")
    for t in inputs:
        if not t.data.flags.c_contiguous:                 # perturbing below writes through a flat view
            t.data = t.backend.xp.ascontiguousarray(t.data)
    out = fn(*inputs)
    rng = np.random.default_rng(seed)
    r = out.backend.asarray(rng.standard_normal(out.shape))
    for t in inputs:
        t.grad = None
    (out * r).sum().backward()
    for position, t in enumerate(inputs):
        if not t.requires_grad:
            continue
        analytic = (np.zeros(t.shape) if t.grad is None else t.backend.to_numpy(t.grad)).astype(np.float64)
        numeric = np.zeros(t.shape)
        flat = t.data.reshape(-1)                               # a view: writes go into t.data
        with no_grad():
            for i in range(flat.size):
                original = flat[i].item()
                flat[i] = original + eps
                plus = float((fn(*inputs).data * r).sum())
                flat[i] = original - eps
                minus = float((fn(*inputs).data * r).sum())
                flat[i] = original
                numeric.reshape(-1)[i] = (plus - minus) / (2 * eps)
        err = np.abs(analytic - numeric)
        bound = atol + rtol * np.abs(numeric)
        if (err > bound).any():
            worst = tuple(int(i) for i in np.unravel_index(np.argmax(err - bound), t.shape)) if t.ndim else ()
            raise GradcheckError(
                f"gradcheck failed for input {position} (shape {t.shape}): worst at index {worst}: "
                f"analytic {analytic[worst]:.10g} vs numeric {numeric[worst]:.10g} "
                f"(abs diff {err[worst]:.3e}, tolerance {bound[worst]:.3e}); "
                f"{int((err > bound).sum())} of {t.size} elements off")
    return True
