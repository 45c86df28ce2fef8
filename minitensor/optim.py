"""Optimisers and the learning-rate schedule: SGD, Adam (§5.3), NoamSchedule (§5.3, Eq. (3)),
and gradient clipping by global norm.

Optimisers update `param.data` in place and never touch `param.grad` in place.
`lr` is a number or a schedule: any callable step -> learning rate.
"""
from __future__ import annotations

import math

import numpy as np

from .backends.cuda_graph import refuse_in_capture


class NoamSchedule:
    """§5.3, Eq. (3): lrate = d_model^−0.5 · min(step^−0.5, step · warmup^−1.5).

    Linear warm-up for `warmup` steps, then decay ∝ 1/√step; the peak is at
    step = warmup, where both terms are equal. `factor` scales the whole curve
    (1.0 in the paper; some reimplementations use 2.0).
    """

    def __init__(self, d_model: int, warmup: int = 4000, factor: float = 1.0):
        if warmup <= 0:
            raise ValueError(f"warmup must be positive, got {warmup}")
        self.d_model, self.warmup, self.factor = d_model, warmup, factor

    def __call__(self, step: int) -> float:
        step = max(step, 1)                                   # step_num starts at 1
        return self.factor * self.d_model ** -0.5 * min(step ** -0.5, step * self.warmup ** -1.5)


def _named(params):
    """Accept parameters or (name, parameter) pairs; return a list of pairs."""
    params = list(params)
    if params and isinstance(params[0], tuple):
        return params
    return [(str(i), p) for i, p in enumerate(params)]


class Optimizer:
    def __init__(self, params, lr):
        self.named_params = _named(params)
        if not self.named_params:
            raise ValueError("optimizer got an empty parameter list")
        self.params = [p for _, p in self.named_params]
        self.lr = lr
        self.step_count = 0

    def current_lr(self, step: int | None = None) -> float:
        step = self.step_count if step is None else step
        refuse_in_capture("the learning rate and step are host numbers")
        return float(self.lr(step)) if callable(self.lr) else float(self.lr)

    def zero_grad(self) -> None:
        for p in self.params:
            p.grad = None


class SGD(Optimizer):
    """p ← p − lr·g (optionally with momentum: v ← μv + g; p ← p − lr·v)."""

    def __init__(self, params, lr=0.1, momentum: float = 0.0):
        super().__init__(params, lr)
        self.momentum = momentum
        self.velocity = [None] * len(self.named_params)

    def step(self) -> None:
        self.step_count += 1
        lr = self.current_lr()
        for i, p in enumerate(self.params):
            if p.grad is None:
                continue
            update = p.grad
            if self.momentum:
                self.velocity[i] = update if self.velocity[i] is None else self.momentum * self.velocity[i] + update
                update = self.velocity[i]
            p.data -= lr * update


