"""How many CPU threads NumPy's BLAS and Numba's parallel loops use (the `train.threads` setting).

A small model's matrices are too small to split over threads, and when other
programs share the cores, threads that spin waiting for each other make a
step 10-50x slower. One thread makes CPU training of the demo predictable.

Numba has `numba.set_num_threads`. NumPy's bundled OpenBLAS has no Python API,
so we call its `*_set_num_threads*` function through ctypes in the library that
is already loaded in this process (what threadpoolctl does, without the dependency).
`cpu_threads(n)` sets both for a `with` block and restores them afterwards.
"""

import contextlib
import ctypes
import re
from pathlib import Path

_OPENBLAS_NAMES = (("scipy_openblas_set_num_threads64_", "scipy_openblas_get_num_threads64_"),
                   ("openblas_set_num_threads64_", "openblas_get_num_threads64_"),
                   ("openblas_set_num_threads", "openblas_get_num_threads"))


def _openblas_functions() -> list[tuple]:
    """(set, get) function pairs of every OpenBLAS loaded in this process (Linux: from /proc/self/maps)."""
    import numpy  # noqa: F401 - loads NumPy's OpenBLAS so that it is mapped

    try:
        maps = Path("/proc/self/maps").read_text()
    except OSError:  # not Linux: leave BLAS alone
        return []
    found = []
    for path in sorted({m.group(0) for m in re.finditer(r"/\S*openblas\S*\.so[\d.]*", maps)}):
        try:
            library = ctypes.CDLL(path)
        except OSError:
            continue
        for set_name, get_name in _OPENBLAS_NAMES:
            setter, getter = getattr(library, set_name, None), getattr(library, get_name, None)
            if setter is not None and getter is not None:
                found.append((setter, getter))
                break
    return found


def _numba():
    try:
        import numba

        return numba
    except ImportError:
        return None


@contextlib.contextmanager
def cpu_threads(n: int):
    """Run the block with `n` BLAS and Numba threads (n = 0: leave them as they are).

    Yields a short description of what was set, e.g. ["numba 1", "openblas 1"].
    """
    if n <= 0:
        yield []
        return
    numba, blas = _numba(), _openblas_functions()
    before_numba = numba.get_num_threads() if numba else None
    before_blas = [int(getter()) for _, getter in blas]
    done = []
    if numba:
        numba.set_num_threads(min(n, numba.config.NUMBA_NUM_THREADS))
        done.append(f"numba {numba.get_num_threads()}")
    for setter, _ in blas:
        setter(ctypes.c_int(n))
        done.append(f"openblas {n}")
    try:
        yield done
    finally:
        if numba:
            numba.set_num_threads(before_numba)
        for (setter, _), count in zip(blas, before_blas):
            setter(ctypes.c_int(count))
