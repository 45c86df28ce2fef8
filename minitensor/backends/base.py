"""The backend seam: where an array lives and which kernels run on it.

A Backend bundles an array module `xp` (numpy or cupy: the primitive ops are
the array module's own `xp.exp`, `xp.matmul`, ...) with the fused kernels of
`minitensor/kernels/` (see kernels/README.md for their contract). The NumPy
backend is the reference; every other backend must pass the same tests.
Backends are singletons, so `a.backend is b.backend` says two tensors can meet.
"""
from __future__ import annotations

import importlib

import numpy as np

# The fused kernels every backend provides, one folder each under minitensor/kernels/.
KERNELS = ("softmax_forward", "softmax_backward", "layernorm_forward", "layernorm_backward",
           "cross_entropy_forward", "adam_step", "embedding_backward", "dropout_forward")


class Backend:
    name: str = "abstract"
    device: str = "cpu"
    xp = np

    # --- arrays --------------------------------------------------------------
    def asarray(self, data, dtype=None):
        return self.xp.asarray(data, dtype=dtype)

    def to_numpy(self, array) -> np.ndarray:
        return np.asarray(array)

    def scatter_add(self, target, index, values) -> None:
        """target[index] += values, adding repeated indices up (np.add.at)."""
        np.add.at(target, index, values)

    def uniform(self, seed: int, shape, dtype):
        """Uniform [0, 1) draws from a counter seed: the same seed gives the same draws."""
        return np.random.default_rng(seed).random(shape, dtype=np.float32).astype(dtype, copy=False)

    def synchronize(self) -> None:
        """Wait for queued device work (a no-op on the CPU)."""

    # --- fused kernels (KERNELS; contract in kernels/README.md) ---------------
    def softmax_forward(self, x, scale, mask):
        """y = softmax(scale * x) over the last axis; mask (bool, broadcastable, True = blocked) or None."""
        raise NotImplementedError

    def softmax_backward(self, y, dy, scale):
        """dx = scale * y * (dy - sum(dy * y, -1, keepdims))."""
        raise NotImplementedError

    def layernorm_forward(self, x, gamma, beta, eps):
        """(y, mean, rstd) over the last axis: y = (x - mean) * rstd * gamma + beta."""
        raise NotImplementedError

    def layernorm_backward(self, dy, x, gamma, mean, rstd):
        """(dx, dgamma, dbeta) of layernorm_forward."""
        raise NotImplementedError

    def cross_entropy_forward(self, logits, targets, smoothing, ignore_index):
        """(loss, nll, dlogits) per row of label-smoothed cross-entropy; ignore_index int or None."""
        raise NotImplementedError

    def adam_step(self, param, grad, m, v, lr, beta1, beta2, eps, step) -> None:
        """In place: Adam moments m, v and the bias-corrected update of param."""
        raise NotImplementedError

    def embedding_backward(self, dout, ids, num_embeddings):
        """dweight = zeros((num_embeddings, D)); dweight[ids[i]] += dout[i]."""
        raise NotImplementedError

    def dropout_forward(self, x, u, p):
        """y = x / (1 - p) where u >= p, else 0 (u: uniform [0, 1) draws of x's shape)."""
        raise NotImplementedError

    def __repr__(self) -> str:
        return f"<backend {self.name} on {self.device}>"


def kernels_from(file: str):
    """Class decorator: set each kernel in KERNELS from minitensor/kernels/<op>/<file>.py.

    file "reference" gives the NumPy spec `<op>_ref`; any other file ("numba_cpu",
    "cupy_launch") gives its `<op>`, which runs that file's DEFAULT version.
    """
    def wire(cls):
        for op in KERNELS:
            module = importlib.import_module(f"minitensor.kernels.{op}.{file}")
            kernel = getattr(module, f"{op}_ref" if file == "reference" else op)
            setattr(cls, op, staticmethod(kernel))
        return cls

    return wire
