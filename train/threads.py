"""How many CPU threads NumPy's BLAS and Numba's parallel loops use (the `train.threads` setting).

A small model's matrices are too small to split over threads, and when other
programs share the cores, threads that spin waiting for each other make a
step 10-50x slower. One thread makes CPU training of the demo predictable.

Numba has `numba.set_num_threads`. NumPy's bundled OpenBLAS has no Python API,
so we call its `*_set_num_threads*` function through ctypes in the library that
is already loaded in this process (what threadpoolctl does, without the dependency).
`cpu_threads(n)` sets both for a `with` block and restores them afterwards.

The guard against oversubscription: never more threads than the cores this process
may run on (a larger request is lowered, with a warning), and a note in what
`cpu_threads` reports when other programs already keep the cores busy (load average),
since then even that many threads wait for each other. Decoding (`translate`,
`evaluate`, `parse-eval`) uses a fixed count, `decoding_threads()`, printed when it
starts, as training prints its own.
"""

import contextlib
import contextvars
import ctypes
import os
import warnings

from minitensor.backends.cpu_blas import openblas_libraries

_IN_FORCE: contextvars.ContextVar = contextvars.ContextVar("cpu_threads", default=0)   # cpu_threads' n, 0 outside
DECODE_THREADS = 4  # decoding's default, at most the usable cores (CTranslate2's default intra_threads is 4 too)

_OPENBLAS_NAMES = (("scipy_openblas_set_num_threads64_", "scipy_openblas_get_num_threads64_"),
                   ("openblas_set_num_threads64_", "openblas_get_num_threads64_"),
                   ("openblas_set_num_threads", "openblas_get_num_threads"))


def _openblas_functions() -> list[tuple]:
    """(set, get) function pairs of every OpenBLAS loaded in this process (Linux: from /proc/self/maps)."""
    found = []
    for library in openblas_libraries():
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


def usable_cores() -> int:
    """The cores this process may run on (its CPU affinity; all of them where that is unknown)."""
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1


def current_threads() -> int:
    """The thread count of the innermost `cpu_threads` block; outside one, the usable cores (BLAS's and
    Numba's own default)."""
    return _IN_FORCE.get() or usable_cores()


def decoding_threads(requested: int | None = None) -> int:
    """Threads for decoding: `requested` when given, else DECODE_THREADS, at most the usable cores."""
    return requested if requested else min(DECODE_THREADS, usable_cores())


def _guard(n: int) -> int:
    """n, lowered (with a warning) to the cores this process may use."""
    cores = usable_cores()
    if n > cores:
        warnings.warn(f"{n} CPU threads requested but this process may use {cores} cores; using {cores} "
                      f"(more threads than cores wait for each other)", stacklevel=3)
    return min(n, cores)


def busy_note() -> str | None:
    """A note when other programs keep the machine's cores busy (1-minute load average ≥ cores), else None."""
    load, machine = (os.getloadavg()[0] if hasattr(os, "getloadavg") else 0.0), os.cpu_count() or 1
    if load < machine:
        return None
    return f"the machine is busy (load {load:.1f} on {machine} cores: threads will also wait for other programs)"


@contextlib.contextmanager
def cpu_threads(n: int):
    """Run the block with `n` BLAS and Numba threads (n = 0: leave them as they are), at most the usable cores.

    Yields a short description of what was set, e.g. ["numba 1", "openblas 1"], and busy_note() if any.
    """
    if n <= 0:
        yield []
        return
    n = _guard(n)
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
    note = busy_note()
    if note:
        done.append(note)
    token = _IN_FORCE.set(n)
    try:
        yield done
    finally:
        _IN_FORCE.reset(token)
        if numba:
            numba.set_num_threads(before_numba)
        for (setter, _), count in zip(blas, before_blas):
            setter(ctypes.c_int(count))
