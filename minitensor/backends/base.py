"""The backend seam: where an array lives and which kernels run on it.

A Backend bundles an array module `xp` (numpy or cupy: the primitive ops are
the array module's own `xp.exp`, ...) with the fused kernels of
`minitensor/kernels/` (see kernels/README.md for their contract), and a few
dtype-aware helpers (cast, add, scale, matmul, dropout, stacked) that also handle bf16, whose
arrays are uint16 bits (minitensor/dtypes.py). The NumPy backend is the reference;
every other backend must pass the same tests. Backends are singletons, so
`a.backend is b.backend` says two tensors can meet.
"""
from __future__ import annotations

import importlib

import numpy as np

from ..dtypes import BF16, is_half
from .cuda_graph import refuse_in_capture

# The fused kernels every backend provides, one folder each under minitensor/kernels/.
KERNELS = ("softmax_forward", "softmax_backward", "layernorm_forward", "layernorm_backward",
           "cross_entropy_forward", "adam_step", "embedding_backward", "dropout_forward", "bf16_cast",
           "bias_relu_forward", "bias_backward", "dropout_add_layernorm_forward", "dropout_add_layernorm_backward")


class Backend:
    name: str = "abstract"
    device: str = "cpu"
    xp = np
    supports_bf16 = True   # its kernels read and write bf16 (uint16 bits); Numba's do not

    # --- arrays --------------------------------------------------------------
    def asarray(self, data, dtype=None):
        if not hasattr(data, "__cuda_array_interface__"):
            refuse_in_capture("an upload from the host")
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

    # --- dtype-aware helpers (bf16 arrays are uint16 bits: minitensor/dtypes.py) ---------------
    def cast(self, x, dtype):
        """x as dtype: to or from bf16 through the bf16_cast kernel, any other pair by astype."""
        dtype = np.dtype(dtype)
        if x.dtype == dtype:
            return x
        if dtype == BF16 or x.dtype == BF16:
            return self.bf16_cast(x, dtype)
        return x.astype(dtype)

    def add(self, a, b):
        """a + b (b broadcasts to a), summed in float32 at least and rounded once to a's dtype."""
        if a.dtype != BF16:
            return a + b
        return self.cast(self.cast(a, np.float32) + self.cast(b, np.float32), BF16)

    def scale(self, x, factor):
        """x *= factor in place (factor broadcasts to x: a row of per-row scales, say), rounded once to
        x's dtype: bf16 bits too, which a plain *= would multiply as integers. Returns x."""
        if x.dtype != BF16:
            x *= factor.astype(x.dtype)
            return x
        x[...] = self.cast(self.cast(x, np.float32) * factor.astype(np.float32), BF16)
        return x

    def matmul(self, a, b, out_dtype=None, bias=None, out=None, accumulate=False):
        """a @ b (+ bias (N,)), batched over leading axes: (..., M, K) @ (..., K, N) or (K, N).

        Half-precision operands (fp16, bf16) are multiplied and summed in float32, as cuBLAS
        does with CUBLAS_COMPUTE_32F, and rounded once to out_dtype (default: a's dtype).
        `out`: the array to write the product into (a view of a wider one, say), in its dtype;
        `accumulate`: out += a @ b, rounded once.
        """
        out_dtype = np.dtype(out_dtype or (a.dtype if out is None else out.dtype))
        xp = self.xp
        if out is not None and bias is None and not is_half(a.dtype) and out.dtype == a.dtype == b.dtype:
            if accumulate:
                out += xp.matmul(a, b)                         # one temporary, one pass adding it
            else:
                xp.matmul(a, b, out=out)                       # written where out lies, no temporary
            return out
        if is_half(a.dtype):                                   # NumPy's own float16 matmul rounds as it sums
            c = xp.matmul(self.cast(a, np.float32), self.cast(b, np.float32))
            if bias is not None:
                c += self.cast(bias, np.float32)
        else:
            c = xp.matmul(a, b)
            if bias is not None:
                c += bias
        if out is None:
            return c if c.dtype == out_dtype else self.cast(c, out_dtype)
        if accumulate:
            c += self.cast(out, c.dtype)
        out[...] = self.cast(c, out.dtype)
        return out

    def dropout(self, x, p: float, seed: int, time_major: bool = False):
        """Inverted dropout with the draws of `uniform(seed, x.shape)`: the same seed, the same mask.

        time_major: x is (T, B, ...) and gets the draws of its (B, T, ...) transpose, so that each
        element's mask depends on its sentence, position and feature, not on the layout.
        """
        return self.dropout_forward(x, self.draws(seed, x.shape, time_major), p)

    def draws(self, seed: int, shape, time_major: bool = False):
        """uniform(seed, shape) as dropout reads it: time_major, those of the (B, T, ...) transpose, swapped back."""
        if not time_major:
            return self.uniform(seed, shape, "float32")
        return self.xp.swapaxes(self.uniform(seed, (shape[1], shape[0]) + tuple(shape[2:]), "float32"), 0, 1)

    def dropout_add_layernorm(self, x, s, bias, gamma, beta, eps, p, seed, time_major=False):
        """(y, z, mean, rstd) of z = x + Dropout_p(s + bias), y = LayerNorm(z) (§3.1, §5.4), the mask that of
        dropout(seed): the dropout_add_layernorm_forward kernel with those draws."""
        u = self.draws(seed, x.shape, time_major) if p > 0.0 else None
        return self.dropout_add_layernorm_forward(x, s, u, p, bias, gamma, beta, eps)

    def dropout_add_layernorm_grad(self, dys, z, gamma, mean, rstd, p, seed, time_major, with_bias):
        """(dx, ds, dgamma, dbeta, dbias) of dropout_add_layernorm, dys the gradients of y (their sum is
        taken in the kernel, two at a time at most: more are added first)."""
        dys = self.at_most_two(dys)
        u = self.draws(seed, z.shape, time_major) if p > 0.0 else None
        return self.dropout_add_layernorm_backward(dys, z, u, p, gamma, mean, rstd, with_bias)

    def at_most_two(self, dys) -> tuple:
        """The gradients of one output as a tuple of at most two (the kernel adds two as it reads them):
        more are added first."""
        dys = tuple(dys)
        while len(dys) > 2:
            dys = (self.add(dys[0], dys[1]), *dys[2:])
        return dys

    def unfused_dropout_add_layernorm(self, x, s, bias, gamma, beta, eps, p, seed, time_major=False):
        """dropout_add_layernorm from the unfused kernels (bias add, dropout, add, LayerNorm): for rows too wide
        for the fused one. Half precision rounds after each step here, once there."""
        d = s if bias is None else self.add(s, self.cast(bias, s.dtype))
        z = self.add(x, self.dropout(d, p, seed, time_major) if p > 0.0 else d)
        y, mean, rstd = self.layernorm_forward(z, gamma, beta, eps)
        return y, z, mean, rstd

    def unfused_dropout_add_layernorm_grad(self, dys, z, gamma, mean, rstd, p, seed, time_major, with_bias):
        """dropout_add_layernorm_grad from the unfused kernels (see unfused_dropout_add_layernorm)."""
        dy = dys[0]
        for other in dys[1:]:
            dy = self.add(dy, other)
        dx, dgamma, dbeta = self.layernorm_backward(dy, z, gamma, mean, rstd)
        ds = self.dropout(dx, p, seed, time_major) if p > 0.0 else dx
        dbias = self.bias_backward(ds.reshape(-1, ds.shape[-1]), None, gamma.dtype)[1] if with_bias else None
        return dx, ds, dgamma, dbeta, dbias

    def stacked(self, arrays):
        """One (n, *shape) array of n equally shaped arrays: a read-only view when they lie equally spaced in
        one buffer (parameters in the optimizer's flat buffers do), else a copy (xp.stack).

        The view of the same arrays (the same objects, as a training step passes its weights each step)
        is made once and kept on the backend: a step asks for a few dozen.
        """
        views = vars(self).setdefault("_stacked_views", {})
        key = tuple(map(id, arrays))
        if key in views and all(a is b for a, b in zip(views[key][0], arrays)):
            return views[key][1]
        first, n = arrays[0], len(arrays)
        if n > 1 and all(a.shape == first.shape and a.strides == first.strides and a.dtype == first.dtype
                         for a in arrays):
            places = [self.buffer_address(a) for a in arrays]
            step = places[1][1] - places[0][1]
            if (step >= first.nbytes and first.flags.c_contiguous and all(buffer is places[0][0] for buffer, _ in places)
                    and all(b[1] - a[1] == step for a, b in zip(places, places[1:]))):
                view = self.as_strided(first, (n,) + first.shape, (step,) + first.strides)
                views[key] = (tuple(arrays), view)          # the arrays kept too: their ids stay theirs
                return view
        return self.xp.stack(arrays)

    @staticmethod
    def buffer_address(a):
        """(the allocation a lives in, the address of a's first element)."""
        return root_array(a), a.__array_interface__["data"][0]

    @staticmethod
    def as_strided(a, shape, strides):
        """A read-only view of a's memory with these shape and strides (bytes)."""
        return np.lib.stride_tricks.as_strided(a, shape, strides, subok=True, writeable=False)

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

    def adam_step(self, param, grad, m, v, lr, beta1, beta2, eps, step, half=None) -> None:
        """In place: Adam moments m, v and the bias-corrected update of param; half (fp16 or
        bf16, param's shape, optional) receives the updated param rounded to its dtype."""
        raise NotImplementedError

    def embedding_backward(self, dout, ids, num_embeddings):
        """dweight = zeros((num_embeddings, D)); dweight[ids[i]] += dout[i]."""
        raise NotImplementedError

    def dropout_forward(self, x, u, p):
        """y = x / (1 - p) where u >= p, else 0 (u: uniform [0, 1) draws of x's shape)."""
        raise NotImplementedError

    def bf16_cast(self, x, dtype):
        """x float -> bf16 bits (dtype uint16, nearest even), or bf16 bits -> float dtype (exact)."""
        raise NotImplementedError

    def dropout_add_layernorm_forward(self, x, s, u, p, bias, gamma, beta, eps):
        """(y, z, mean, rstd): z = x + Dropout(s + bias) with draws u (None when p = 0), y = LayerNorm(z)."""
        raise NotImplementedError

    def dropout_add_layernorm_backward(self, dys, z, u, p, gamma, mean, rstd, with_bias):
        """(dx, ds, dgamma, dbeta, dbias) of dropout_add_layernorm_forward; dys: one or two gradients of y."""
        raise NotImplementedError

    def bias_relu_forward(self, x, bias):
        """In place: x = max(0, x + bias) over the last axis (x C-contiguous). Returns x."""
        raise NotImplementedError

    def bias_backward(self, dy, relu_out, dtype):
        """(dx, db): dx = dy where relu_out > 0 (dy itself when relu_out is None), db = Σ over axis -2 of dx."""
        raise NotImplementedError

    def __repr__(self) -> str:
        return f"<backend {self.name} on {self.device}>"


def root_array(a):
    """The array that owns a's memory: down the chain of views, as_strided's views too."""
    while True:
        base = a.base
        if isinstance(base, np.ndarray):
            a = base
        elif isinstance(getattr(base, "base", None), np.ndarray):   # as_strided keeps its source behind a stand-in
            a = base.base
        else:
            return a


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
