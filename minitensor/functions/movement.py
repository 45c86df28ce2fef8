"""Movement ops: reshape, permute, expand (broadcast), indexing, concatenation.

They move numbers without changing them, so each backward moves the gradient
back: reshape it back, permute it back, sum it back over broadcast axes,
scatter it back to the indexed positions, split it back.
"""
from __future__ import annotations

from ..autograd import Function


class Reshape(Function):
    """f = a viewed with a new shape;  grad reshaped back"""

    @staticmethod
    def forward(ctx, a, *, shape):
        return a.reshape(shape)

    @staticmethod
    def backward(ctx, grad_out):
        return grad_out.reshape(ctx.input_shapes[0])


class Permute(Function):
    """f = a with axes reordered;  grad permuted by the inverse order"""

    @staticmethod
    def forward(ctx, a, *, axes):
        return a.transpose(axes)

    @staticmethod
    def backward(ctx, grad_out):
        axes = ctx.params["axes"]
        inverse = [0] * len(axes)
        for i, axis in enumerate(axes):
            inverse[axis] = i
        return grad_out.transpose(inverse)


class Expand(Function):
    """f = a broadcast to `shape` (a view, no copy);  grad summed over the broadcast axes.

    "This is sum in reverse" (tinygrad): each input element was read by every
    output element along the broadcast axes, so its gradient is their sum.
    """

    @staticmethod
    def forward(ctx, a, *, shape):
        return ctx.backend.xp.broadcast_to(a, shape)

    @staticmethod
    def backward(ctx, grad_out):
        input_shape = ctx.input_shapes[0]
        lead = grad_out.ndim - len(input_shape)               # axes that were added in front
        axes = tuple(range(lead)) + tuple(
            lead + i for i, n in enumerate(input_shape) if n == 1 and grad_out.shape[lead + i] != 1)
        grad = grad_out.sum(axis=axes, keepdims=True) if axes else grad_out
        return grad.reshape(input_shape)


class GetItem(Function):
    """f = a[index] (slices and integer arrays);  grad scattered back with +=, so repeated indices add up"""

    @staticmethod
    def forward(ctx, a, *, index):
        return a[index]

    @staticmethod
    def backward(ctx, grad_out):
        grad = ctx.backend.xp.zeros(ctx.input_shapes[0], dtype=ctx.input_dtypes[0])
        ctx.backend.scatter_add(grad, ctx.params["index"], grad_out)
        return grad


class Embedding(Function):
    """f = weight[ids] (table lookup, §3.4);  dweight = scatter-add of the rows of grad at ids"""

    @staticmethod
    def forward(ctx, weight, *, ids):
        return weight[ids]                                    # ids.shape + (D,)

    @staticmethod
    def backward(ctx, grad_out):
        ids, d = ctx.params["ids"], grad_out.shape[-1]
        return ctx.backend.embedding_backward(
            grad_out.reshape(-1, d), ids.reshape(-1), ctx.input_shapes[0][0])   # (V, D) table


class Concat(Function):
    """f = [a_1, ..., a_n] joined along `axis`;  grad split back at the same boundaries"""

    @staticmethod
    def forward(ctx, *arrays, axis):
        return ctx.backend.xp.concatenate(arrays, axis=axis)

    @staticmethod
    def backward(ctx, grad_out):
        axis, grads, start = ctx.params["axis"], [], 0
        for shape, needed in zip(ctx.input_shapes, ctx.needs_input_grad):
            size = shape[axis]
            index = [slice(None)] * grad_out.ndim
            index[axis] = slice(start, start + size)
            grads.append(grad_out[tuple(index)] if needed else None)
            start += size
        return tuple(grads)
