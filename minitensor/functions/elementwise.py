"""Elementwise primitives. Inputs of a binary op already have one shape:
broadcasting is its own op (movement.Expand), inserted by Tensor before the call.

Each docstring: the function and its derivative, in one line.
"""
from __future__ import annotations

import numpy as np

from ..autograd import Function
from ..dtypes import is_bf16


class Add(Function):
    """f = a + b;  df/da = 1, df/db = 1 (the backend's add: bf16 too, summed in float32)"""

    @staticmethod
    def forward(ctx, a, b):
        return ctx.backend.add(a, b)

    @staticmethod
    def backward(ctx, grad_out):
        return grad_out, grad_out


class Sub(Function):
    """f = a - b;  df/da = 1, df/db = -1"""

    @staticmethod
    def forward(ctx, a, b):
        return a - b

    @staticmethod
    def backward(ctx, grad_out):
        return grad_out, (-grad_out if ctx.needs_input_grad[1] else None)


class Mul(Function):
    """f = a * b;  df/da = b, df/db = a"""

    @staticmethod
    def forward(ctx, a, b):
        ctx.save_for_backward(a, b)
        return a * b

    @staticmethod
    def backward(ctx, grad_out):
        a, b = ctx.saved
        return (grad_out * b if ctx.needs_input_grad[0] else None,
                grad_out * a if ctx.needs_input_grad[1] else None)


class Div(Function):
    """f = a / b;  df/da = 1/b, df/db = -a/b²"""

    @staticmethod
    def forward(ctx, a, b):
        ctx.save_for_backward(a, b)
        return a / b

    @staticmethod
    def backward(ctx, grad_out):
        a, b = ctx.saved
        grad_a = grad_out / b
        grad_b = -grad_a * a / b if ctx.needs_input_grad[1] else None
        return (grad_a if ctx.needs_input_grad[0] else None), grad_b


class Neg(Function):
    """f = -a;  df/da = -1"""

    @staticmethod
    def forward(ctx, a):
        return -a

    @staticmethod
    def backward(ctx, grad_out):
        return -grad_out


class Pow(Function):
    """f = a^b;  df/da = b·a^(b-1), df/db = a^b·log(a) (needs a > 0)"""

    @staticmethod
    def forward(ctx, a, b):
        out = a ** b
        ctx.save_for_backward(a, b, out)
        return out

    @staticmethod
    def backward(ctx, grad_out):
        a, b, out = ctx.saved
        xp = ctx.backend.xp
        grad_a = grad_out * b * a ** (b - 1) if ctx.needs_input_grad[0] else None
        grad_b = grad_out * out * xp.log(a) if ctx.needs_input_grad[1] else None
        return grad_a, grad_b


class Exp(Function):
    """f = e^a;  df/da = e^a (reuses the output)"""

    @staticmethod
    def forward(ctx, a):
        out = ctx.backend.xp.exp(a)
        ctx.save_for_backward(out)
        return out

    @staticmethod
    def backward(ctx, grad_out):
        (out,) = ctx.saved
        return grad_out * out


class Log(Function):
    """f = log(a);  df/da = 1/a"""

    @staticmethod
    def forward(ctx, a):
        ctx.save_for_backward(a)
        return ctx.backend.xp.log(a)

    @staticmethod
    def backward(ctx, grad_out):
        (a,) = ctx.saved
        return grad_out / a


class Sqrt(Function):
    """f = √a;  df/da = 1/(2√a)"""

    @staticmethod
    def forward(ctx, a):
        out = ctx.backend.xp.sqrt(a)
        ctx.save_for_backward(out)
        return out

    @staticmethod
    def backward(ctx, grad_out):
        (out,) = ctx.saved
        return grad_out / (2 * out)


class Relu(Function):
    """f = max(0, a);  df/da = 1 if a > 0 else 0 (0 at the kink a = 0)

    bf16 (uint16 bits) works as it is on the bits: read as int16 the numbers keep their order
    and every negative one is below 0, so max(0, ·) there is relu; backward, out > 0 holds for
    the same entries, and multiplying bits by 1 or 0 keeps them or gives +0.
    """

    @staticmethod
    def forward(ctx, a):
        xp = ctx.backend.xp
        out = xp.maximum(a.view(np.int16), 0).view(a.dtype) if is_bf16(a.dtype) else xp.maximum(a, 0)
        ctx.save_for_backward(out)
        return out

    @staticmethod
    def backward(ctx, grad_out):
        (out,) = ctx.saved
        return grad_out * (out > 0)


class Tanh(Function):
    """f = tanh(a);  df/da = 1 - tanh(a)²"""

    @staticmethod
    def forward(ctx, a):
        out = ctx.backend.xp.tanh(a)
        ctx.save_for_backward(out)
        return out

    @staticmethod
    def backward(ctx, grad_out):
        (out,) = ctx.saved
        return grad_out * (1 - out * out)


class Where(Function):
    """f = cond ? a : b (cond is a constant bool array);  df/da = cond, df/db = !cond"""

    @staticmethod
    def forward(ctx, a, b, *, cond):
        ctx.save_for_backward(cond)
        return ctx.backend.xp.where(cond, a, b)

    @staticmethod
    def backward(ctx, grad_out):
        (cond,) = ctx.saved
        zero = grad_out.dtype.type(0)
        xp = ctx.backend.xp
        return (xp.where(cond, grad_out, zero) if ctx.needs_input_grad[0] else None,
                xp.where(cond, zero, grad_out) if ctx.needs_input_grad[1] else None)


class Cast(Function):
    """f = a as another dtype (mixed precision; bf16 through the backend's conversion kernel);
    df/da = 1, cast back to a's dtype"""

    @staticmethod
    def forward(ctx, a, *, dtype):
        return ctx.backend.cast(a, dtype)

    @staticmethod
    def backward(ctx, grad_out):
        return ctx.backend.cast(grad_out, ctx.input_dtypes[0])
