"""The reference backend: NumPy arrays and the plain NumPy kernels (`reference.py`)."""
from __future__ import annotations

from ..kernels.adam_step.reference import adam_step_ref
from ..kernels.cross_entropy_forward.reference import cross_entropy_forward_ref
from ..kernels.dropout_forward.reference import dropout_forward_ref
from ..kernels.embedding_backward.reference import embedding_backward_ref
from ..kernels.layernorm_backward.reference import layernorm_backward_ref
from ..kernels.layernorm_forward.reference import layernorm_forward_ref
from ..kernels.softmax_backward.reference import softmax_backward_ref
from ..kernels.softmax_forward.reference import softmax_forward_ref
from .base import Backend


class NumpyBackend(Backend):
    name = "numpy"
    device = "cpu"

    softmax_forward = staticmethod(softmax_forward_ref)
    softmax_backward = staticmethod(softmax_backward_ref)
    layernorm_forward = staticmethod(layernorm_forward_ref)
    layernorm_backward = staticmethod(layernorm_backward_ref)
    cross_entropy_forward = staticmethod(cross_entropy_forward_ref)
    adam_step = staticmethod(adam_step_ref)
    embedding_backward = staticmethod(embedding_backward_ref)
    dropout_forward = staticmethod(dropout_forward_ref)
