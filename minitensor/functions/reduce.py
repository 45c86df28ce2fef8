"""Reductions: sum and max over axes (mean is sum / n at the Tensor level)."""
from __future__ import annotations

from ..autograd import Function


def _keep_dims(shape, axis):
    """The reduced shape with size-1 axes kept, so the gradient broadcasts back."""
    axes = range(len(shape)) if axis is None else [a % len(shape) for a in axis]
    return tuple(1 if i in axes else n for i, n in enumerate(shape))


class Sum(Function):
    """f = Σ_axis a;  df/da = 1 broadcast over the summed axes"""

    @staticmethod
    def forward(ctx, a, *, axis, keepdims):
        return a.sum(axis=axis, keepdims=keepdims)

    @staticmethod
    def backward(ctx, grad_out):
        shape = ctx.input_shapes[0]
        grad = grad_out.reshape(_keep_dims(shape, ctx.params["axis"]))
        return ctx.backend.xp.broadcast_to(grad, shape).copy()


class Max(Function):
    """f = max_axis a;  df/da = 1/k at each of the k tied maxima, 0 elsewhere (ties split evenly)"""

    @staticmethod
    def forward(ctx, a, *, axis, keepdims):
        out = a.max(axis=axis, keepdims=True)
        ctx.save_for_backward(a == out)
        return out if keepdims else out.reshape(_drop_dims(a.shape, axis))

    @staticmethod
    def backward(ctx, grad_out):
        (is_max,) = ctx.saved
        axis = ctx.params["axis"]
        count = is_max.sum(axis=axis, keepdims=True)
        grad = grad_out.reshape(_keep_dims(is_max.shape, axis))
        return is_max * (grad / count)


def _drop_dims(shape, axis):
    axes = range(len(shape)) if axis is None else [a % len(shape) for a in axis]
    return tuple(n for i, n in enumerate(shape) if i not in axes)
