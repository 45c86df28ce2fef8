"""Tensor: an n-d array on a backend, plus what autograd needs (grad, requires_grad, _ctx).

Every operator calls `Function.apply`, which records the graph; `backward()`
walks it (autograd.py). float32 is the default dtype; ask for float64 for
gradient checks. The default backend is "numpy", the readable reference; ask
for "numba"/"cpu" (compiled CPU kernels) or "cuda" explicitly.

Broadcasting is explicit: an input that needs a gradient and has a smaller shape
is first `expand`ed (movement.Expand), whose backward sums the gradient back over
the broadcast axes.
"""
from __future__ import annotations

import numpy as np

from . import functions as F
from .autograd import backward as _run_backward
from .backends import Backend, get_backend


class Tensor:
    __slots__ = ("data", "grad", "requires_grad", "backend", "_ctx", "__weakref__")
    __array_priority__ = 1000  # numpy scalars/arrays on the left defer to our __radd__ etc.

    def __init__(self, data, requires_grad: bool = False, backend: str | Backend | None = None,
                 dtype=None):
        self.backend = get_backend("numpy" if backend is None else backend)
        if dtype is None and _is_array_of(data, self.backend) and data.dtype != np.float64:
            self.data = data                                  # already an array of this backend: no copy
        else:
            if isinstance(data, Tensor):
                data = data.data
            if self.backend.device == "cpu" and not isinstance(data, np.ndarray) and hasattr(data, "get"):
                data = data.get()                             # a CuPy array handed to a CPU tensor
            array = self.backend.xp.asarray(data)
            if dtype is None and array.dtype.kind == "f":
                dtype = np.float32                            # float32 unless you ask for another
            self.data = array if dtype is None else array.astype(dtype, copy=False)
        self.grad = None
        self.requires_grad = requires_grad
        self._ctx = None

    @classmethod
    def _wrap(cls, data, backend: Backend, requires_grad: bool = False, ctx=None) -> "Tensor":
        """A tensor around an array that is already right (used by Function.apply): no checks, no copy."""
        t = cls.__new__(cls)
        t.data, t.backend, t.requires_grad, t._ctx, t.grad = data, backend, requires_grad, ctx, None
        return t

    # --- basic facts ------------------------------------------------------------
    shape = property(lambda self: tuple(self.data.shape))
    ndim = property(lambda self: self.data.ndim)
    size = property(lambda self: int(self.data.size))
    dtype = property(lambda self: self.data.dtype)
    device = property(lambda self: self.backend.device)
    T = property(lambda self: self.transpose(-1, -2))

    def __repr__(self) -> str:
        grad = ", requires_grad=True" if self.requires_grad else ""
        return f"Tensor({self.numpy()!r}, backend={self.backend.name}{grad})"

    def __len__(self) -> int:
        return self.shape[0]

    def numpy(self) -> np.ndarray:
        return self.backend.to_numpy(self.data)

    def item(self) -> float:
        return self.numpy().item()

    def detach(self) -> "Tensor":
        """The same numbers, cut from the graph."""
        return Tensor._wrap(self.data, self.backend)

    def to(self, device: str | Backend) -> "Tensor":
        """A copy on another backend ("cpu", "cuda", "numpy", "numba", "cupy"), as a new leaf."""
        target = get_backend(device)
        if target is self.backend:
            return self
        data = target.asarray(self.backend.to_numpy(self.data))
        return Tensor(data, requires_grad=self.requires_grad, backend=target, dtype=data.dtype)

    def astype(self, dtype) -> "Tensor":
        return self if self.dtype == np.dtype(dtype) else F.Cast.apply(self, dtype=np.dtype(dtype))

    def backward(self, grad_out=None) -> None:
        _run_backward(self, None if grad_out is None else _raw(grad_out, self))

    # --- arithmetic (with broadcasting) -----------------------------------------
    def _binary(self, function, other, reverse=False):
        other = _ensure_tensor(other, self)
        a, b = (other, self) if reverse else (self, other)
        if a.shape != b.shape:
            try:
                shape = np.broadcast_shapes(a.shape, b.shape)
            except ValueError:
                raise ValueError(f"{function.__name__}: cannot broadcast shapes {a.shape} and {b.shape}") from None
            a, b = a._expand_if_needed(shape), b._expand_if_needed(shape)
        return function.apply(a, b)

    def _expand_if_needed(self, shape):
        # Only an input that needs a gradient must be expanded: the others broadcast inside xp.
        return self.expand(shape) if self.requires_grad and self.shape != shape else self

    __add__ = lambda self, o: self._binary(F.Add, o)
    __radd__ = lambda self, o: self._binary(F.Add, o, reverse=True)
    __sub__ = lambda self, o: self._binary(F.Sub, o)
    __rsub__ = lambda self, o: self._binary(F.Sub, o, reverse=True)
    __mul__ = lambda self, o: self._binary(F.Mul, o)
    __rmul__ = lambda self, o: self._binary(F.Mul, o, reverse=True)
    __truediv__ = lambda self, o: self._binary(F.Div, o)
    __rtruediv__ = lambda self, o: self._binary(F.Div, o, reverse=True)
    __pow__ = lambda self, o: self._binary(F.Pow, o)
    __rpow__ = lambda self, o: self._binary(F.Pow, o, reverse=True)
    __neg__ = lambda self: F.Neg.apply(self)
    __matmul__ = lambda self, o: matmul(self, o)

    # Comparisons give constant bool tensors (no gradient flows through them).
    __lt__ = lambda self, o: _constant(self.data < _raw(o, self), self)
    __le__ = lambda self, o: _constant(self.data <= _raw(o, self), self)
    __gt__ = lambda self, o: _constant(self.data > _raw(o, self), self)
    __ge__ = lambda self, o: _constant(self.data >= _raw(o, self), self)

    def exp(self): return F.Exp.apply(self)
    def log(self): return F.Log.apply(self)
    def sqrt(self): return F.Sqrt.apply(self)
    def relu(self): return F.Relu.apply(self)
    def tanh(self): return F.Tanh.apply(self)

    # --- reductions -------------------------------------------------------------
    def sum(self, axis=None, keepdims=False):
        return F.Sum.apply(self, axis=_axes(axis, self.ndim), keepdims=keepdims)

    def mean(self, axis=None, keepdims=False):
        axes = _axes(axis, self.ndim)
        count = self.size if axes is None else int(np.prod([self.shape[a] for a in axes]))
        return self.sum(axis, keepdims) * (1.0 / count)

    def max(self, axis=None, keepdims=False):
        return F.Max.apply(self, axis=_axes(axis, self.ndim), keepdims=keepdims)

    # --- movement ---------------------------------------------------------------
    def reshape(self, *shape):
        shape = tuple(shape[0]) if len(shape) == 1 and isinstance(shape[0], (tuple, list)) else shape
        return F.Reshape.apply(self, shape=shape)

    def permute(self, *axes):
        axes = tuple(axes[0]) if len(axes) == 1 and isinstance(axes[0], (tuple, list)) else axes
        return F.Permute.apply(self, axes=tuple(a % self.ndim for a in axes))

    def transpose(self, axis1=-2, axis2=-1):
        axes = list(range(self.ndim))
        axes[axis1], axes[axis2] = axes[axis2], axes[axis1]
        return self.permute(axes)

    def expand(self, *shape):
        shape = tuple(shape[0]) if len(shape) == 1 and isinstance(shape[0], (tuple, list)) else shape
        if shape == self.shape:
            return self
        try:
            np.broadcast_shapes(self.shape, shape)
        except ValueError:
            raise ValueError(f"expand: cannot broadcast shape {self.shape} to {shape}") from None
        return F.Expand.apply(self, shape=shape)

    def unsqueeze(self, axis):
        shape = list(self.shape)
        shape.insert(axis % (self.ndim + 1), 1)
        return self.reshape(shape)

    def __getitem__(self, index):
        index = tuple(_raw(i, self) if isinstance(i, Tensor) else i for i in index) \
            if isinstance(index, tuple) else (_raw(index, self) if isinstance(index, Tensor) else index)
        return F.GetItem.apply(self, index=index)

    # --- composite ops with their own kernels (functions/fused.py) ------------------
    def softmax(self, axis=-1, scale=1.0, mask=None):
        """softmax(scale·x) along `axis`; `mask` (bool, True = blocked) broadcasts to x."""
        mask = None if mask is None else _raw(mask, self)
        if axis % self.ndim != self.ndim - 1:       # the kernels work on the last axis: move `axis` there
            if mask is not None:
                mask = self.backend.xp.swapaxes(self.backend.xp.broadcast_to(mask, self.shape), axis, -1)
            return self.transpose(axis, -1).softmax(-1, scale, mask).transpose(axis, -1)
        return F.Softmax.apply(self, scale=scale, mask=mask)

    def log_softmax(self, axis=-1):
        if axis % self.ndim != self.ndim - 1:
            return self.transpose(axis, -1).log_softmax(-1).transpose(axis, -1)
        return F.LogSoftmax.apply(self)

    def masked_fill(self, mask, value):
        """x with `value` wherever mask is True (mask broadcasts to x; no gradient there)."""
        return where(mask, value, self)


