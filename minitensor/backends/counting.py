"""A backend that counts what a step would cost on a GPU: kernel launches, host syncs, uploads.

`CountingBackend()` runs the real code (the Transformer, autograd, Adam) on NumPy arrays, on
the CPU, with the reference kernels, and counts each operation as CuPy 14 would run it on a
GPU (read off the CuPy source, cupy/_core). Made explicitly, never by name, and each instance
has its own counters:

    backend = CountingBackend()
    model = Transformer(config, rng, backend=backend, precision="fp16")
    backend.counts.clear(); train_step(...); backend.counts.launches, backend.counts.syncs

The model of "a launch" (one kernel launch, memset or cuBLAS call on the GPU's stream):
  - every ufunc call: elementwise (`a + b`, `xp.exp`), in place (`a *= s`), reductions
    (`a.sum()`, `a.max(axis=...)`), `a.dot(b)`: 1 each;
  - every array-making function: `xp.zeros/ones/full/arange` (1), `xp.empty` (0: allocation
    only), `astype` to another dtype and `copy` (1), `xp.where` (1), gathers `a[ids]` and
    `a[mask]` (1, the mask one also syncs: CuPy reads the count of True to size the result),
    every `a[...] = v` (1), a `reshape` or `ascontiguousarray` that must copy (1);
  - `xp.concatenate` as CuPy does it: one kernel when more than 8 same-dtype arrays of less
    than 2 MiB each on average are joined, else one copy per array;
  - `xp.matmul`: one cuBLAS call, plus CuPy's hidden copies: a 2-d operand that is neither
    C- nor F-ordered is copied; for more than 2 dimensions every operand that is not
    C-contiguous is copied, and float16 operands are copied to float32 and the result back
    (cupy.matmul runs batched float16 products in float32);
  - each of our fused kernels (kernels/*/cupy_launch.py): what its launcher runs (a kernel plus
    the memsets and casts it makes, LAUNCHER_COST below);
  - `backend.matmul`: what CupyBackend.matmul runs (cupy_blas: copies it needs plus one GEMM);
  - views are free: reshape of a contiguous array, transpose, swapaxes, basic slicing,
    broadcast_to, `a.view(dtype)`.
A sync (the host waits for the GPU): reading a device value on the host (`to_numpy`, `float()`,
`int()`, `bool()`, `.item()`, `.tolist()`), a boolean-mask gather, `synchronize()`.
An upload (host -> device copy) is counted apart: CuPy stages a NumPy array through pinned memory
and copies asynchronously (cupy/_core/core.pyx `_array_default`), so it does not sync.

Where it differs from CuPy: a full reduction can run as two CUB kernels (counted as one); CuPy
reuses cached cuBLAS workspaces and pinned buffers we do not model; `float()` of a 0-d device
array built from a Python number is a sync here and there. The counts are a model to catch
regressions in CI, to be checked against a profile on the GPU (benchmarks/gpu_lease.sh call2).
"""
from __future__ import annotations

import numpy as np

from ..dtypes import BF16, is_half
from ..kernels.bf16_cast.reference import bf16_to_float32, float_to_bf16
from . import cupy_blas
from .base import KERNELS
from .numpy_backend import NumpyBackend

CONCAT_SINGLE_KERNEL = (8, 2 * 1024 * 1024)  # cupy _concatenate: > 8 arrays, < 2 MiB each on average
FREE_FUNCTIONS = {"empty_like", "broadcast_to", "swapaxes", "transpose", "moveaxis", "expand_dims", "squeeze",
                  "shape", "ndim", "may_share_memory", "shares_memory", "result_type", "can_cast", "iscomplexobj"}


class LaunchCounts:
    """Launches, syncs and uploads seen so far, and the launches by kind (e.g. "ufunc add")."""

    def __init__(self):
        self.clear()

    def clear(self) -> None:
        self.launches = self.syncs = self.uploads = 0
        self.by_kind: dict[str, int] = {}

    def launch(self, kind: str, n: int = 1) -> None:
        if n:
            self.launches += n
            self.by_kind[kind] = self.by_kind.get(kind, 0) + n

    def sync(self) -> None:
        self.syncs += 1

    def snapshot(self) -> dict:
        return {"launches": self.launches, "syncs": self.syncs, "uploads": self.uploads,
                "by_kind": dict(sorted(self.by_kind.items(), key=lambda kv: -kv[1]))}


