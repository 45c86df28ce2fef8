"""NumPy arrays with the Numba-compiled CPU kernels (`kernels/*/numba_cpu.py`).

Primitive ops stay NumPy (matmul is BLAS already); the fused kernels that
dominate a CPU training step run compiled. Each kernel module's DEFAULT
version is the one used here.
"""
from __future__ import annotations

import ctypes
import ctypes.util

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
        keep_freed_memory()


M_TRIM_THRESHOLD, M_MMAP_THRESHOLD = -1, -3      # glibc's mallopt parameters (malloc.h)
MMAP_THRESHOLD_MAX = 32 << 20                    # the largest glibc accepts on 64-bit


def keep_freed_memory() -> bool:
    """Ask glibc to keep freed blocks up to 32 MiB for reuse instead of handing them back to the OS.

    By default a block over 128 KiB is mmap'd and munmap'd, and the heap's free top is trimmed, so
    each step's large temporaries (the (B·T, V) logits and their gradient: 32 MB on the Multi30k CPU
    model) come back as fresh pages, zeroed by the kernel one page fault at a time: ~8,000 faults
    for each such array, every step (measured: 5-6% of a one-thread step). Process-wide and
    harmless elsewhere (the peak resident memory stays resident); a no-op off glibc.
    Returns whether both settings took.
    """
    name = ctypes.util.find_library("c")
    try:
        mallopt = ctypes.CDLL(name).mallopt
    except (OSError, AttributeError, TypeError):
        return False
    return bool(mallopt(M_MMAP_THRESHOLD, MMAP_THRESHOLD_MAX)) and bool(mallopt(M_TRIM_THRESHOLD, 1 << 30))