# --- module-level constructors and ops ------------------------------------------------
def tensor(data, requires_grad=False, backend=None, dtype=None) -> Tensor:
    return Tensor(data, requires_grad=requires_grad, backend=backend, dtype=dtype)


def zeros(shape, requires_grad=False, backend=None, dtype=np.float32) -> Tensor:
    b = get_backend("numpy" if backend is None else backend)
    return Tensor(b.xp.zeros(shape, dtype=dtype), requires_grad, b, dtype)


def ones(shape, requires_grad=False, backend=None, dtype=np.float32) -> Tensor:
    b = get_backend("numpy" if backend is None else backend)
    return Tensor(b.xp.ones(shape, dtype=dtype), requires_grad, b, dtype)


def matmul(a: Tensor, b: Tensor) -> Tensor:
    """Batched a @ b: (..., M, K) @ (..., K, N) or (..., M, K) @ (K, N)."""
    b = _ensure_tensor(b, a)
    if a.ndim < 2 or b.ndim < 2:
        raise ValueError(f"matmul needs at least 2-d operands, got shapes {a.shape} and {b.shape}")
    if a.shape[-1] != b.shape[-2]:
        raise ValueError(f"matmul: shapes {a.shape} and {b.shape} are not aligned "
                         f"({a.shape[-1]} != {b.shape[-2]})")
    if b.ndim > 2 and a.shape[:-2] != b.shape[:-2]:      # broadcast the batch axes explicitly
        try:
            batch = np.broadcast_shapes(a.shape[:-2], b.shape[:-2])
        except ValueError:
            raise ValueError(f"matmul: batch axes of {a.shape} and {b.shape} do not broadcast") from None
        a, b = a.expand(batch + a.shape[-2:]), b.expand(batch + b.shape[-2:])
    return F.MatMul.apply(a, b)


