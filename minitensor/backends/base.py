"""The backend seam: where an array lives and which kernels run on it.

A Backend bundles an array module `xp` (numpy or cupy: the primitive ops are
the array module's own `xp.exp`, `xp.matmul`, ...) with the fused kernels of
`minitensor/kernels/` (see kernels/README.md for their contract). The NumPy
backend is the reference; every other backend must pass the same tests.
Backends are singletons, so `a.backend is b.backend` says two tensors can meet.
"""
from __future__ import annotations

import numpy as np


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

    # --- fused kernels (kernels/README.md) -------------------------------------
    def softmax_forward(self, x, scale, mask):
        raise NotImplementedError

    def softmax_backward(self, y, dy, scale):
        raise NotImplementedError

    def layernorm_forward(self, x, gamma, beta, eps):
        raise NotImplementedError

    def layernorm_backward(self, dy, x, gamma, mean, rstd):
        raise NotImplementedError

    def cross_entropy_forward(self, logits, targets, eps_ls, pad_idx):
        raise NotImplementedError

    def adam_step(self, param, grad, m, v, lr, beta1, beta2, eps, step) -> None:
        raise NotImplementedError

    def embedding_backward(self, dout, ids, num_embeddings):
        raise NotImplementedError

    def dropout_forward(self, x, u, p):
        raise NotImplementedError

    def __repr__(self) -> str:
        return f"<backend {self.name} on {self.device}>"
