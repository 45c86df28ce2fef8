"""A counting backend that computes nothing: the host's side of a step, at full size, on any machine.

`HostOnlyBackend()` runs the real Python of a step (the model, autograd, Adam, cupy_blas's
planning, every launcher's decisions) and records each device call as CountingBackend does
(launches, bytes, FLOPs, allocations), but no call computes: every array a device call makes is
carved out of an `Arena` of reserved, never-touched address space (as CuPy carves arrays out of
its memory pool), so making one costs about what CuPy's pool does and no memory is used. Views
are real NumPy views, so layouts, strides and contiguity, and with them every copy the code
decides to make, are what they would be. A value read on the host (`float()`, `to_numpy`) is 0.

What it measures: `python -m train bench --host-only` times the Python of a Transformer-base
step this way, the host's cost per step with the GPU's work taken away (recording a call costs
about what CuPy's own Python costs to launch one: a few µs). Functions it has no shape rule for
run for real on the empty arrays and are listed in `counts.executed`, so a test can hold a step
to none. Never read or write an array it made: its memory is not there.
"""
from __future__ import annotations

import math
import mmap

import numpy as np

from . import cupy_blas
from .base import KERNELS
from .counting import CountingBackend, CountingNamespace, DeviceArray, function_launches
from .launch_costs import matmul_launches, plain

MAP_NORESERVE = 0x4000   # Linux: reserve address space without committing memory (mmap(2))


class Arena:
    """Arrays carved from reserved address space one after another, never freed, never touched.

    Each chunk is an anonymous MAP_NORESERVE mapping: untouched pages take no memory, so a step
    that makes tens of GB of arrays costs nothing but address space. A full chunk is followed by
    a new one (old arrays keep theirs), so no two arrays ever overlap. Where such a mapping is
    refused (not Linux), arrays are plain np.empty.
    """

    CHUNK = 1 << 42                                            # 4 TiB of addresses at a time
    ALIGN = 512                                                # CuPy's pool rounds to 512 bytes

    def __init__(self):
        self._base, self._used, self._size = None, 0, 0

    def empty(self, shape, dtype, order="C"):
        shape = (int(shape),) if isinstance(shape, (int, np.integer)) else tuple(shape)
        dtype = np.dtype(dtype)
        nbytes = math.prod(shape) * dtype.itemsize
        start, base = self._used, self._base
        if base is None or start + nbytes > self._size:
            base, start = self._map(max(nbytes, self.CHUNK)), 0
            if base is None:
                return np.empty(shape, dtype, order)
            self._base, self._size = base, base.size
        self._used = start + (nbytes + self.ALIGN - 1) // self.ALIGN * self.ALIGN + (nbytes == 0) * self.ALIGN
        flat = base[start:start + nbytes].view(dtype)
        return flat.reshape(shape[::-1]).T if order == "F" else flat.reshape(shape)

    def empty_like(self, a, dtype=None, order="K"):
        """An array of a's shape laid out as np.empty_like would (order K: axes in a's stride order)."""
        dtype = a.dtype if dtype is None else dtype
        if order == "K" and not a.flags.c_contiguous and a.ndim > 1:
            perm = sorted(range(a.ndim), key=lambda i: -abs(a.strides[i]))   # outermost first
            return self.empty([a.shape[i] for i in perm], dtype).transpose(np.argsort(perm))
        return self.empty(a.shape, dtype, "F" if order == "F" else "C")

    @staticmethod
    def _map(size):
        try:
            chunk = mmap.mmap(-1, size, flags=mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS | MAP_NORESERVE)
        except (OSError, ValueError, AttributeError):
            return None
        return np.frombuffer(chunk, np.uint8)


def _probe(value):
    """A one-element stand-in of value's dtype (scalars stay), to let NumPy say a result's dtype."""
    return np.zeros(1, value.dtype) if isinstance(value, np.ndarray) else value


def _reduced_shape(shape, axis, keepdims):
    axes = range(len(shape)) if axis is None else [a % len(shape) for a in np.atleast_1d(axis)]
    if keepdims:
        return tuple(1 if i in axes else n for i, n in enumerate(shape))
    return tuple(n for i, n in enumerate(shape) if i not in axes)


