"""Matrix multiplication, batched over leading axes (BLAS / cuBLAS through Backend.matmul)."""
from __future__ import annotations

from ..autograd import Function


class MatMul(Function):
    """f = a @ b;  df/da = grad @ bᵀ, df/db = aᵀ @ grad.

    `a` is (..., M, K); `b` is (..., K, N) with the same leading axes, or a
    plain (K, N) weight shared by every leading index (Linear layers): then
    db flattens the leading axes into one big product instead of summing a
    stack of per-batch products.
    """

    @staticmethod
    def forward(ctx, a, b):
        ctx.save_for_backward(a, b)
        return _matmul(ctx.backend, a, b)

    @staticmethod
    def backward(ctx, grad_out):
        a, b = ctx.saved
        backend, xp = ctx.backend, ctx.backend.xp
        grad_a = grad_b = None
        if ctx.needs_input_grad[0]:
            grad_a = _matmul(backend, grad_out, xp.swapaxes(b, -1, -2))      # a transposed view, no copy
        if ctx.needs_input_grad[1]:
            if b.ndim == 2 and a.ndim > 2:                    # shared weight: one (K, rows) @ (rows, N)
                grad_b = backend.matmul(a.reshape(-1, a.shape[-1]).T, grad_out.reshape(-1, grad_out.shape[-1]))
            else:
                grad_b = backend.matmul(xp.swapaxes(a, -1, -2), grad_out)
        return grad_a, grad_b


def _matmul(backend, a, b):
    """a @ b; a stack of rows times one shared matrix runs as a single 2-d GEMM.

    (B, T, K) @ (K, N) as one (B·T, K) @ (K, N) call instead of B small ones:
    one BLAS/cuBLAS call keeps every thread busy and pays one launch.
    """
    if b.ndim == 2 and a.ndim > 2:
        return backend.matmul(a.reshape(-1, a.shape[-1]), b).reshape(a.shape[:-1] + (b.shape[-1],))
    return backend.matmul(a, b)
