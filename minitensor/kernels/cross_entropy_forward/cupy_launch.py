"""Label-smoothed cross-entropy on the GPU: grid/block arithmetic and launch of cuda.cu.

v1: one thread per row (block = threads per block)
v2: one block per row, one read pass + one write pass (block = threads per row)

Shapes: N = rows, V = classes. loss, nll (N,) in float32 (float64 for float64 logits);
dlogits (N, V) in the logits' dtype. The smoothed target q is never built.
"""
from __future__ import annotations

import numpy as np

from ..cupy_launcher import CTYPES, CudaKernels, acc_dtype, ceil_div, fit_block
from .reference import smoothing_mass

CUDA = CudaKernels("cross_entropy_forward",
                   [f"cross_entropy_forward_v{v}<{t}>" for v in (1, 2) for t in CTYPES.values()])


def _launch(version, logits, targets, smoothing, ignore_index, grid_of, block):
    import cupy as cp

    logits = cp.ascontiguousarray(logits)
    if logits.dtype not in CTYPES or logits.ndim != 2:
        raise TypeError(f"cross_entropy_forward: need (N, V) float logits, got {logits.dtype} {logits.shape}")
    N, V = logits.shape
    acc = acc_dtype(logits.dtype)  # statistics dtype
    targets = cp.ascontiguousarray(targets, dtype=cp.int64)  # (N,)
    loss, nll = cp.empty(N, dtype=acc), cp.empty(N, dtype=acc)
    dlogits = cp.empty_like(logits)
    if N == 0:
        return loss, nll, dlogits
    other_q = smoothing_mass(smoothing, V, ignore_index)  # q on each other class
    ignore = -1 if ignore_index is None else int(ignore_index)  # no real target is negative
    kernel = CUDA.function(f"cross_entropy_forward_v{version}<{CTYPES[logits.dtype]}>")
    block = fit_block(kernel, block)
    args = (loss, nll, dlogits, logits, targets, acc(smoothing), acc(other_q), np.int64(ignore), np.int64(N),
            np.int32(V))
    kernel((grid_of(N, block),), (block,), args)
    return loss, nll, dlogits


def launch_v1(logits, targets, smoothing, ignore_index, block=128):
    return _launch(1, logits, targets, smoothing, ignore_index, ceil_div, block)  # a thread per row


def launch_v2(logits, targets, smoothing, ignore_index, block=512):
    return _launch(2, logits, targets, smoothing, ignore_index, lambda n, b: n, block)  # a block per row


VERSIONS = {1: launch_v1, 2: launch_v2}
DEFAULT = 2
BLOCKS = {1: (32, 128), 2: (32, 128, 512, 1024)}  # tested configs


def cross_entropy_forward(logits, targets, smoothing, ignore_index):
    """(loss, nll, dlogits) per row with label smoothing; rows whose target is ignore_index give zeros."""
    return VERSIONS[DEFAULT](logits, targets, smoothing, ignore_index)
