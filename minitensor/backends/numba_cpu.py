"""NumPy arrays with the Numba-compiled CPU kernels (`kernels/*/numba_cpu.py`).

Primitive ops stay NumPy (matmul is BLAS already); the fused kernels that
dominate a CPU training step run compiled. Each kernel module's DEFAULT
version is the one used here.
"""
from __future__ import annotations

import sys
from collections import OrderedDict

import numba
import numpy as np

from . import cpu_blas
from .base import kernels_from
from .host_memory import keep_freed_memory
from .numpy_backend import NumpyBackend

KEPT_DRAWS_BYTES = 256 * 2**20  # draws kept for backwards: one float32 array per dropout of a step (12 MB on Multi30k)


@numba.njit(cache=True)
def _unit_floats_in_place(words, n):
    """The first n 32-bit halves of words (little-endian: each word's low half first) as float32 (half >> 8)·2⁻²⁴,
    written over themselves: what Generator.random(dtype=float32) makes of the same PCG64 words."""
    bits, out = words.view(np.uint32), words.view(np.float32)
    for i in range(n):
        out[i] = np.float32(np.int32(bits[i] >> np.uint32(8))) * np.float32(1.0 / 16777216.0)


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
        keep_freed_memory()  # a step's arrays reuse the last step's memory instead of faulting fresh pages in
        self._kept_draws = OrderedDict()  # (seed, shape, time_major) -> read-only draws, oldest first

    def matmul(self, a, b, out_dtype=None, bias=None, out=None, accumulate=False):
        """Backend.matmul; out += a @ b in one BLAS call where cpu_blas can make it (no temporary, no add pass)."""
        if accumulate and bias is None and out is not None and cpu_blas.accumulate(a, b, out):
            return out
        return super().matmul(a, b, out_dtype, bias, out, accumulate)

    def uniform(self, seed: int, shape, dtype):
        """Backend.uniform's numbers, 1.5x faster: NumPy's random(dtype=float32) on default_rng(seed) (PCG64) takes
        each float from 32 bits of the generator's 64-bit words, (bits >> 8)·2⁻²⁴, the low half of a word
        first; PCG64.random_raw hands over the words in bulk and one compiled loop converts them in place."""
        if sys.byteorder != "little":
            return super().uniform(seed, shape, dtype)
        n = int(np.prod(shape))
        words = np.random.PCG64(seed).random_raw((n + 1) // 2)
        _unit_floats_in_place(words, n)
        return words.view(np.float32)[:n].reshape(shape).astype(dtype, copy=False)

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
