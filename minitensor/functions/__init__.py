"""The differentiable primitives, one op family per file."""
from .elementwise import Add, Cast, Div, Exp, Log, Mul, Neg, Pow, Relu, Sqrt, Sub, Tanh, Where
from .fused import Attention, CrossEntropy, Dropout, DropoutAddLayerNorm, LayerNorm, Linear, LogSoftmax, Softmax
from .matmul import MatMul
from .movement import Concat, Embedding, Expand, GetItem, Permute, Reshape
from .reduce import Max, Sum

__all__ = [
    "Add", "Cast", "Div", "Exp", "Log", "Mul", "Neg", "Pow", "Relu", "Sqrt", "Sub", "Tanh", "Where",
    "Attention", "CrossEntropy", "Dropout", "DropoutAddLayerNorm", "LayerNorm", "Linear", "LogSoftmax", "Softmax", "MatMul",
    "Concat", "Embedding", "Expand", "GetItem", "Permute", "Reshape", "Max", "Sum",
]
