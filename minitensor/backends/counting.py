"""A backend that counts what a step would cost on a GPU: kernel launches, host syncs, uploads, bytes, FLOPs.

`CountingBackend()` runs the real code (the Transformer, autograd, Adam) on NumPy arrays, on
the CPU, with the reference kernels, and counts each operation as CuPy 14 would run it on a
GPU (read off the CuPy source, cupy/_core). Made explicitly, never by name, and each instance
has its own counters:

    backend = CountingBackend()
    model = Transformer(config, rng, backend=backend, precision="fp16")
    backend.counts.clear(); train_step(...); backend.counts.launches, backend.counts.syncs

`host_only.HostOnlyBackend()` records the same calls without computing anything (every result is
an untouched np.empty): the Python of a full-size step, timed on any machine.

The model of "a launch" (one kernel launch, memset or cuBLAS call on the GPU's stream):
  - every ufunc call: elementwise (`a + b`, `xp.exp`), in place (`a *= s`), reductions
    (`a.sum()`, `a.max(axis=...)`), `a.dot(b)`: 1 each;
  - every array-making function: `xp.zeros/ones/full/arange` (1), `xp.empty` (0: allocation
    only), `astype` to another dtype and `copy` (1), `xp.where` (1), gathers `a[ids]` and
    `a[mask]` (1, the mask one also syncs: CuPy reads the count of True to size the result),
    every `a[...] = v` (1), a `reshape` or `ascontiguousarray` that must copy (1);
  - `xp.concatenate` as CuPy does it: one kernel when more than 8 same-dtype arrays of less
    than 2 MiB each on average are joined, else one copy per array;
  - `xp.matmul`: one cuBLAS call, plus CuPy's hidden copies (launch_costs.matmul_launches);
  - each of our fused kernels (kernels/*/cupy_launch.py): what its launcher runs (a kernel plus
    the memsets and casts it makes, launch_costs.LAUNCHER_COST);
  - `backend.matmul`: what CupyBackend.matmul runs (cupy_blas: copies it needs plus one GEMM,
    any dtype);
  - views are free: reshape of a contiguous array, transpose, swapaxes, basic slicing,
    broadcast_to, `a.view(dtype)`.
Bytes: what each launch reads and writes (launch_costs.footprint of its arrays); FLOPs: 2·m·n·k per
GEMM. `counts.allocations` lists (shape, dtype) of every array a device call made, so a test
can say that a step never makes, say, a float32 (B, T, V) array.
A sync (the host waits for the GPU): reading a device value on the host (`to_numpy`, `float()`,
`int()`, `bool()`, `.item()`, `.tolist()`), a boolean-mask gather, `synchronize()`.
An upload (host -> device copy) is counted apart: CuPy stages a NumPy array through pinned memory
and copies asynchronously (cupy/_core/core.pyx `_array_default`), so it does not sync.

Where it differs from CuPy: a full reduction can run as two CUB kernels (counted as one); CuPy
reuses cached cuBLAS workspaces and pinned buffers we do not model; `float()` of a 0-d device
array built from a Python number is a sync here and there. The counts are a model to catch
regressions in CI, to be checked against a profile on the GPU (benchmarks/gpu_lease.sh, lanes step_ratio and kernels).
"""
from __future__ import annotations

import numpy as np

from ..dtypes import BF16
from ..kernels.bf16_cast.reference import bf16_to_float32, float_to_bf16
from . import cupy_blas
from .base import KERNELS
from .launch_costs import (CONCAT_SINGLE_KERNEL, FREE_FUNCTIONS, LAUNCHER_COST, LaunchCounts, arrays_in,
                           contiguous_copies, matmul_launches, plain)
from ..kernels.dropout_add_layernorm_forward.cupy_launch import fits
from .numpy_backend import NumpyBackend