def where(cond, a, b) -> Tensor:
    """cond ? a : b elementwise; cond is a constant bool array or Tensor."""
    like = a if isinstance(a, Tensor) else b
    a, b = _ensure_tensor(a, like), _ensure_tensor(b, like)
    cond = _raw(cond, like)
    shape = np.broadcast_shapes(cond.shape, a.shape, b.shape)
    return F.Where.apply(a._expand_if_needed(shape), b._expand_if_needed(shape), cond=cond)


def concat(tensors, axis=0) -> Tensor:
    shapes = [t.shape for t in tensors]
    ref = list(shapes[0])
    for s in shapes[1:]:
        if len(s) != len(ref) or any(x != y for i, (x, y) in enumerate(zip(s, ref)) if i != axis % len(ref)):
            raise ValueError(f"concat along axis {axis}: shapes {shapes} differ off that axis")
    return F.Concat.apply(*tensors, axis=axis % len(ref))


def stack(tensors, axis=0) -> Tensor:
    return concat([t.unsqueeze(axis) for t in tensors], axis=axis)


# --- helpers -------------------------------------------------------------------------
def _is_array_of(data, backend) -> bool:
    return type(data) is backend.xp.ndarray


def _raw(value, like: Tensor):
    """The backend array behind a Tensor, array or scalar, on `like`'s backend."""
    if isinstance(value, Tensor):
        if value.backend is not like.backend:
            raise ValueError(f"cannot mix backends {value.backend.name} and {like.backend.name}")
        return value.data
    if isinstance(value, (bool, int, float)):
        return value
    return like.backend.asarray(value)


def _ensure_tensor(value, like: Tensor) -> Tensor:
    """Wrap constants as tensors on `like`'s backend with its float dtype."""
    if isinstance(value, Tensor):
        return value
    if isinstance(value, (bool, int, float)):
        return Tensor._wrap(like.backend.xp.asarray(value, dtype=like.dtype), like.backend)
    array = like.backend.asarray(value)
    return Tensor(array, backend=like.backend, dtype=like.dtype if array.dtype.kind == "f" else None)


def _constant(array, like: Tensor) -> Tensor:
    return Tensor._wrap(array, like.backend)


def _axes(axis, ndim):
    if axis is None:
        return None
    axes = (axis,) if isinstance(axis, int) else tuple(axis)
    return tuple(a % ndim for a in axes) if ndim else ()
