"""What every kernels/<op>/cupy_launch.py shares: C type names, compiling cuda.cu, block and grid sizes.

A launcher declares its cuda.cu once, with every template instantiation it may ask for:
    CUDA = CudaKernels("softmax_forward", ["softmax_forward_v1<float>", ...])
and launches with `CUDA.function("softmax_forward_v1<float>")(grid, block, args)`, which
compiles that one instantiation the first time it is asked for. CuPy is imported only inside
the functions that need it, so importing a launcher works on a machine without CuPy (the
registry, nvcc and NVRTC tests read CUDA.name_expressions there).
"""
from __future__ import annotations

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
# Our NVRTC options. CuPy appends its own after them (cupy/cuda/compiler.py), -ftz=true among
# them: float32 subnormals flush to zero in float arithmetic, and in conversions unless written
# in PTX (common.cuh to_f32, to_f64; tests/minitensor/kernels/test_nvrtc.py checks the PTX).
OPTIONS = ("-std=c++17",)


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
    """The kernels of kernels/<op>/cuda.cu, each compiled (NVRTC through CuPy) on first use, once per process.

    name_expressions lists every template instantiation the launcher may fetch by name, e.g.
    "softmax_forward_v3<float, 4>"; a file of extern "C" kernels needs none. Only the
    instantiations a run asks for are compiled, one NVRTC program each (a fresh machine pays
    for the few a training step uses, not for every dtype × values-per-lane); a file of
    extern "C" kernels is compiled whole, once. `compiled` lists what went to NVRTC, in order
    (CuPy's disk cache may then find it already built).
    """

    def __init__(self, op: str, name_expressions=()):
        self.op = op
        self.name_expressions = tuple(name_expressions)
        self._modules: dict[tuple[str, ...], object] = {}  # name expressions -> module; () = the whole file
        self._functions: dict[str, object] = {}

    @property
    def compiled(self) -> list[tuple[str, ...]]:
        """The name expressions of each module built so far, in order (() = the whole file)."""
        return list(self._modules)

    def function(self, name: str):
        """The kernel `name`: compiled the first time it is asked for, then the same function object."""
        kernel = self._functions.get(name)
        if kernel is None:
            kernel = self._functions[name] = self._module_for(name).get_function(name)
        return kernel

    def _module_for(self, name: str):
        if self.name_expressions and name not in self.name_expressions:
            raise KeyError(f"{self.op}: {name!r} is not among the instantiations CUDA lists in its cupy_launch.py")
        names = (name,) if self.name_expressions else ()
        if names not in self._modules:
            import cupy as cp

            self._modules[names] = cp.RawModule(code=cuda_source(self.op), options=OPTIONS,
                                                **({"name_expressions": names} if names else {}))
        return self._modules[names]


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
