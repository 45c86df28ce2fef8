"""NumPy arrays with the Numba-compiled CPU kernels (`kernels/*/numba_cpu.py`).

Primitive ops stay NumPy (matmul is BLAS already); the fused kernels that
dominate a CPU training step run compiled. Each kernel module's DEFAULT
version is the one used here.
"""
from __future__ import annotations

from collections import OrderedDict

import numba

from .base import kernels_from
from .numpy_backend import NumpyBackend

KEPT_DRAWS_BYTES = 256 * 2**20  # draws kept for backwards: one float32 array per dropout of a step (12 MB on Multi30k)


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
        self._kept_draws = OrderedDict()  # (seed, shape, time_major) -> read-only draws, oldest first

    def draws(self, seed: int, shape, time_major: bool = False):
        """Backend.draws, each set kept for one more request: a backward asks for the draws its forward made
        (same seed, shape, layout: dropout's mask is recomputed from its seed) and gets them without drawing
        again. The draws are a function of the key, so keeping them changes no value; they are read-only so
        no caller can change them. At most KEPT_DRAWS_BYTES are kept (a forward without a backward leaves its
        draws behind: the oldest go first)."""
        key = (seed, tuple(shape), time_major)
        u = self._kept_draws.pop(key, None)
        if u is not None:
            return u
        u = super().draws(seed, shape, time_major)
        u.flags.writeable = False
        self._kept_draws[key] = u
        kept = sum(a.nbytes for a in self._kept_draws.values())
        while kept > KEPT_DRAWS_BYTES:
            kept -= self._kept_draws.popitem(last=False)[1].nbytes
        return u