class Adam(Optimizer):
    """Adam (Kingma & Ba) with bias correction; the paper's β₁=0.9, β₂=0.98, ε=1e−9 (§5.3).

    All parameters live in one flat buffer of their common dtype (float32 masters,
    or float64 for exact checks; each `param.data` is a view into it), as do the moments, so one step is one concatenation of the
    gradients (`gather_grads`) plus one fused `adam_step` kernel call, not one
    call per parameter. A parameter whose `.data` was replaced (load_state_dict, .to())
    is copied back into the buffer on the next step. A missing gradient counts as zero.

    Mixed precision: with `half_dtype` (float16 or bf16, the model's activation dtype) the
    kernel also writes each updated parameter rounded to it, into one more flat buffer whose
    views the parameters hand to the forward pass (Parameter.half): no weight is cast per step.
    """

    def __init__(self, params, lr=1e-3, betas=(0.9, 0.98), eps: float = 1e-9, half_dtype=None):
        super().__init__(params, lr)
        self.beta1, self.beta2 = betas
        self.eps = eps
        self.backend, self.dtype = self.params[0].backend, self.params[0].dtype
        for name, p in self.named_params:
            if p.backend is not self.backend or p.dtype != self.dtype or p.dtype not in (np.float32, np.float64):
                raise ValueError(f"Adam: parameter {name!r} is {p.dtype} on {p.backend.name}; all parameters "
                                 f"must be float32 (or all float64) on {self.backend.name}")
        self.offsets = np.cumsum([0] + [p.size for p in self.params]).tolist()
        xp = self.backend.xp
        self.flat = xp.empty(self.offsets[-1], dtype=self.dtype)
        self.m = xp.zeros(self.offsets[-1], dtype=self.dtype)
        self.v = xp.zeros(self.offsets[-1], dtype=self.dtype)
        self.views = [None] * len(self.params)
        self._flat_grad, self._gathered = None, []
        self._adopt_parameters()
        self.half = None                                      # the half-precision copy of `flat`, if asked for
        if half_dtype is not None and np.dtype(half_dtype) != self.dtype:
            self.half = self.backend.cast(self.flat, half_dtype)
            self._share_half()

    def _share_half(self) -> None:
        for i, p in enumerate(self.params):
            p.set_half(self._slice(self.half, i))

    def _slice(self, buffer, i):
        return buffer[self.offsets[i]:self.offsets[i + 1]].reshape(self.params[i].shape)

    def _adopt_parameters(self) -> bool:
        """Copy any parameter that is not (or no longer) a view of the flat buffer into it; True if one was."""
        adopted = False
        for i, p in enumerate(self.params):
            if p.data is not self.views[i]:
                view = self._slice(self.flat, i)
                view[...] = p.data
                p.data = self.views[i] = view
                adopted = True
        return adopted

    def gather_grads(self, first: int = 0, last: int | None = None):
        """Every gradient in one flat array of the parameters' dtype, laid out like them (zeros where missing).

        Copies the gradients of parameters [first, last) (all by default) that are not in it
        yet, once per step (after `zero_grad()`), and returns the whole array: the loss scaler,
        the finiteness check and clipping then work in place on this one array (one kernel
        each instead of one per parameter), and `step()` uses it as it finds it. A
        data-parallel trainer gathers contiguous ranges as their gradients become final and
        all-reduces each range in place.
        """
        xp = self.backend.xp
        if self._flat_grad is None:
            self._flat_grad = xp.empty(self.offsets[-1], dtype=self.dtype)
            self._gathered = [False] * len(self.params)
        last = len(self.params) if last is None else last
        i = first
        while i < last:
            if self._gathered[i]:
                i += 1
                continue
            j = i
            while j < last and not self._gathered[j]:  # a run of parameters not gathered yet: one concatenation
                j += 1
            grads = [(xp.zeros(p.size, self.dtype) if p.grad is None else p.grad.reshape(-1)) for p in self.params[i:j]]
            xp.concatenate(grads, out=self._flat_grad[self.offsets[i]:self.offsets[j]])
            self._gathered[i:j] = [True] * (j - i)
            i = j
        return self._flat_grad

    def zero_grad(self) -> None:
        super().zero_grad()
        self._flat_grad = None

    def flat_parameters(self):
        """The one flat buffer every parameter is a view of (what a data-parallel start broadcasts)."""
        self._adopt_parameters()
        return self.flat

    def step(self) -> None:
        self.step_count += 1
        adopted = self._adopt_parameters()
        self.backend.adam_step(self.flat, self.gather_grads(), self.m, self.v, self.current_lr(),
                               self.beta1, self.beta2, self.eps, self.step_count, half=self.half)
        self._flat_grad = None
        if self.half is not None and adopted:
            self._share_half()                                # a parameter adopted above dropped its copy

    def state_dict(self) -> dict[str, np.ndarray]:
        """Moments by parameter name plus the step, as NumPy arrays (checkpoint-ready)."""
        state = {"step": np.array(self.step_count, dtype=np.int64)}
        for i, (name, _) in enumerate(self.named_params):
            state[f"m.{name}"] = self.backend.to_numpy(self._slice(self.m, i))
            state[f"v.{name}"] = self.backend.to_numpy(self._slice(self.v, i))
        return state

    def load_state_dict(self, state: dict) -> None:
        for i, (name, p) in enumerate(self.named_params):
            for key, buffer in ((f"m.{name}", self.m), (f"v.{name}", self.v)):
                if key not in state:
                    raise KeyError(f"optimizer state has no {key!r}")
                value = np.asarray(state[key])
                if tuple(value.shape) != p.shape:
                    raise ValueError(f"optimizer state {key!r} has shape {tuple(value.shape)}, "
                                     f"parameter has {p.shape}")
                self._slice(buffer, i)[...] = self.backend.asarray(np.array(value, dtype=self.dtype))
        self.step_count = int(np.asarray(state["step"]))


def clip_grad_norm(grad, max_norm: float):
    """Scale the flat gradient `grad` (Adam.gather_grads()) in place by min(1, max_norm/‖grad‖).

    Returns the L2 norm before clipping as a 0-d backend array (no device→host
    sync: read it with float() only when you log it). The paper does not clip.
    """
    total = grad.dot(grad) ** 0.5                             # NumPy or CuPy alike: array methods only
    if max_norm is not None and math.isfinite(max_norm):
        grad *= (max_norm / (total + 1e-6)).clip(0.0, 1.0).astype(grad.dtype)
    return total