def _plain(value):
    """value with every DeviceArray inside (nested lists and tuples) seen as a plain ndarray."""
    if isinstance(value, DeviceArray):
        return value.view(np.ndarray)
    if isinstance(value, (list, tuple)):
        return type(value)(_plain(v) for v in value)
    return value


def _arrays(value):
    """The DeviceArrays inside value (nested lists and tuples)."""
    if isinstance(value, DeviceArray):
        return [value]
    if isinstance(value, (list, tuple)):
        return [a for v in value for a in _arrays(v)]
    return []


def _is_gemm_ready(a) -> bool:
    """A 2-d operand cuBLAS reads as it is (C- or F-ordered); cupy.dot copies any other."""
    return a.ndim < 2 or a.flags.c_contiguous or a.flags.f_contiguous


def matmul_launches(a, b) -> int:
    """Launches of cupy.matmul(a, b) (cupy/_core/_routines_linalg.pyx `matmul`, `dot`)."""
    if a.ndim <= 2 and b.ndim <= 2:                              # dot: one GEMM/GEMV, copies of odd layouts
        return 1 + (not _is_gemm_ready(a)) + (not _is_gemm_ready(b))
    half = np.result_type(a.dtype, b.dtype) == np.float16       # computed in float32, cast back
    copies = sum(not x.flags.c_contiguous or half for x in (a, b))
    return copies + 1 + half


class DeviceArray(np.ndarray):
    """A NumPy array standing for a device array: each operation adds its launches to `counts`.

    Each CountingBackend makes its own subclass with its own `counts` (CountingBackend.__init__).
    """

    counts: LaunchCounts

    def _wrap(self, result, launches=0, kind="copy"):
        self.counts.launch(kind, launches)
        if isinstance(result, np.ndarray):
            return result.view(type(self))
        if isinstance(result, np.generic):                       # CuPy returns 0-d arrays, not scalars
            return np.asarray(result).view(type(self))
        return result

    def __array_ufunc__(self, ufunc, method, *inputs, out=None, **kwargs):
        if out is not None:
            kwargs["out"] = tuple(_plain(o) for o in out)
        if ufunc is np.matmul and method == "__call__":
            n = matmul_launches(*(np.asarray(_plain(x)) for x in inputs[:2]))
        else:
            n = 1
        result = getattr(ufunc, method)(*_plain(inputs), **kwargs)
        kind = f"{'ufunc' if method == '__call__' else method} {ufunc.__name__}"
        if out is not None:
            self.counts.launch(kind, n)
            return out[0] if len(out) == 1 else out
        if isinstance(result, tuple):
            self.counts.launch(kind, n)
            return tuple(self._wrap(r) for r in result)
        return self._wrap(result, n, kind)

    def __array_function__(self, func, types, args, kwargs):
        name = func.__name__
        result = func(*_plain(args), **{k: _plain(v) for k, v in kwargs.items()})
        inputs = _arrays(args) + _arrays(list(kwargs.values()))
        if name in FREE_FUNCTIONS or not isinstance(result, np.ndarray):
            n = 0
        elif name == "concatenate":
            arrays = _arrays(args[0])
            limit, size = CONCAT_SINGLE_KERNEL
            single = (len(arrays) > limit and all(a.dtype == result.dtype for a in arrays)
                      and result.nbytes < size * len(arrays))
            n = 1 if single else len(arrays)
            if single:
                self.counts.uploads += 1                         # the table of the arrays' pointers
        else:                                                    # a new array costs a kernel; a view none
            n = 0 if any(np.may_share_memory(result, a.view(np.ndarray)) for a in inputs) else 1
        return self._wrap(result, n, f"function {name}")

    # --- methods NumPy implements in C (no __array_ufunc__ / __array_function__ hook) ---------
    def astype(self, dtype, order="K", casting="unsafe", subok=True, copy=True):
        same = np.dtype(dtype) == self.dtype
        if same and not copy:
            return self
        return self._wrap(self.view(np.ndarray).astype(dtype, order=order, casting=casting), 1, "astype")

    def copy(self, order="C"):
        return self._wrap(self.view(np.ndarray).copy(order=order), 1, "copy")

    def reshape(self, *shape, **kwargs):
        plain = self.view(np.ndarray)
        result = plain.reshape(*shape, **kwargs)
        copied = result.size > 0 and not np.may_share_memory(result, plain)
        return self._wrap(result, int(copied), "reshape copy")

    def ravel(self, order="C"):
        return self.reshape(-1, order=order)

    def fill(self, value):
        self.counts.launch("fill")
        self.view(np.ndarray).fill(value)

    def dot(self, other, out=None):
        return self._wrap(self.view(np.ndarray).dot(_plain(other)), 1, "dot")

    def argmax(self, *args, **kwargs):
        return self._wrap(self.view(np.ndarray).argmax(*args, **kwargs), 1, "argmax")

    def cumsum(self, *args, **kwargs):
        return self._wrap(self.view(np.ndarray).cumsum(*args, **kwargs), 1, "cumsum")

    def __getitem__(self, index):
        plain = self.view(np.ndarray)
        result = plain[_plain(index)]
        if not isinstance(result, np.ndarray):                    # one element: a 0-d view in CuPy
            return self._wrap(np.asarray(result))
        masks = [i for i in (index if isinstance(index, tuple) else (index,))
                 if isinstance(i, np.ndarray) and i.dtype == np.bool_]
        if masks:
            self.counts.sync()                                    # the result's size is read on the host
        gathered = result.size > 0 and not np.may_share_memory(result, plain)
        return self._wrap(result, int(gathered), "gather")

    def __setitem__(self, index, value):
        self.counts.launch("setitem")
        self.view(np.ndarray)[_plain(index)] = _plain(value)

    # --- reading on the host: syncs -------------------------------------------------------
    def _host(self):
        self.counts.sync()
        return self.view(np.ndarray)

    def __float__(self):
        return float(self._host())

    def __int__(self):
        return int(self._host())

    def __bool__(self):
        return bool(self._host())

    def __index__(self):
        return self._host().__index__()

    def item(self, *args):
        return self._host().item(*args)

    def tolist(self):
        return self._host().tolist()


