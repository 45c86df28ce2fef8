"""assert_close for kernel tests: |got - ref| <= atol + rtol * |ref|, with a message worth reading.

Temporary home: the lead folds this into minitensor/testing.py (one tolerance table per dtype).
"""
import numpy as np

TOLERANCES = {  # dtype -> (atol, rtol); refs accumulate in float64, kernels in the input dtype
    np.dtype(np.float64): (1e-12, 1e-10),
    np.dtype(np.float32): (1e-6, 1e-5),
}


def tolerance(dtype):
    """(atol, rtol) for an array dtype; integer and bool arrays must match exactly."""
    return TOLERANCES.get(np.dtype(dtype), (0.0, 0.0))


def assert_close(got, ref, name, atol=None, rtol=None):
    """Fail with name, shape, worst index, max abs/rel diff and the first values when out of tolerance.

    Entries where the reference is not finite must match it exactly (same inf / nan).
    """
    got, ref = np.asarray(got), np.asarray(ref)
    assert got.shape == ref.shape, f"{name}: shape {got.shape} != reference shape {ref.shape}"
    default_atol, default_rtol = tolerance(ref.dtype)
    atol = default_atol if atol is None else atol
    rtol = default_rtol if rtol is None else rtol
    g, r = got.astype(np.float64), ref.astype(np.float64)
    finite = np.isfinite(r)
    same_nonfinite = np.array_equal(g[~finite], r[~finite], equal_nan=True)
    assert same_nonfinite, f"{name}: non-finite entries differ from the reference"
    abs_diff = np.where(finite, np.abs(g - r), 0.0)
    abs_diff = np.where(np.isnan(abs_diff), np.inf, abs_diff)  # a NaN where ref is finite fails
    excess = abs_diff - (atol + rtol * np.abs(np.where(finite, r, 0.0)))
    if excess.size == 0 or excess.max() <= 0:
        return
    worst = np.unravel_index(np.argmax(excess), excess.shape)
    rel = abs_diff / np.maximum(np.abs(np.where(finite, r, 0.0)), 1e-300)
    raise AssertionError(
        f"{name}: shape {ref.shape} dtype {got.dtype}, worst index {tuple(int(k) for k in worst)}: "
        f"got {g[worst]!r} ref {r[worst]!r}; max abs diff {abs_diff.max():.3e}, "
        f"max rel diff {rel.max():.3e} (atol {atol:g}, rtol {rtol:g}); "
        f"first got {g.ravel()[:5]} ref {r.ravel()[:5]}"
    )