def _ufunc_result(ufunc, method, inputs, kwargs, known):
    """(shape, dtype) of ufunc.method(*inputs, **kwargs), found without computing it, each case once (`known`)."""
    key = (ufunc, method, *((x.shape, x.dtype) if isinstance(x, np.ndarray) else type(x) for x in inputs),
           *sorted((k, v) for k, v in kwargs.items() if k in ("axis", "keepdims", "dtype")))
    found = known.get(key)
    if found is None:
        found = known[key] = _ufunc_result_of(ufunc, method, inputs, kwargs)
    return found


def _ufunc_result_of(ufunc, method, inputs, kwargs):
    if ufunc.nout != 1 or method not in ("__call__", "reduce"):
        raise NotImplementedError(f"{ufunc.__name__}.{method}")
    shapes = [np.shape(x) for x in inputs]
    with np.errstate(all="ignore"):
        if method == "reduce":
            dtype = ufunc.reduce(_probe(inputs[0]), dtype=kwargs.get("dtype")).dtype
            return _reduced_shape(shapes[0], kwargs.get("axis", 0), kwargs.get("keepdims", False)), dtype
        dtype = ufunc(*map(_probe, inputs), dtype=kwargs.get("dtype")).dtype
    if ufunc is np.matmul:
        a, b = shapes
        return np.broadcast_shapes(a[:-2], b[:-2]) + a[-2:-1] + b[-1:], dtype
    return np.broadcast_shapes(*shapes), dtype


