"""The post-norm sub-layer connection's backward (§3.1, §5.4), the spec: plain NumPy, float64 sums.

For z = x + Dropout_p(s + bias), y = LayerNorm(z): dz from LayerNorm's backward, then
    dx = dz,  ds = Dropout_p(dz) (the same mask),  dbias = Σ_rows ds,  dgamma = Σ_rows dy·ẑ,  dbeta = Σ_rows dy.
dy may come as several arrays (the gradients of y's consumers: the next sub-layer and the
residual stream), added here instead of by a kernel of their own.
Shapes: dy (each), z, u (..., D); gamma (D,); mean, rstd (...).
"""
from ..bf16_cast.reference import as_float64
from ..dropout_forward.reference import dropout_forward_ref
from ..layernorm_backward.reference import layernorm_backward_ref


def dropout_add_layernorm_backward_ref(dys, z, u, p, gamma, mean, rstd, with_bias):
    """(dx, ds, dgamma, dbeta, dbias): dx, ds in z's dtype; the column sums in gamma's dtype (dbias None
    without a bias). dys: a tuple of one or more gradients of y, summed in float64 first."""
    dy = sum(as_float64(d) for d in dys)
    dx, dgamma, dbeta = layernorm_backward_ref(dy, z, gamma, mean, rstd)   # dx = dz, rounded to z's dtype
    ds = dx if p == 0.0 else dropout_forward_ref(dx, u, p)             # the mask on the rounded dz
    dbias = as_float64(ds).reshape(-1, ds.shape[-1]).sum(axis=0).astype(gamma.dtype) if with_bias else None
    return dx, ds, dgamma, dbeta, dbias
