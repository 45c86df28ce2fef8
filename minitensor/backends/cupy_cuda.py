"""CuPy arrays on an NVIDIA GPU with the hand-written CUDA kernels (`kernels/*/cupy_launch.py`).

Imported only when a tensor asks for "cuda": `import minitensor` works without
a GPU. Primitive ops are CuPy's (cuBLAS for matmul); the fused kernels are ours.
"""
from __future__ import annotations

import numpy as np
import cupy
import cupyx

from ..kernels.adam_step import cupy_launch as adam_step
from ..kernels.cross_entropy_forward import cupy_launch as cross_entropy_forward
from ..kernels.dropout_forward import cupy_launch as dropout_forward
from ..kernels.embedding_backward import cupy_launch as embedding_backward
from ..kernels.layernorm_backward import cupy_launch as layernorm_backward
from ..kernels.layernorm_forward import cupy_launch as layernorm_forward
from ..kernels.softmax_backward import cupy_launch as softmax_backward
from ..kernels.softmax_forward import cupy_launch as softmax_forward
from .base import Backend


class CupyBackend(Backend):
    name = "cupy"
    device = "cuda"
    xp = cupy

    def to_numpy(self, array) -> np.ndarray:
        return cupy.asnumpy(array)

    def scatter_add(self, target, index, values) -> None:
        cupyx.scatter_add(target, index, values)

    def uniform(self, seed: int, shape, dtype):
        return cupy.random.default_rng(seed).random(shape, dtype=cupy.float32).astype(dtype, copy=False)

    def synchronize(self) -> None:
        cupy.cuda.get_current_stream().synchronize()

    softmax_forward = staticmethod(softmax_forward.softmax_forward)
    softmax_backward = staticmethod(softmax_backward.softmax_backward)
    layernorm_forward = staticmethod(layernorm_forward.layernorm_forward)
    layernorm_backward = staticmethod(layernorm_backward.layernorm_backward)
    cross_entropy_forward = staticmethod(cross_entropy_forward.cross_entropy_forward)
    adam_step = staticmethod(adam_step.adam_step)
    embedding_backward = staticmethod(embedding_backward.embedding_backward)
    dropout_forward = staticmethod(dropout_forward.dropout_forward)
