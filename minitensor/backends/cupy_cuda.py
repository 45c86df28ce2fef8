"""CuPy arrays on an NVIDIA GPU with the hand-written CUDA kernels (`kernels/*/cupy_launch.py`).

Imported only when a tensor asks for "cuda": `import minitensor` works without
a GPU. Primitive ops are CuPy's (cuBLAS for matmul); the fused kernels are ours.
"""
from __future__ import annotations

import numpy as np
import cupy
import cupyx

from ..dtypes import BF16
from ..kernels.cupy_launcher import COMMON_HEADER, KERNELS_DIR
from ..kernels.dropout_add_layernorm_backward.cupy_launch import dropout_add_layernorm_backward_seeded
from ..kernels.dropout_add_layernorm_forward.cupy_launch import dropout_add_layernorm_forward_seeded, fits
from ..kernels.dropout_forward.cupy_launch import dropout_seeded
from . import cupy_blas
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

# a + b on bf16 bits: both widened to float32, summed, rounded once (load/store of common.cuh)
_bf16_add = cupy.ElementwiseKernel(
    "uint16 a, uint16 b", "uint16 y",
    "y = bf16_bits(load(bf16{a}) + load(bf16{b}));",
    "minitensor_bf16_add", preamble=(KERNELS_DIR / COMMON_HEADER).read_text())

# x *= factor on bf16 bits (factor float32, broadcast): widened, multiplied, rounded once, in place
_bf16_scale = cupy.ElementwiseKernel(
    "float32 factor", "uint16 x",
    "x = bf16_bits(load(bf16{x}) * factor);",
    "minitensor_bf16_scale", preamble=(KERNELS_DIR / COMMON_HEADER).read_text())


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

    def dropout(self, x, p: float, seed: int, time_major: bool = False):
        """One kernel that draws uniform(seed)'s numbers inline: no array of draws is made."""
        return dropout_seeded(x, seed, p, time_major)

    def dropout_add_layernorm(self, x, s, bias, gamma, beta, eps, p, seed, time_major=False):
        """One kernel that draws the mask inline (rows of at most 1024; wider ones: dropout, add, LayerNorm)."""
        if not fits(x.shape[-1]):
            return self.unfused_dropout_add_layernorm(x, s, bias, gamma, beta, eps, p, seed, time_major)
        return dropout_add_layernorm_forward_seeded(x, s, seed, p, bias, gamma, beta, eps, time_major)

    def dropout_add_layernorm_grad(self, dys, z, gamma, mean, rstd, p, seed, time_major, with_bias):
        dys = self.at_most_two(dys)
        if not fits(z.shape[-1]):
            return self.unfused_dropout_add_layernorm_grad(dys, z, gamma, mean, rstd, p, seed, time_major, with_bias)
        return dropout_add_layernorm_backward_seeded(dys, z, seed, p, gamma, mean, rstd, with_bias, time_major)

    def add(self, a, b):
        """a + b rounded once to a's dtype; bf16 in one kernel (CuPy's own + sums float16 in float32)."""
        return _bf16_add(a, b) if a.dtype == BF16 else a + b

    def scale(self, x, factor):
        """x *= factor in place, rounded once; bf16 in one kernel."""
        if x.dtype != BF16:
            return super().scale(x, factor)
        _bf16_scale(factor.astype(cupy.float32, copy=False), x)
        return x

    @staticmethod
    def buffer_address(a):
        return a.data.mem, a.data.ptr

    @staticmethod
    def as_strided(a, shape, strides):
        return cupy.lib.stride_tricks.as_strided(a, shape, strides)

    def __init__(self):
        self.plans = {}           # cupy_blas: each product's Plan, by layout
        self.cublas_handle = None  # None: CuPy's (re-bound to the current stream per call); graphs bind their own

    def matmul(self, a, b, out_dtype=None, bias=None, out=None, accumulate=False):
        """Every float dtype through cuBLAS directly (cupy_blas: bf16, tensor cores, transposes as flags,
        strided operands and outputs read and written in place), each layout planned once."""
        return cupy_blas.matmul(a, b, out_dtype, bias, xp=cupy, gemm=self.gemm, out=out, accumulate=accumulate,
                                plans=self.plans)

    def gemm(self, *args):
        cupy_blas.cublas_gemm(*args, handle=self.cublas_handle)
