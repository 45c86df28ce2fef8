"""NumPy arrays with the Numba-compiled CPU kernels (`kernels/*/numba_cpu.py`).

Primitive ops stay NumPy (matmul is BLAS already); the fused kernels that
dominate a CPU training step run compiled. Each kernel module's DEFAULT
version is the one used here.
"""
from __future__ import annotations

import numba

from .base import kernels_from
from .numpy_backend import NumpyBackend


@kernels_from("numba_cpu")
class NumbaBackend(NumpyBackend):
    name = "numba"
    device = "cpu"
    supports_bf16 = False   # its kernels compute on float arrays; bf16 (uint16 bits) is a GPU precision

    def __init__(self):
        # Numba's threading layer, chosen before any parallel kernel runs: the OpenMP layer's
        # worker threads spin after each parallel loop and steal the cores that BLAS needs for
        # the matmul that follows (on a 2-core laptop a training step slowed several-fold);
        # the workqueue layer's workers sleep. Numba fixes the layer at its first parallel
        # launch, so this must happen before then: the backend is made before its kernels run.
        numba.config.THREADING_LAYER = "workqueue"