class CountingNamespace:
    """The `xp` of a CountingBackend: NumPy, except that what makes arrays makes DeviceArrays."""

    def __init__(self, array_type):
        self.ndarray = array_type
        self._counts = array_type.counts

    def __getattr__(self, name):
        return getattr(np, name)

    def _new(self, array, launches, kind):
        self._counts.launch(kind, launches)
        return array.view(self.ndarray)

    def zeros(self, shape, dtype=float, order="C"):
        return self._new(np.zeros(shape, dtype, order), 1, "memset")

    def ones(self, shape, dtype=float, order="C"):
        return self._new(np.ones(shape, dtype, order), 1, "fill")

    def full(self, shape, fill_value, dtype=None, order="C"):
        return self._new(np.full(shape, fill_value, dtype, order), 1, "fill")

    def empty(self, shape, dtype=float, order="C"):
        return self._new(np.empty(shape, dtype, order), 0, "alloc")

    def arange(self, *args, **kwargs):
        return self._new(np.arange(*args, **kwargs), 1, "arange")

    def asarray(self, data, dtype=None, order=None):
        if isinstance(data, DeviceArray):
            return data if dtype is None else data.astype(dtype, copy=False)
        array = np.asarray(data, dtype=dtype, order=order)
        if array.ndim == 0:                                       # CuPy fills a 0-d array on the device
            return self._new(array.copy(), 1, "fill")
        self._counts.uploads += 1
        return self._new(array.copy(), 0, "upload")

    array = asarray

    def ascontiguousarray(self, a, dtype=None):
        """A view when a is C-contiguous already (and of dtype), else one copy kernel."""
        if isinstance(a, DeviceArray) and (dtype is None or np.dtype(dtype) == a.dtype) and a.flags.c_contiguous:
            return a
        if isinstance(a, DeviceArray):
            return a.astype(a.dtype if dtype is None else dtype, order="C")
        return self.asarray(np.ascontiguousarray(a, dtype=dtype))


# What each kernels/<op>/cupy_launch.py entry point launches, besides its kernel, read off the
# launcher (memsets of outputs it zeroes, casts and copies of inputs it must convert).
def _contiguous(*arrays) -> int:
    return sum(not a.flags.c_contiguous for a in arrays)


def _cast(a, dtype) -> int:
    return int(np.dtype(a.dtype) != np.dtype(dtype) or not a.flags.c_contiguous)


def _acc(x):
    return np.float64 if x.dtype == np.float64 else np.float32


