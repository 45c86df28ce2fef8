"""minitensor: a small tensor library with reverse-mode autograd.

    import minitensor as mt
    x = mt.tensor([[1.0, 2.0]], requires_grad=True)
    y = (x * x).sum()
    y.backward()          # x.grad == 2x

Backends: "numpy" (the reference, and the default), "numba" (compiled CPU
kernels), "cupy" (NVIDIA GPU); "cpu" picks numba when it imports. See backends/.
"""
from . import functions, nn, optim
from .autograd import Function, backward, is_grad_enabled, no_grad
from .backends import available, get_backend, why_unavailable
from .functions.composed import cross_entropy_composed, layer_norm_composed, log_softmax_composed, softmax_composed
from .tensor import Tensor, concat, matmul, ones, stack, tensor, where, zeros
from .testing import assert_close, gradcheck

__all__ = [
    "Tensor", "tensor", "zeros", "ones", "matmul", "where", "concat", "stack",
    "Function", "backward", "no_grad", "is_grad_enabled",
    "get_backend", "available", "why_unavailable",
    "gradcheck", "assert_close", "functions", "nn", "optim",
    "softmax_composed", "log_softmax_composed", "layer_norm_composed", "cross_entropy_composed",
]
