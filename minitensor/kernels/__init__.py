"""Kernels, one op and direction per folder (see README.md).

Numba's threading layer is chosen here, before any parallel kernel runs: the
OpenMP layer's worker threads spin after each parallel loop and steal the
cores that BLAS needs for the matmul that follows (on a 2-core laptop a
training step slowed several-fold); the workqueue layer's workers sleep.
"""
try:
    import numba

    numba.config.THREADING_LAYER = "workqueue"
except ImportError:  # numba is optional for the NumPy reference backend
    pass