class DeviceArray(np.ndarray):
    """A NumPy array standing for a device array: each operation adds its launches to `counts`.

    Each CountingBackend makes its own subclass with its own `counts` (CountingBackend.__init__).
    """

    counts: LaunchCounts

    def _wrap(self, result, launches=0, kind="copy", nbytes=0):
        if launches:
            self.counts.launch(kind, launches, nbytes)
        if isinstance(result, np.generic):                       # CuPy returns 0-d arrays, not scalars
            result = np.asarray(result)
        if isinstance(result, np.ndarray):
            if launches:
                self.counts.allocate(result)
            return result if type(result) is type(self) else result.view(type(self))
        return result

    def __array_ufunc__(self, ufunc, method, *inputs, out=None, **kwargs):
        if out is not None:
            kwargs["out"] = tuple(plain(o) for o in out)
        if ufunc is np.matmul and method == "__call__":
            n = matmul_launches(*(np.asarray(plain(x)) for x in inputs[:2]))
        else:
            n = 1
        result = getattr(ufunc, method)(*plain(inputs), **kwargs)
        kind = f"{'ufunc' if method == '__call__' else method} {ufunc.__name__}"
        moved = self.counts.moved(inputs)
        if out is not None:
            self.counts.launch(kind, n, moved + self.counts.moved(out))
            return out[0] if len(out) == 1 else out
        if isinstance(result, tuple):
            self.counts.launch(kind, n, moved + sum(r.nbytes for r in result))
            return tuple(self._wrap(r) for r in result)
        return self._wrap(result, n, kind, moved + np.asarray(result).nbytes)

    def __array_function__(self, func, types, args, kwargs):
        name = func.__name__
        result = func(*plain(args), **{k: plain(v) for k, v in kwargs.items()})
        return self._wrap(result, *function_launches(name, args, kwargs, result, self.counts))

    # --- methods NumPy implements in C (no __array_ufunc__ / __array_function__ hook) ---------
    def astype(self, dtype, order="K", casting="unsafe", subok=True, copy=True):
        same = np.dtype(dtype) == self.dtype
        if same and not copy:
            return self
        result = self.view(np.ndarray).astype(dtype, order=order, casting=casting)
        return self._wrap(result, 1, "astype", self.counts.moved(self) + result.nbytes)

    def copy(self, order="C"):
        result = self.view(np.ndarray).copy(order=order)
        return self._wrap(result, 1, "copy", self.counts.moved(self) + result.nbytes)

    def reshape(self, *shape, **kwargs):
        plain_self = self.view(np.ndarray)
        result = plain_self.reshape(*shape, **kwargs)
        copied = result.size > 0 and not np.may_share_memory(result, plain_self)
        return self._wrap(result, int(copied), "reshape copy", 2 * result.nbytes if copied else 0)

    def ravel(self, order="C"):
        return self.reshape(-1, order=order)

    def fill(self, value):
        self.counts.launch("fill", 1, self.nbytes)
        self.view(np.ndarray).fill(value)

    def dot(self, other, out=None):
        result = self.view(np.ndarray).dot(plain(other))
        return self._wrap(result, 1, "dot", self.counts.moved(self, other) + np.asarray(result).nbytes)

    def argmax(self, *args, **kwargs):
        result = self.view(np.ndarray).argmax(*args, **kwargs)
        return self._wrap(result, 1, "argmax", self.counts.moved(self))

    def cumsum(self, *args, **kwargs):
        return self._wrap(self.view(np.ndarray).cumsum(*args, **kwargs), 1, "cumsum", 2 * self.nbytes)

    def __getitem__(self, index):
        plain_self = self.view(np.ndarray)
        result = plain_self[plain(index)]
        if not isinstance(result, np.ndarray):                    # one element: a 0-d view in CuPy
            return self._wrap(np.asarray(result))
        if _has_mask(index):
            self.counts.sync()                                    # the result's size is read on the host
        gathered = result.size > 0 and not np.may_share_memory(result, plain_self)
        return self._wrap(result, int(gathered), "gather", 2 * result.nbytes if gathered else 0)

    def __setitem__(self, index, value):
        target = self.view(np.ndarray)[plain(index)]
        self.counts.launch("setitem", 1, np.asarray(target).nbytes + self.counts.moved(value))
        self.view(np.ndarray)[plain(index)] = plain(value)

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


def _has_mask(index) -> bool:
    return any(isinstance(i, np.ndarray) and i.dtype == np.bool_
               for i in (index if isinstance(index, tuple) else (index,)))


