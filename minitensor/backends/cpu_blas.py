"""C += A B in one BLAS call, through the OpenBLAS that NumPy's wheels bring (cblas_?gemm with beta = 1).

np.matmul has no beta: an accumulating product (the second and third of StackedLinear's dx = Σ_s dy_s W_sᵀ,
LinearCrossEntropy's dE summed over blocks) costs a temporary as large as C and a pass adding it, 12-15%
of the product at the Multi30k step's sizes. NumPy ≥ 2 wheels link scipy-openblas64 (symbols with a
`scipy_` prefix and a `64_` suffix, 64-bit integers); NumPy 1.x wheels link openblas64_ (`64_` suffix
only). Where neither is loaded (NumPy built on MKL or a system BLAS), `accumulate` says no and the
caller adds a temporary as before. Linux only: the libraries are found in /proc/self/maps.
"""
from __future__ import annotations

import ctypes
import functools
import re
from pathlib import Path

import numpy as np

ROW_MAJOR, NO_TRANS, TRANS = 101, 111, 112        # CBLAS_ORDER, CBLAS_TRANSPOSE
GEMM_NAMES = {np.dtype(np.float32): ("scipy_cblas_sgemm64_", "cblas_sgemm64_"),
              np.dtype(np.float64): ("scipy_cblas_dgemm64_", "cblas_dgemm64_")}


def openblas_libraries() -> list[ctypes.CDLL]:
    """Every OpenBLAS mapped into this process (NumPy's first of all), [] where /proc/self/maps is missing."""
    import numpy  # noqa: F401 - loads NumPy's OpenBLAS so that it is mapped

    try:
        maps = Path("/proc/self/maps").read_text()
    except OSError:
        return []
    found = []
    for path in sorted({m.group(0) for m in re.finditer(r"/\S*openblas\S*\.so[\d.]*", maps)}):
        try:
            found.append(ctypes.CDLL(path))
        except OSError:
            continue
    return found


@functools.cache
def _gemms() -> dict:
    """dtype -> cblas_?gemm with 64-bit integers, for float32 and float64 where an ILP64 OpenBLAS is loaded."""
    i64, ptr = ctypes.c_int64, ctypes.c_void_p
    found = {}
    for dtype, names in GEMM_NAMES.items():
        scalar = ctypes.c_float if dtype == np.float32 else ctypes.c_double
        for library in openblas_libraries():
            gemm = next((getattr(library, n) for n in names if hasattr(library, n)), None)
            if gemm is not None:
                gemm.argtypes = [ctypes.c_int, ctypes.c_int, ctypes.c_int, i64, i64, i64,
                                 scalar, ptr, i64, ptr, i64, scalar, ptr, i64]
                gemm.restype = None
                found[dtype] = gemm
                break
    return found


def _layout(x) -> tuple[int, int] | None:
    """(NO_TRANS or TRANS, leading dimension) of a 2-d array BLAS can read where it lies, else None."""
    rows, cols = x.shape
    step0, step1 = (s // x.itemsize for s in x.strides)
    if any(s % x.itemsize for s in x.strides) or rows < 2 or cols < 2:
        return None                                    # a row or column alone: its stride says nothing
    if step1 == 1 and step0 >= cols:
        return NO_TRANS, step0
    if step0 == 1 and step1 >= rows:
        return TRANS, step1
    return None


def accumulate(a, b, out) -> bool:
    """out += a @ b in place, one gemm per matrix of out's leading axes (a's and b's broadcast to them);
    False, out untouched, where no BLAS call can do it (dtypes, strides, or no ILP64 OpenBLAS loaded)."""
    gemm = _gemms().get(out.dtype)
    if (gemm is None or a.dtype != out.dtype or b.dtype != out.dtype or out.ndim < 2
            or a.shape[-1] != b.shape[-2] or out.shape[-2:] != (a.shape[-2], b.shape[-1]) or a.shape[-1] < 2):
        return False
    lead = out.shape[:-2]
    try:
        a_all, b_all = np.broadcast_to(a, lead + a.shape[-2:]), np.broadcast_to(b, lead + b.shape[-2:])
    except ValueError:
        return False
    triples = [(a_all[i], b_all[i], out[i]) for i in np.ndindex(lead)]
    layouts = [(_layout(x), _layout(y), _layout(z)) for x, y, z in triples]
    if any(la is None or lb is None or lc is None or lc[0] != NO_TRANS for la, lb, lc in layouts):
        return False
    (m, k), n = a.shape[-2:], b.shape[-1]
    for (x, y, z), ((ta, lda), (tb, ldb), (_, ldc)) in zip(triples, layouts):
        gemm(ROW_MAJOR, ta, tb, m, n, k, 1.0, x.ctypes.data, lda, y.ctypes.data, ldb, 1.0, z.ctypes.data, ldc)
    return True
