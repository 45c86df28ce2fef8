"""The differentiable primitives, one op family per file."""
from .elementwise import Add, Cast, Div, Exp, Log, Mul, Neg, Pow, Relu, Sqrt, Sub, Tanh, Where
from .fused import (CrossEntropy, Dropout, LayerNorm, Linear, LinearCrossEntropy, LinearReLU, LogSoftmax, Softmax, StackedLinear,
                    inverted_dropout)
from .matmul import MatMul
from .movement import Concat, Embedding, Expand, GetItem, Permute, Reshape
from .reduce import Max, Sum

__all__ = [
    "Add", "Cast", "Div", "Exp", "Log", "Mul", "Neg", "Pow", "Relu", "Sqrt", "Sub", "Tanh", "Where",
    "CrossEntropy", "Dropout", "LayerNorm", "Linear", "LinearCrossEntropy", "LinearReLU", "StackedLinear", "LogSoftmax", "Softmax", "MatMul",
    "Concat", "Embedding", "Expand", "GetItem", "Permute", "Reshape", "Max", "Sum", "inverted_dropout",
]