LAUNCHER_COST = {
    "softmax_forward": lambda x, scale, mask: 1 + _contiguous(x)
    + (mask is not None and np.dtype(mask.dtype) != np.bool_),
    "softmax_backward": lambda y, dy, scale: 1 + _contiguous(y) + _cast(dy, y.dtype),
    "layernorm_forward": lambda x, gamma, beta, eps: 1 + _contiguous(x) + _cast(gamma, _acc(x))
    + _cast(beta, _acc(x)),
    "layernorm_backward": lambda dy, x, gamma, mean, rstd: 2 + _contiguous(x) + _cast(dy, x.dtype)
    + _cast(gamma, _acc(x)) + 2 * (np.dtype(gamma.dtype) != np.dtype(_acc(x))),   # rows, then columns
    "cross_entropy_forward": lambda logits, targets, smoothing, ignore_index: 1 + _contiguous(logits)
    + _cast(targets, np.int64),
    "adam_step": lambda param, grad, m, v, lr, beta1, beta2, eps, step, half=None: 1,
    "embedding_backward": lambda dout, ids, num_embeddings: 2 + _contiguous(dout) + _cast(ids, np.int64)
    + (np.dtype(dout.dtype) != np.dtype(_acc(dout))),           # memset, kernel, cast back
    "dropout_forward": lambda x, u, p: 1 + _contiguous(x, u),
    "bf16_cast": lambda x, dtype: 1 + _contiguous(x),
}


def counted_kernels(cls):
    """Class decorator: each kernel in KERNELS runs its NumPy reference and counts its launcher's launches."""
    for op in KERNELS:
        setattr(cls, op, _counted_kernel(op, getattr(NumpyBackend, op)))
    return cls


def _counted_kernel(op, reference):
    def kernel(self, *args, **kwargs):
        self.counts.launch(f"kernel {op}", LAUNCHER_COST[op](*args, **kwargs))
        result = reference(*_plain(args), **{k: _plain(v) for k, v in kwargs.items()})
        if isinstance(result, tuple):
            return tuple(r.view(self.xp.ndarray) if isinstance(r, np.ndarray) else r for r in result)
        return result.view(self.xp.ndarray) if isinstance(result, np.ndarray) else result

    kernel.__name__ = op
    return kernel


@counted_kernels
class CountingBackend(NumpyBackend):
    """NumPy arrays standing for GPU arrays, the reference kernels, and counts of a GPU's work."""

    name = "counting"
    device = "counting"   # not "cpu": the code takes its GPU paths (e.g. float16 logits go to the kernel as they are)

    def __init__(self):
        self.counts = LaunchCounts()
        self.xp = CountingNamespace(type("DeviceArray", (DeviceArray,), {"counts": self.counts}))

    def asarray(self, data, dtype=None):
        return self.xp.asarray(data, dtype=dtype)

    def to_numpy(self, array) -> np.ndarray:
        if isinstance(array, DeviceArray):
            return np.array(array._host())
        return np.asarray(array)

    def scatter_add(self, target, index, values) -> None:
        self.counts.launch("scatter_add")
        np.add.at(target.view(np.ndarray), _plain(index), _plain(values))

    def uniform(self, seed: int, shape, dtype):
        self.counts.launch("uniform", 1 + (np.dtype(dtype) != np.float32))
        return super().uniform(seed, shape, dtype).view(self.xp.ndarray)

    def synchronize(self) -> None:
        self.counts.sync()

    def dropout(self, x, p: float, seed: int):
        self.counts.launch("kernel dropout (seeded)", 1 + _contiguous(x))   # CupyBackend: draws made inline
        u = NumpyBackend.uniform(self, seed, x.shape, "float32")
        return NumpyBackend.dropout_forward(_plain(x), u, p).view(self.xp.ndarray)

    def add(self, a, b):
        if a.dtype != BF16:
            return a + b                                          # one ufunc
        self.counts.launch("kernel bf16 add")                     # CupyBackend: one elementwise kernel
        total = bf16_to_float32(_plain(a)) + bf16_to_float32(_plain(b))
        return float_to_bf16(total).view(self.xp.ndarray)

    def matmul(self, a, b, out_dtype=None, bias=None):
        """What CupyBackend.matmul runs: half precision through cupy_blas (its copies counted by xp,
        one launch per cuBLAS call, computed by cupy_blas.numpy_gemm), the rest through cupy.matmul."""
        if not is_half(a.dtype):
            return super().matmul(a, b, out_dtype, bias)

        def gemm(*args):
            self.counts.launch("cublas gemm")
            cupy_blas.numpy_gemm(*args)

        return cupy_blas.matmul(a, b, out_dtype, bias, xp=self.xp, gemm=gemm)
