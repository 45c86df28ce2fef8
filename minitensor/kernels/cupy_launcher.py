"""What every kernels/<op>/cupy_launch.py shares: C type names, compiling cuda.cu, block and grid sizes.

A launcher declares its cuda.cu once, with every template instantiation it will ask for:
    CUDA = CudaKernels("softmax_forward", ["softmax_forward_v1<float>", ...])
and launches with `CUDA.function("softmax_forward_v1<float>")(grid, block, args)`.
CuPy is imported only inside the functions that need it, so importing a launcher works on a
machine without CuPy (the registry and nvcc tests read CUDA.name_expressions there).
"""
from __future__ import annotations

import functools
import re
from pathlib import Path

import numpy as np

KERNELS_DIR = Path(__file__).parent
COMMON_HEADER = "common.cuh"
# NumPy dtype -> the C type a kernel template is instantiated with (f16, bf16: raw bits, see
# common.cuh; bf16 arrays are uint16, see minitensor/dtypes.py)
CTYPES = {np.dtype(np.float32): "float", np.dtype(np.float16): "f16", np.dtype(np.float64): "double",
          np.dtype(np.uint16): "bf16"}
VPTS = (1, 2, 4, 8, 16, 32)  # values per lane of the one-warp-per-row register kernels: rows <= 1024


def acc_dtype(dtype):
    """The dtype statistics are kept in (Acc<T> in common.cuh): float64 for float64, else float32."""
    return np.float64 if dtype == np.float64 else np.float32


def cuda_source(op: str) -> str:
    """kernels/<op>/cuda.cu with common.cuh pasted in place of its #include line.

    Pasted, not found through an include path: CuPy caches compiled kernels on disk by their
    source text, so an edit of common.cuh must change that text. The #line marks keep NVRTC's
    error messages pointing at the right file and line.
    """
    text = (KERNELS_DIR / op / "cuda.cu").read_text()
    include = re.search(rf'^#include "{COMMON_HEADER}"$', text, flags=re.MULTILINE)
    if include is None:
        return text
    before, after = text[:include.start()], text[include.end():]
    header = (KERNELS_DIR / COMMON_HEADER).read_text()
    next_line = before.count("\n") + 2  # the line after the #include
    return f'{before}#line 1 "{COMMON_HEADER}"\n{header}#line {next_line} "{op}/cuda.cu"{after}'


class CudaKernels:
    """The kernels of kernels/<op>/cuda.cu, compiled (NVRTC through CuPy) on first use, once per process.

    name_expressions lists every template instantiation the launcher will fetch by name, e.g.
    "softmax_forward_v3<float, 4>"; a file of extern "C" kernels needs none.
    """

    def __init__(self, op: str, name_expressions=()):
        self.op = op
        self.name_expressions = tuple(name_expressions)

    @functools.cached_property
    def module(self):
        import cupy as cp

        names = {"name_expressions": self.name_expressions} if self.name_expressions else {}
        return cp.RawModule(code=cuda_source(self.op), options=("-std=c++17",), **names)

    def function(self, name: str):
        return self.module.get_function(name)


def fit_block(kernel, block: int) -> int:
    """The block size, lowered to what the kernel's register use allows (a multiple of 32)."""
    return min(block, kernel.max_threads_per_block)


def ceil_div(n: int, per_block: int) -> int:
    """Blocks needed to cover n items at per_block items a block."""
    return (n + per_block - 1) // per_block


def vpt_for(n: int, vpts=VPTS) -> int:
    """The smallest instantiated values-per-lane with 32 * vpt >= n: a warp holds the row in registers."""
    return next(k for k in vpts if 32 * k >= n)


def sm_count() -> int:
    """Streaming multiprocessors on the current device (for grids of a few blocks per SM)."""
    import cupy as cp

    return cp.cuda.Device().attributes["MultiProcessorCount"]
