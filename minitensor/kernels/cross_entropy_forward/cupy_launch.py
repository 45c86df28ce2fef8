"""Label-smoothed cross-entropy on the GPU: grid/block arithmetic and launch of cuda.cu (§5.4).

v1: one thread per row (block = threads per block)
v2: one block per row, one read pass + one write pass (block = threads per row)

Shapes: N = rows, V = vocabulary. loss, nll (N,) in float32 (float64 for float64 logits);
dlogits (N, V) in the logits' dtype. The smoothed target q is never built.
"""
from __future__ import annotations

import functools
from pathlib import Path

import numpy as np

from .reference import smoothing_mass

CTYPES = {np.dtype(np.float32): "float", np.dtype(np.float16): "f16", np.dtype(np.float64): "double"}


@functools.cache
def _module():
    """Compile cuda.cu once per process (NVRTC through CuPy), every instantiation by name."""
    import cupy as cp

    names = [f"cross_entropy_forward_v{v}<{t}>" for v in (1, 2) for t in CTYPES.values()]
    code = Path(__file__).with_name("cuda.cu").read_text()
    return cp.RawModule(code=code, options=("-std=c++17",), name_expressions=names)


def _fit(kernel, block):
    """The block size, lowered to what the kernel's register use allows (a multiple of 32)."""
    return min(block, kernel.max_threads_per_block)


def _launch(version, logits, targets, eps_ls, pad_idx, grid_of, block):
    import cupy as cp

    logits = cp.ascontiguousarray(logits)
    if logits.dtype not in CTYPES or logits.ndim != 2:
        raise TypeError(f"cross_entropy_forward: need (N, V) float logits, got {logits.dtype} {logits.shape}")
    N, V = logits.shape
    acc = np.float64 if logits.dtype == np.float64 else np.float32  # statistics dtype
    targets = cp.ascontiguousarray(targets, dtype=cp.int64)  # (N,)
    loss, nll = cp.empty(N, dtype=acc), cp.empty(N, dtype=acc)
    dlogits = cp.empty_like(logits)
    if N == 0:
        return loss, nll, dlogits
    smooth = smoothing_mass(eps_ls, V, pad_idx)  # q on each other token
    pad = -1 if pad_idx is None else int(pad_idx)  # no real target is negative
    kernel = _module().get_function(f"cross_entropy_forward_v{version}<{CTYPES[logits.dtype]}>")
    block = _fit(kernel, block)
    args = (loss, nll, dlogits, logits, targets, acc(eps_ls), acc(smooth), np.int64(pad), np.int64(N),
            np.int32(V))
    kernel((grid_of(N, block),), (block,), args)
    return loss, nll, dlogits


def launch_v1(logits, targets, eps_ls, pad_idx, block=128):
    return _launch(1, logits, targets, eps_ls, pad_idx, lambda n, b: (n + b - 1) // b, block)


def launch_v2(logits, targets, eps_ls, pad_idx, block=512):
    return _launch(2, logits, targets, eps_ls, pad_idx, lambda n, b: n, block)  # a block per row


VERSIONS = {1: launch_v1, 2: launch_v2}
DEFAULT = 2
BLOCKS = {1: (32, 128), 2: (32, 128, 512, 1024)}  # tested configs


def cross_entropy_forward(logits, targets, eps_ls, pad_idx):
    """(loss, nll, dlogits) per row with label smoothing eps_ls; pad rows give zeros."""
    return VERSIONS[DEFAULT](logits, targets, eps_ls, pad_idx)
