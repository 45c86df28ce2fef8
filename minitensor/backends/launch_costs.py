"""What the counting backends record, and what each call costs on a GPU under CuPy: launches, bytes.

`LaunchCounts` holds one step's tally (launches, syncs, uploads; launches, bytes and FLOPs by kind;
the arrays made). The rest is the cost model counting.py and host_only.py share: the memory an
array touches (`footprint`), cupy.matmul's hidden copies, and what each of our kernels' launchers
runs besides its kernel (LAUNCHER_COST, read off kernels/*/cupy_launch.py).
"""
from __future__ import annotations

import math

import numpy as np

CONCAT_SINGLE_KERNEL = (8, 2 * 1024 * 1024)  # cupy _concatenate: > 8 arrays, < 2 MiB each on average
FREE_FUNCTIONS = {"broadcast_to", "swapaxes", "transpose", "moveaxis", "expand_dims", "squeeze",
                  "shape", "ndim", "may_share_memory", "shares_memory", "result_type", "can_cast", "iscomplexobj"}
KIND_CLASSES = (("cublas", "cuBLAS"), ("kernel", "our kernels"), ("reduce", "reductions"),
                ("ufunc", "elementwise (CuPy)"))   # by prefix of the kind; anything else: copies and fills


def kind_class(kind: str) -> str:
    """The coarse class of a launch kind: cuBLAS, our kernels, reductions, elementwise, copies and fills."""
    return next((name for prefix, name in KIND_CLASSES if kind.startswith(prefix)), "copies and fills")


class LaunchCounts:
    """Launches, syncs and uploads seen so far; launches, bytes and FLOPs by kind (e.g. "ufunc add");
    `allocations`: (shape, dtype) of every array a device call made. `detailed = False` keeps the
    counts only (no bytes, FLOPs or arrays): what a timed run records, so it times little but the step."""

    def __init__(self):
        self.detailed = True
        self.clear()

    def clear(self) -> None:
        self.launches = self.syncs = self.uploads = 0
        self.by_kind: dict[str, int] = {}
        self.bytes_by_kind: dict[str, int] = {}
        self.flops_by_kind: dict[str, int] = {}
        self.allocations: list[tuple[tuple, np.dtype]] = []

    def launch(self, kind: str, n: int = 1, nbytes: int = 0, flops: int = 0) -> None:
        if n:
            self.launches += n
            self.by_kind[kind] = self.by_kind.get(kind, 0) + n
            if self.detailed:
                self.bytes_by_kind[kind] = self.bytes_by_kind.get(kind, 0) + int(nbytes)
                if flops:
                    self.flops_by_kind[kind] = self.flops_by_kind.get(kind, 0) + int(flops)

    def moved(self, *values) -> int:
        """The bytes the arrays inside values cover (footprint), or 0 when not detailed."""
        return sum(footprint(a) for a in arrays_in(values)) if self.detailed else 0

    def allocate(self, array) -> None:
        if self.detailed:
            self.allocations.append((tuple(array.shape), np.dtype(array.dtype)))

    def sync(self) -> None:
        self.syncs += 1

    def snapshot(self) -> dict:
        return {"launches": self.launches, "syncs": self.syncs, "uploads": self.uploads,
                "by_kind": dict(sorted(self.by_kind.items(), key=lambda kv: -kv[1]))}

    def by_class(self) -> dict[str, dict]:
        """{class: {"launches", "bytes", "flops"}} over the kinds (kind_class), largest byte count first."""
        classes: dict[str, dict] = {}
        for kind, n in self.by_kind.items():
            entry = classes.setdefault(kind_class(kind), {"launches": 0, "bytes": 0, "flops": 0})
            entry["launches"] += n
            entry["bytes"] += self.bytes_by_kind.get(kind, 0)
            entry["flops"] += self.flops_by_kind.get(kind, 0)
        return dict(sorted(classes.items(), key=lambda kv: -kv[1]["bytes"]))


