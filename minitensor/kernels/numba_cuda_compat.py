"""The one place that imports numba.cuda; every kernels/*/numba_cuda.py goes through here.

numba-cuda 0.30.4 (installed on the GPU machine) still calls `np.row_stack` when it is imported.
NumPy deprecated that alias of `np.vstack` in 2.0 and removed it in 2.5, so there the import
fails with an AttributeError. We put the alias back, only when it is missing, before importing.
Delete this shim once numba-cuda no longer uses `np.row_stack`.
"""
from __future__ import annotations

import numpy as np


def import_numba_cuda():
    """Return `numba.cuda` (the CUDA simulator when NUMBA_ENABLE_CUDASIM=1 was set at start)."""
    if "row_stack" not in vars(np):
        np.row_stack = np.vstack  # same function under its pre-2.5 name
    from numba import cuda

    return cuda