class EmptyArray(DeviceArray):
    """A DeviceArray whose device calls are recorded and never computed (results come from `arena`)."""

    arena: Arena
    ufunc_results: dict   # (ufunc, method, input shapes and dtypes) -> (shape, dtype) of the result

    def _new(self, array, kind, nbytes):
        """Wrap a result of one launch that read nbytes (its own bytes written are added)."""
        return self._wrap(array, 1, kind, nbytes + array.nbytes)

    def __array_ufunc__(self, ufunc, method, *inputs, out=None, **kwargs):
        moved = self.counts.moved(inputs)
        kind = f"{'ufunc' if method == '__call__' else method} {ufunc.__name__}"
        if out is not None:
            self.counts.launch(kind, 1, moved + self.counts.moved(out))
            return out[0] if len(out) == 1 else out
        try:
            shape, dtype = _ufunc_result(ufunc, method, plain(inputs), kwargs, self.ufunc_results)
        except NotImplementedError:
            return self._executed(f"ufunc {ufunc.__name__}.{method}",
                                  lambda: super(EmptyArray, self).__array_ufunc__(ufunc, method, *inputs, **kwargs))
        n = matmul_launches(*plain(inputs[:2])) if ufunc is np.matmul else 1
        return self._wrap(self.arena.empty(shape, dtype), n, kind, moved + math.prod(shape) * dtype.itemsize)

    def __array_function__(self, func, types, args, kwargs):
        name = func.__name__
        if name in _SHAPES:
            spec = _SHAPES[name](*plain(args), **{k: plain(v) for k, v in kwargs.items()})
            result = None if spec is None else (self.arena.empty_like(spec[0], spec[1]) if isinstance(spec[0], np.ndarray)
                                                else self.arena.empty(*spec))
        elif name in _VIEWS:
            result = func(*plain(args), **{k: plain(v) for k, v in kwargs.items()})
        else:
            return self._executed(f"function {name}",
                                  lambda: super(EmptyArray, self).__array_function__(func, types, args, kwargs))
        return self._wrap(result, *function_launches(name, args, kwargs, result, self.counts))

    def _executed(self, what, run):
        """Run an operation this class has no shape rule for, for real on the empty arrays, and note it."""
        self.counts.executed[what] = self.counts.executed.get(what, 0) + 1
        with np.errstate(all="ignore"):
            return run()

    def astype(self, dtype, order="K", casting="unsafe", subok=True, copy=True):
        if np.dtype(dtype) == self.dtype and not copy:
            return self
        return self._new(self.arena.empty_like(self, dtype, order), "astype", self.counts.moved(self))

    def copy(self, order="C"):
        return self._new(self.arena.empty_like(self, None, order), "copy", self.counts.moved(self))

    def reshape(self, *shape, **kwargs):
        shape = tuple(shape[0]) if len(shape) == 1 and isinstance(shape[0], (tuple, list)) else shape
        try:
            return np.ndarray.reshape(self, shape, copy=False, **kwargs)   # a view, of this class: no launch
        except ValueError:                                         # CuPy copies too
            known = int(np.prod([n for n in shape if n != -1]))
            shape = tuple(self.size // max(known, 1) if n == -1 else n for n in shape)
            return self._new(self.arena.empty(shape, self.dtype), "reshape copy", self.counts.moved(self))

    def fill(self, value):
        self.counts.launch("fill", 1, self.nbytes)

    def dot(self, other, out=None):
        other = plain(other)
        shape = self.shape[:-1] + other.shape[1:]
        return self._new(self.arena.empty(shape, np.result_type(self.dtype, other.dtype)), "dot",
                         self.counts.moved(self, other))

    def __getitem__(self, index):
        index = plain(index)
        parts = index if type(index) is tuple else (index,)
        arrays = [i for i in parts if isinstance(i, np.ndarray)]
        if not arrays:                                             # basic indexing: a view, or one element
            result = np.ndarray.__getitem__(self, index)
            return result if isinstance(result, np.ndarray) else self._wrap(np.asarray(result))
        if any(i.dtype == np.bool_ for i in arrays) or len(arrays) != len(parts):
            return self._executed("gather (masked or mixed index)", lambda: super(EmptyArray, self).__getitem__(index))
        shape = np.broadcast_shapes(*(i.shape for i in arrays)) + self.shape[len(parts):]   # a[ids], a[rows, cols]
        result = self.arena.empty(shape, self.dtype)
        return self._new(result, "gather", result.nbytes)           # rows read, then written

    def __setitem__(self, index, value):
        nbytes = self.counts.moved(self.view(np.ndarray)[plain(index)], value) if self.counts.detailed else 0
        self.counts.launch("setitem", 1, nbytes)

    def _host(self):
        self.counts.sync()
        return np.zeros(self.shape, self.dtype)                    # nothing was computed: read as 0


def _joined(arrays, axis=0, dtype=None, **_):
    shapes = [a.shape for a in arrays]
    axis = axis % len(shapes[0])
    return shapes[0][:axis] + (sum(s[axis] for s in shapes),) + shapes[0][axis + 1:], dtype or np.result_type(*arrays)


def _stacked(arrays, axis=0, dtype=None, **_):
    shape = arrays[0].shape
    axis = axis % (len(shape) + 1)
    return shape[:axis] + (len(arrays),) + shape[axis:], dtype or np.result_type(*arrays)


_SHAPES = {   # array function -> (shape, dtype) of its result, or (like, dtype) for one shaped as `like`
    "concatenate": _joined,
    "stack": _stacked,
    "where": lambda cond, a, b: (np.broadcast_shapes(*map(np.shape, (cond, a, b))),
                                 np.result_type(*map(_probe, (a, b)))),
    "zeros_like": lambda a, dtype=None, **_: (a, dtype),
    "ones_like": lambda a, dtype=None, **_: (a, dtype),
    "full_like": lambda a, fill_value, dtype=None, **_: (a, dtype),
    "copyto": lambda dst, src, **_: None,
}
_VIEWS = {"broadcast_to", "swapaxes", "transpose", "moveaxis", "expand_dims", "squeeze", "may_share_memory",
          "shares_memory", "result_type", "can_cast", "iscomplexobj", "shape", "ndim", "atleast_1d", "atleast_2d"}


class EmptyNamespace(CountingNamespace):
    """The `xp` of a HostOnlyBackend: arrays from the arena; what fills one records the fill only."""

    def __init__(self, array_type):
        super().__init__(array_type)
        self._arena = array_type.arena

    def zeros(self, shape, dtype=float, order="C"):
        return self._new(self._arena.empty(shape, dtype, order), 1, "memset")

    def ones(self, shape, dtype=float, order="C"):
        return self._new(self._arena.empty(shape, dtype, order), 1, "fill")

    def full(self, shape, fill_value, dtype=None, order="C"):
        return self._new(self._arena.empty(shape, dtype or np.result_type(fill_value), order), 1, "fill")

    def empty(self, shape, dtype=float, order="C"):
        return self._new(self._arena.empty(shape, dtype, order), 0, "alloc")

    def empty_like(self, a, dtype=None, order="K"):
        return self._new(self._arena.empty_like(a, dtype, order), 0, "alloc")


class HostOnlyBackend(CountingBackend):
    """CountingBackend's records, nothing computed: what a step costs the host (see the module docstring)."""

    name = "host-only"
    computes = False

    def __init__(self):
        self.arena = Arena()
        super().__init__()
        self.counts.executed = {}

    def _namespace(self, counts):
        array_type = type("EmptyArray", (EmptyArray,), {"counts": counts, "arena": self.arena, "ufunc_results": {}})
        return EmptyNamespace(array_type)

    def run_kernel(self, reference, args, kwargs, op):
        """Kernel op's outputs, from the arena: the shapes and dtypes of its contract (_OUTPUTS)."""
        spec = _OUTPUTS[op](*args, **kwargs)
        if spec is None or isinstance(spec, np.ndarray):                # nothing, or an input written in place
            return spec
        if not isinstance(spec, list):
            return self.xp.empty(*spec)
        outputs = []
        for item in spec:   # (shape, dtype): a new array; an array: that input; k: output k again; None: None
            new = item is not None and not isinstance(item, (int, np.ndarray))
            outputs.append(self.xp.empty(*item) if new else outputs[item] if isinstance(item, int) else item)
        return tuple(outputs)

    def scatter_add(self, target, index, values) -> None:
        self.counts.launch("scatter_add", 1, self.counts.moved(values, target))

    def uniform(self, seed: int, shape, dtype):
        self.counts.launch("uniform", 1 + (np.dtype(dtype) != np.float32), int(np.prod(shape)) * 4)
        return self.xp.empty(shape, dtype)

    def gemm(self, *args):
        self.counts.launch("cublas gemm", 1, *(cupy_blas.gemm_cost(*args) if self.counts.detailed else ()))


def _acc(a):
    return np.float64 if a.dtype == np.float64 else np.float32


_OUTPUTS = {   # kernel -> its output: (shape, dtype), an input it writes in place, None, or a list of those
               # (where k stands for output k once more)
    "softmax_forward": lambda x, scale, mask: (x.shape, x.dtype),
    "softmax_backward": lambda y, dy, scale: (y.shape, y.dtype),
    "layernorm_forward": lambda x, gamma, beta, eps: [(x.shape, x.dtype)] + [(x.shape[:-1], _acc(x))] * 2,
    "layernorm_backward": lambda dy, x, gamma, mean, rstd: [(x.shape, x.dtype)] + [(gamma.shape, gamma.dtype)] * 2,
    "cross_entropy_forward": lambda logits, targets, smoothing, ignore_index:
        [(logits.shape[:1], _acc(logits))] * 2 + [(logits.shape, logits.dtype)],
    "adam_step": lambda *args, **kwargs: None,
    "embedding_backward": lambda dout, ids, n: ((n, dout.shape[-1]), dout.dtype),
    "dropout_forward": lambda x, *args: (x.shape, x.dtype),
    "bf16_cast": lambda x, dtype: (x.shape, dtype),
    "bf16 add": lambda a, b: (a.shape, a.dtype),
    "bias_relu_forward": lambda x, bias: x,
    "bias_backward": lambda dy, relu_out, dtype: [dy if relu_out is None else (dy.shape, dy.dtype),
                                                  (dy.shape[:-2] + dy.shape[-1:], dtype)],
    "dropout_add_layernorm_forward": lambda x, s, u, p, bias, gamma, beta, eps:
        [(x.shape, x.dtype)] * 2 + [(x.shape[:-1], _acc(x))] * 2,
    "dropout_add_layernorm_backward": lambda dys, z, u, p, gamma, mean, rstd, with_bias:
        [(z.shape, z.dtype), 0 if p == 0.0 else (z.shape, z.dtype)] + [(gamma.shape, gamma.dtype)] * 2
        + [(gamma.shape, gamma.dtype) if with_bias else None],
}
assert set(KERNELS) <= set(_OUTPUTS), "every kernel needs its output rule here"