def function_launches(name, args, kwargs, result, counts) -> tuple[int, str, int]:
    """(launches, kind, bytes) of `xp.<name>(*args, **kwargs)` that made `result` (CuPy's rules)."""
    inputs = arrays_in(args) + arrays_in(list(kwargs.values()))
    if name in FREE_FUNCTIONS or not isinstance(result, np.ndarray):
        return 0, f"function {name}", 0
    moved = counts.moved(inputs) + result.nbytes
    if name == "concatenate":
        joined = arrays_in(args[0])
        limit, size = CONCAT_SINGLE_KERNEL
        single = (len(joined) > limit and all(a.dtype == result.dtype for a in joined)
                  and result.nbytes < size * len(joined))
        if single:
            counts.uploads += 1                                   # the table of the arrays' pointers
        return (1 if single else len(joined)), f"function {name}", moved
    view = any(np.may_share_memory(result, a.view(np.ndarray)) for a in inputs)   # a view costs nothing
    return (0 if view else 1), f"function {name}", 0 if view else moved


class CountingNamespace:
    """The `xp` of a CountingBackend: NumPy, except that what makes arrays makes DeviceArrays."""

    def __init__(self, array_type):
        self.ndarray = array_type
        self._counts = array_type.counts

    def __getattr__(self, name):
        return getattr(np, name)

    def _new(self, array, launches, kind):
        self._counts.launch(kind, launches, array.nbytes if launches else 0)
        self._counts.allocate(array)
        return array.view(self.ndarray)

    def zeros(self, shape, dtype=float, order="C"):
        return self._new(np.zeros(shape, dtype, order), 1, "memset")

    def ones(self, shape, dtype=float, order="C"):
        return self._new(np.ones(shape, dtype, order), 1, "fill")

    def full(self, shape, fill_value, dtype=None, order="C"):
        return self._new(np.full(shape, fill_value, dtype, order), 1, "fill")

    def empty(self, shape, dtype=float, order="C"):
        return self._new(np.empty(shape, dtype, order), 0, "alloc")

    def empty_like(self, a, dtype=None, order="K"):
        return self._new(np.empty_like(plain(a), dtype, order), 0, "alloc")

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


def counted_kernels(cls):
    """Class decorator: each kernel in KERNELS runs its NumPy reference and counts its launcher's launches."""
    for op in KERNELS:
        setattr(cls, op, _counted_kernel(op, getattr(NumpyBackend, op)))
    return cls


def _counted_kernel(op, reference):
    def kernel(self, *args, **kwargs):
        result = self.run_kernel(reference, args, kwargs, op)
        moved = self.counts.moved(args, list(kwargs.values()), result)
        self.counts.launch(f"kernel {op}", LAUNCHER_COST[op](*args, **kwargs), moved)
        return result

    kernel.__name__ = op
    return kernel


