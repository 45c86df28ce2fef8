"""CuPy arrays on an NVIDIA GPU with the hand-written CUDA kernels (`kernels/*/cupy_launch.py`).

Imported only when a tensor asks for "cuda": `import minitensor` works without
a GPU. Primitive ops are CuPy's (cuBLAS for matmul); the fused kernels are ours.
"""
from __future__ import annotations

import numpy as np
import cupy
import cupyx

from .base import Backend, kernels_from


# u_i = top 24 bits of SplitMix64(seed + (i+1)·γ) / 2^24: counter-based, so any element can be
# regenerated from (seed, i) and the dropout mask needs no RNG state on the device.
_splitmix_uniform = cupy.ElementwiseKernel(
    "uint64 seed", "float32 u",
    """
    unsigned long long z = seed + (unsigned long long)(i + 1) * 0x9E3779B97F4A7C15ULL;
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ULL;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBULL;
    z = z ^ (z >> 31);
    u = (float)(z >> 40) * (1.0f / 16777216.0f);
    """,
    "splitmix_uniform")


@kernels_from("cupy_launch")
class CupyBackend(Backend):
    name = "cupy"
    device = "cuda"
    xp = cupy

    def to_numpy(self, array) -> np.ndarray:
        return cupy.asnumpy(array)

    def scatter_add(self, target, index, values) -> None:
        cupyx.scatter_add(target, index, values)

    def uniform(self, seed: int, shape, dtype):
        """SplitMix64 of (seed, element index): one kernel, no generator state to build per call."""
        u = cupy.empty(shape, dtype=cupy.float32)
        _splitmix_uniform(np.uint64(seed), u)
        return u.astype(dtype, copy=False)

    def synchronize(self) -> None:
        cupy.cuda.get_current_stream().synchronize()