def plain(value):
    """value with every device array inside (nested lists and tuples) seen as a plain ndarray."""
    kind = type(value)
    if kind is tuple or kind is list:
        return kind([plain(v) for v in value])
    if kind is np.ndarray or not isinstance(value, np.ndarray):
        return value
    return value.view(np.ndarray)


def arrays_in(value) -> list:
    """The arrays inside value (nested lists and tuples)."""
    if isinstance(value, np.ndarray):
        return [value]
    if isinstance(value, (list, tuple)):
        return [a for v in value for a in arrays_in(v)]
    return []


def footprint(a) -> int:
    """Bytes of memory array a covers: a broadcast axis (stride 0) is read once, not once per index."""
    if not isinstance(a, np.ndarray):
        return 0
    if 0 not in a.strides:
        return a.nbytes
    return a.itemsize * math.prod(n for n, s in zip(a.shape, a.strides) if s != 0)


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


# What each kernels/<op>/cupy_launch.py entry point launches, besides its kernel, read off the
# launcher (memsets of outputs it zeroes, casts and copies of inputs it must convert).
def contiguous_copies(*arrays) -> int:
    return sum(not a.flags.c_contiguous for a in arrays if a is not None)


def _cast(a, dtype) -> int:
    return int(np.dtype(a.dtype) != np.dtype(dtype) or not a.flags.c_contiguous)


def _acc(x):
    return np.float64 if x.dtype == np.float64 else np.float32


LAUNCHER_COST = {
    "softmax_forward": lambda x, scale, mask: 1 + contiguous_copies(x)
    + (mask is not None and np.dtype(mask.dtype) != np.bool_),
    "softmax_backward": lambda y, dy, scale: 1 + contiguous_copies(y) + _cast(dy, y.dtype),
    "layernorm_forward": lambda x, gamma, beta, eps: 1 + contiguous_copies(x) + _cast(gamma, _acc(x))
    + _cast(beta, _acc(x)),
    "layernorm_backward": lambda dy, x, gamma, mean, rstd: 2 + contiguous_copies(x) + _cast(dy, x.dtype)
    + _cast(gamma, _acc(x)) + 2 * (np.dtype(gamma.dtype) != np.dtype(_acc(x))),   # rows, then columns
    "cross_entropy_forward": lambda logits, targets, smoothing, ignore_index: 1 + contiguous_copies(logits)
    + _cast(targets, np.int64),
    "adam_step": lambda param, grad, m, v, lr, beta1, beta2, eps, step, half=None: 1,
    "embedding_backward": lambda dout, ids, num_embeddings: 2 + contiguous_copies(dout) + _cast(ids, np.int64)
    + (np.dtype(dout.dtype) != np.dtype(_acc(dout))),           # memset, kernel, cast back
    "dropout_forward": lambda x, u, p: 1 + contiguous_copies(x, u),
    "bf16_cast": lambda x, dtype: 1 + contiguous_copies(x),
    "bias_relu_forward": lambda x, bias: 1 + (np.dtype(bias.dtype) not in (np.dtype(x.dtype), np.dtype(np.float32))),
    "bias_backward": lambda dy, relu_out, dtype: 1 + contiguous_copies(dy, relu_out)
    + (np.dtype(dtype) != np.dtype(_acc(dy))),                  # kernel, cast of the sums
    "dropout_add_layernorm_forward": lambda x, s, u, p, bias, gamma, beta, eps: 1 + contiguous_copies(x)
    + _cast(s, x.dtype) + (bias is not None and _cast(bias, x.dtype)) + _cast(gamma, _acc(x)) + _cast(beta, _acc(x))
    + (p > 0 and u is not None and _cast(u, np.float32)),
    "dropout_add_layernorm_backward": lambda dys, z, u, p, gamma, mean, rstd, with_bias: 2 + contiguous_copies(z)
    + sum(_cast(d, z.dtype) for d in dys) + _cast(gamma, _acc(z)) + (p > 0 and u is not None and _cast(u, np.float32))
    + 3 * (np.dtype(gamma.dtype) != np.dtype(_acc(z))),         # rows, then columns (, casts of the sums)
}