@counted_kernels
class CountingBackend(NumpyBackend):
    """NumPy arrays standing for GPU arrays, the reference kernels, and counts of a GPU's work."""

    name = "counting"
    device = "counting"   # not "cpu": the code takes its GPU paths (e.g. float16 logits go to the kernel as they are)
    computes = True       # HostOnlyBackend: False

    def __init__(self):
        self.reference = NumpyBackend()                            # what the values are (dropout's draws)
        self.counts = LaunchCounts()
        self.xp = self._namespace(self.counts)
        self.plans = {}                                           # cupy_blas's Plans, as CupyBackend keeps them

    def _namespace(self, counts):
        return CountingNamespace(type("DeviceArray", (DeviceArray,), {"counts": counts}))

    def _device(self, result):
        """result (an array, a tuple of them, or None) seen as this backend's device arrays."""
        if isinstance(result, tuple):
            return tuple(self._device(r) for r in result)
        return result.view(self.xp.ndarray) if isinstance(result, np.ndarray) else result

    def run_kernel(self, reference, args, kwargs, op):
        """What kernel `op` returns, its arrays recorded as made: here its NumPy reference, computed
        (HostOnlyBackend: empty arrays of the right shapes)."""
        args, kwargs = plain(args), {k: plain(v) for k, v in kwargs.items()}
        result = reference(*args, **kwargs)
        if self.counts.detailed:
            inputs = arrays_in([args, list(kwargs.values())])
            for array in {id(a): a for a in arrays_in(result)}.values():   # one array returned twice: one
                if not any(np.may_share_memory(array, a) for a in inputs):   # in place: nothing made
                    self.counts.allocate(array)
        return self._device(result)

    def asarray(self, data, dtype=None):
        return self.xp.asarray(data, dtype=dtype)

    def to_numpy(self, array) -> np.ndarray:
        if isinstance(array, DeviceArray):
            return np.array(array._host())
        return np.asarray(array)

    def scatter_add(self, target, index, values) -> None:
        self.counts.launch("scatter_add", 1, self.counts.moved(values, target))
        np.add.at(target.view(np.ndarray), plain(index), plain(values))

    def uniform(self, seed: int, shape, dtype):
        self.counts.launch("uniform", 1 + (np.dtype(dtype) != np.float32), int(np.prod(shape)) * 4)
        return self._device(NumpyBackend.uniform(self, seed, shape, dtype))

    def synchronize(self) -> None:
        self.counts.sync()

    def dropout(self, x, p: float, seed: int, time_major: bool = False):
        """CupyBackend: one kernel that draws inline (no array of draws); the values: NumpyBackend's."""
        y = self.run_kernel(lambda x: self.reference.dropout(x, p, seed, time_major), (x,), {}, "dropout_forward")
        self.counts.launch("kernel dropout (seeded)", 1 + contiguous_copies(x), self.counts.moved(x) + y.nbytes)
        return y

    def dropout_add_layernorm(self, x, s, bias, gamma, beta, eps, p, seed, time_major=False):
        """CupyBackend: one kernel drawing the mask inline (rows of at most 1024); the values: NumpyBackend's."""
        if not fits(x.shape[-1]):
            return self.unfused_dropout_add_layernorm(x, s, bias, gamma, beta, eps, p, seed, time_major)
        reference = self.reference.dropout_add_layernorm
        return self._seeded("dropout_add_layernorm_forward", (x, s, None, p, bias, gamma, beta, eps),
                            lambda x, s, u, p, bias, gamma, beta, eps:
                            reference(x, s, bias, gamma, beta, eps, p, seed, time_major))

    def dropout_add_layernorm_grad(self, dys, z, gamma, mean, rstd, p, seed, time_major, with_bias):
        dys = self.at_most_two(dys)
        if not fits(z.shape[-1]):
            return self.unfused_dropout_add_layernorm_grad(dys, z, gamma, mean, rstd, p, seed, time_major, with_bias)
        reference = self.reference.dropout_add_layernorm_grad
        return self._seeded("dropout_add_layernorm_backward", (dys, z, None, p, gamma, mean, rstd, with_bias),
                            lambda dys, z, u, p, gamma, mean, rstd, with_bias:
                            reference(dys, z, gamma, mean, rstd, p, seed, time_major, with_bias))

    def _seeded(self, op, args, compute):
        """A kernel that draws its mask inline (no u array): counted as its launcher runs it, values by compute."""
        result = self.run_kernel(compute, args, {}, op)
        moved = self.counts.moved(args, result)
        self.counts.launch(f"kernel {op} (seeded)", LAUNCHER_COST[op](*args), moved)
        return result

    def add(self, a, b):
        if a.dtype != BF16:
            return a + b                                          # one ufunc
        y = self.run_kernel(lambda a, b: float_to_bf16(bf16_to_float32(a) + bf16_to_float32(b)), (a, b), {},
                            "bf16 add")
        self.counts.launch("kernel bf16 add", 1, self.counts.moved(a, b) + y.nbytes)   # one elementwise kernel
        return y

    def scale(self, x, factor):
        if x.dtype != BF16:
            return super().scale(x, factor)
        self.counts.launch("kernel bf16 scale", 1, 2 * self.counts.moved(x) + self.counts.moved(factor))   # CupyBackend: one kernel
        if self.computes:
            x.view(np.ndarray)[...] = float_to_bf16(bf16_to_float32(plain(x)) * plain(factor))
        return x

    def matmul(self, a, b, out_dtype=None, bias=None, out=None, accumulate=False):
        """What CupyBackend.matmul runs: cupy_blas's plan (its copies counted by xp), one launch per cuBLAS
        call, computed by cupy_blas.numpy_gemm."""
        return cupy_blas.matmul(a, b, out_dtype, bias, xp=self.xp, gemm=self.gemm, out=out, accumulate=accumulate,
                                plans=self.plans)

    def gemm(self, *args):
        """One cuBLAS call (cupy_blas.cublas_gemm's arguments): counted, and computed by numpy_gemm."""
        self.counts.launch("cublas gemm", 1, *cupy_blas.gemm_cost(*args))
        cupy_blas.numpy_gemm(*args)
