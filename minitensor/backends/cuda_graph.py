"""A function of device arrays captured as a CUDA graph per shape of its inputs, then replayed.

    graphed = GraphedCall(fn, backend)      # backend: CupyBackend (its cuBLAS handle is bound for captures)
    outputs = graphed(*inputs)              # first call per input shapes: capture; later: replay

A replay launches every kernel and cuBLAS call fn made, in one call: the host does no Python
per op at all. What a captured fn must be (CUDA graphs freeze more than kernels):
  - its inputs and outputs are device arrays: a replay copies new inputs into the arrays it was
    captured with and hands back the same output arrays, rewritten;
  - it reads nothing from the host and nothing back (no sync: a capture refuses one), and every
    number it passes to a kernel is the same on every call. A host number baked into a kernel
    argument would be replayed as captured, so the places that make one call `refuse_in_capture`,
    which fails the capture: a dropout seed (nn.Dropout.draw, with p > 0), the learning rate and
    step (Optimizer.current_lr), the loss weight of a batch's tokens (train/run/step.py), and an
    upload from the host (Backend.asarray; CuPy's pinned staging buffer, which later uploads
    reuse, so a replay would copy whatever is there then).
Capturing (`cupy_capture`): a cuBLAS handle of our own is bound to the capture stream
beforehand (CuPy re-binds its own handle to the current stream on every use, which a capture
refuses); the capture stream waits for the caller's stream (the one still writing the inputs)
before copying them; fn runs once on that stream to compile its kernels, grow its memory and
give cuBLAS its workspace, then again under capture, with every array it makes taken from a
memory pool of the graph's own, which nothing else allocates from, so a replay's addresses stay
its own. A capture that fails (a sync inside, a refused host number, an API the toolchain cannot
capture) is reported once, in one line through `log`, and from then on fn runs eagerly.
"""
from __future__ import annotations

from contextlib import contextmanager
from dataclasses import dataclass

_capturing = False                 # True while cupy_capture records fn (not during its warm-up)


class CaptureRefused(RuntimeError):
    """fn did something a replay cannot repeat correctly (a host number baked in, an upload)."""


def refuse_in_capture(what: str) -> None:
    """Fail the capture in progress, if any: `what` would be replayed as it was at capture."""
    if _capturing:
        raise CaptureRefused(f"{what}: every replay would repeat the captured value (not captured)")


@contextmanager
def capturing(cp=None):
    """The span of a capture: host numbers refused, and CuPy's pinned staging buffer (its host uploads) too."""
    global _capturing
    if cp is not None:
        cp.cuda.set_pinned_memory_allocator(_refuse_pinned)
    _capturing = True
    try:
        yield
    finally:
        _capturing = False
        if cp is not None:                          # CuPy's default (it has no getter for the one set)
            cp.cuda.set_pinned_memory_allocator(cp.get_default_pinned_memory_pool().malloc)


def _refuse_pinned(nbytes):
    refuse_in_capture(f"an upload of {nbytes} bytes from the host through CuPy's reused pinned buffer")


@dataclass
class Captured:
    """One capture: the input arrays replays copy into, the outputs they rewrite, and what keeps them valid."""

    inputs: tuple
    outputs: object
    graph: object
    keep: tuple = ()               # the graph's memory pool and cuBLAS handle: alive as long as the graph


class GraphedCall:
    """fn(*inputs) captured once per input shapes and dtypes (`key`) and replayed; eager after a failed capture."""

    def __init__(self, fn, backend, log=print, capture=None):
        self.fn, self.backend, self.log = fn, backend, log
        self.capture = cupy_capture if capture is None else capture
        self.graphs: dict[tuple, Captured] = {}
        self.failure: str | None = None            # why capturing failed; then every call runs eagerly

    @staticmethod
    def key(inputs) -> tuple:
        return tuple((tuple(a.shape), str(a.dtype)) for a in inputs)

    def __call__(self, *inputs):
        if self.failure is not None:
            return self.fn(*inputs)
        key = self.key(inputs)
        captured = self.graphs.get(key)
        if captured is None:
            try:
                captured = self.graphs[key] = self.capture(self.fn, inputs, self.backend)
            except Exception as exc:  # noqa: BLE001 - any failure means: run eagerly, and say why once
                self.failure = f"{type(exc).__name__}: {exc}".splitlines()[0]
                self.log(f"CUDA graph capture failed ({self.failure}); running eagerly from now on")
                return self.fn(*inputs)
        for mine, new in zip(captured.inputs, inputs):
            if mine is not new:
                mine[...] = new                     # the graph reads its inputs where it was captured reading them
        captured.graph.launch()
        return captured.outputs


def cupy_capture(fn, inputs, backend) -> Captured:
    """Capture fn(*copies of inputs) on a stream of its own with CuPy (see the module docstring)."""
    import cupy as cp
    from cupy_backends.cuda.libs import cublas

    producer = cp.cuda.get_current_stream()      # the stream that may still be writing the inputs
    stream = cp.cuda.Stream(non_blocking=True)
    pool = cp.cuda.MemoryPool()
    handle = cublas.create()
    cublas.setStream(handle, stream.ptr)
    backend.cublas_handle = handle
    try:
        stream.wait_event(producer.record())         # a non-blocking stream waits for no other by itself
        with cp.cuda.using_allocator(pool.malloc), stream:
            static = tuple(cp.array(a, copy=True) for a in inputs)
            fn(*static)                              # warm-up: kernels compiled, pool grown, cuBLAS workspace made
            stream.synchronize()                     # (a cache it fills once, an upload included, stays out)
            stream.begin_capture()
            try:
                with capturing(cp):
                    outputs = fn(*static)
            finally:
                graph = stream.end_capture()
        graph.upload(stream)
        stream.synchronize()
    except Exception:
        cublas.destroy(handle)
        raise
    finally:
        backend.cublas_handle = None
    return Captured(static, outputs, graph, keep=(pool, _Handle(handle, cublas.destroy), stream))


class _Handle:
    """A cuBLAS handle destroyed when the graph that uses it goes."""

    def __init__(self, handle, destroy):
        self.handle, self.destroy = handle, destroy

    def __del__(self):
        self.destroy(self.handle)
