"""The layers a Transformer is built from: Linear, Embedding, LayerNorm, Dropout, containers.

Weights are stored in float32 (the master copy). When activations arrive in
float16 (mixed precision), layers cast their weights to the activations'
dtype on the way in; the Cast's backward hands float32 gradients back.
"""
from __future__ import annotations

import numpy as np

from .. import functions as F
from ..backends.cuda_graph import refuse_in_capture
from ..tensor import Tensor
from . import init
from .module import Module, Parameter


def _rng(rng):
    return np.random.default_rng() if rng is None else rng


class Linear(Module):
    """y = x W + b, with W of shape (in_features, out_features) as in §3.3, Eq. (2): xW₁ + b₁."""

    def __init__(self, in_features: int, out_features: int, bias: bool = True, rng=None):
        super().__init__()
        self.in_features, self.out_features = in_features, out_features
        self.weight = Parameter(init.xavier_uniform((in_features, out_features), _rng(rng)))
        self.bias = Parameter(init.zeros((out_features,))) if bias else None
        self.add_bias = True   # False: the op that reads the output adds the bias (a fused one on its way)

    def forward(self, x: Tensor, relu: bool = False) -> Tensor:
        """x W + b; relu: max(0, x W + b) as one Function (F.LinearReLU; needs the bias)."""
        if x.shape[-1] != self.in_features:
            raise ValueError(f"Linear({self.in_features}, {self.out_features}) got input of shape {x.shape}")
        params = (self.weight,) if self.bias is None or not self.add_bias else (self.weight, self.bias)
        half = tuple(p.half(x.dtype) for p in params)    # the optimizer's copies in x's dtype, if any
        half = half if all(h is not None for h in half) else None
        function = F.LinearReLU if relu else F.Linear
        return function.apply(x, *params, half=half)     # (..., in) @ (in, out) + (out,) -> (..., out)


class Embedding(Module):
    """A (num_embeddings, dim) table; forward(ids) looks rows up (§3.4)."""

    def __init__(self, num_embeddings: int, dim: int, rng=None, std: float | None = None):
        super().__init__()
        self.num_embeddings, self.dim = num_embeddings, dim
        rng = _rng(rng)
        weight = init.normal((num_embeddings, dim), rng, std) if std else \
            init.xavier_uniform((num_embeddings, dim), rng)
        self.weight = Parameter(weight)

    def forward(self, ids) -> Tensor:
        ids = ids.data if isinstance(ids, Tensor) else ids
        if type(ids) is np.ndarray and ids.size and (ids.min() < 0 or ids.max() >= self.num_embeddings):
            # checked for host arrays only: on a GPU the check would cost a device->host sync every
            # step; there the embedding kernels keep out-of-range ids from writing outside the table
            raise IndexError(f"Embedding: ids must lie in [0, {self.num_embeddings}), "
                             f"got min {int(ids.min())}, max {int(ids.max())}")
        return F.Embedding.apply(self.weight, ids=self.weight.backend.asarray(ids))  # ids.shape + (dim,)


class LayerNorm(Module):
    """LayerNorm over the last axis with learned gain γ (ones) and bias β (zeros) (§3.1)."""

    def __init__(self, dim: int, eps: float = 1e-6):
        super().__init__()
        self.dim, self.eps = dim, eps
        self.gamma = Parameter(init.ones((dim,)))
        self.beta = Parameter(init.zeros((dim,)))

    def forward(self, x: Tensor) -> Tensor:
        if x.shape[-1] != self.dim:
            raise ValueError(f"LayerNorm({self.dim}) got input of shape {x.shape}")
        return F.LayerNorm.apply(x, self.gamma, self.beta, eps=self.eps)   # casts γ, β to x's dtype inside


class Dropout(Module):
    """Inverted dropout (§5.4): zero each element with probability p in training, scale the rest by 1/(1−p).

    Each call draws one seed from `rng`; the backend turns it into the mask, so
    saving `rng`'s state is enough to replay the same masks after a resume.
    """

    def __init__(self, p: float, rng=None):
        super().__init__()
        if not 0.0 <= p < 1.0:
            raise ValueError(f"Dropout probability must be in [0, 1), got {p}")
        self.p = p
        self.rng = _rng(rng)

    def forward(self, x: Tensor, time_major: bool = False) -> Tensor:
        """time_major: x is (T, B, ...), and is masked as its (B, T, ...) transpose would be."""
        p, seed = self.draw()
        return x if p == 0.0 else F.Dropout.apply(x, p=p, seed=seed, time_major=time_major)

    def draw(self) -> tuple[float, int | None]:
        """(p, seed) for one call; (0.0, None) in eval mode. Fused ops that drop inside take these."""
        if not self.training or self.p == 0.0:
            return 0.0, None
        refuse_in_capture("dropout's seed is drawn on the host (train with p_drop = 0 to capture)")
        return self.p, int(self.rng.integers(2**63 - 1))


class ModuleList(Module):
    def __init__(self, modules=()):
        super().__init__()
        self._items = []
        for module in modules:
            self.append(module)

    def append(self, module: Module) -> None:
        setattr(self, str(len(self._items)), module)
        self._items.append(module)

    def __getitem__(self, i):
        return self._items[i]

    def __len__(self):
        return len(self._items)

    def __iter__(self):
        return iter(self._items)


class Sequential(ModuleList):
    def forward(self, x):
        for module in self._items:
            x = module(x)
        return x


class ReLU(Module):
    def forward(self, x: Tensor) -> Tensor:
        return x.relu()
