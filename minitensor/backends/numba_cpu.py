"""NumPy arrays with the Numba-compiled CPU kernels (`kernels/*/numba_cpu.py`).

Primitive ops stay NumPy (matmul is BLAS already); the fused kernels that
dominate a CPU training step run compiled. Each kernel module's DEFAULT
version is the one used here.
"""
from __future__ import annotations

from ..kernels.adam_step import numba_cpu as adam_step
from ..kernels.cross_entropy_forward import numba_cpu as cross_entropy_forward
from ..kernels.dropout_forward import numba_cpu as dropout_forward
from ..kernels.embedding_backward import numba_cpu as embedding_backward
from ..kernels.layernorm_backward import numba_cpu as layernorm_backward
from ..kernels.layernorm_forward import numba_cpu as layernorm_forward
from ..kernels.softmax_backward import numba_cpu as softmax_backward
from ..kernels.softmax_forward import numba_cpu as softmax_forward
from .numpy_backend import NumpyBackend


class NumbaBackend(NumpyBackend):
    name = "numba"
    device = "cpu"

    softmax_forward = staticmethod(softmax_forward.softmax_forward)
    softmax_backward = staticmethod(softmax_backward.softmax_backward)
    layernorm_forward = staticmethod(layernorm_forward.layernorm_forward)
    layernorm_backward = staticmethod(layernorm_backward.layernorm_backward)
    cross_entropy_forward = staticmethod(cross_entropy_forward.cross_entropy_forward)
    adam_step = staticmethod(adam_step.adam_step)
    embedding_backward = staticmethod(embedding_backward.embedding_backward)
    dropout_forward = staticmethod(dropout_forward.dropout_forward)
