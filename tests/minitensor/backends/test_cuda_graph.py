"""backends/cuda_graph.py without a GPU: one capture per input shapes, replays that copy the new inputs in
and hand back the captured outputs, a failed capture said once and eager after; and cupy_capture's
order of work (handle bound, private pool, warm-up before the capture, handle unbound after) with a
NumPy stand-in for CuPy. The capture itself is proven on a GPU: benchmarks/bench_cuda_graph.py, run
by benchmarks/gpu_lease.sh call2.
"""
import sys
import types

import numpy as np
import pytest

from minitensor.backends import cuda_graph
from minitensor.backends.cuda_graph import Captured, GraphedCall


class FakeGraph:
    """A 'graph' that re-runs what was captured: fn on the captured inputs, written into the captured outputs."""

    def __init__(self, fn, inputs, outputs):
        self.fn, self.inputs, self.outputs, self.launches = fn, inputs, outputs, 0

    def launch(self):
        self.launches += 1
        self.outputs[...] = self.fn(*self.inputs)


def fake_capture(fn, inputs, backend):
    backend.captures += 1
    static = tuple(a.copy() for a in inputs)
    outputs = fn(*static)
    return Captured(static, outputs, FakeGraph(fn, static, outputs))


def test_one_capture_per_input_shapes_then_replays_with_the_new_inputs():
    backend = types.SimpleNamespace(captures=0)
    graphed = GraphedCall(lambda a, b: a * 2 + b, backend, capture=fake_capture)
    x, y = np.arange(6.0).reshape(2, 3), np.ones((2, 3))
    first = graphed(x, y)
    np.testing.assert_array_equal(first, x * 2 + 1)
    again = graphed(x + 10, y)                                   # same shapes: replayed, new values
    assert again is first and backend.captures == 1
    np.testing.assert_array_equal(again, (x + 10) * 2 + 1)
    graphed(np.ones((4, 3)), np.ones((4, 3)))                    # new shapes: a capture of their own
    assert backend.captures == 2 and len(graphed.graphs) == 2
    assert graphed.graphs[GraphedCall.key((x, y))].graph.launches == 2


def test_a_failed_capture_is_said_once_and_every_call_runs_eagerly_after():
    said = []

    def refuse(fn, inputs, backend):
        raise RuntimeError("operation not permitted when stream is capturing\nmore detail")

    calls = []
    graphed = GraphedCall(lambda a: calls.append(a) or a + 1, None, log=said.append, capture=refuse)
    for value in (1.0, 2.0, 3.0):
        assert graphed(np.array(value)) == value + 1
    assert len(said) == 1 and "operation not permitted" in said[0] and "eagerly" in said[0]
    assert len(calls) == 3 and graphed.failure.startswith("RuntimeError")


def test_cupy_capture_binds_a_handle_warms_up_then_captures_with_a_private_pool(monkeypatch):
    """The order of work, with a NumPy stand-in for CuPy that logs what is asked of it."""
    log = []

    class Stream:
        ptr = 1234

        def __init__(self, non_blocking=False):
            log.append(("stream", non_blocking))

        def __enter__(self):
            log.append("on stream")

        def __exit__(self, *exc):
            log.append("off stream")

        def synchronize(self):
            log.append("sync")

        def begin_capture(self):
            log.append("begin")

        def end_capture(self):
            log.append("end")
            return types.SimpleNamespace(upload=lambda stream: log.append("upload"))

    class Allocator:
        def __init__(self, malloc):
            self.malloc = malloc

        def __enter__(self):
            log.append(("allocator", self.malloc))

        def __exit__(self, *exc):
            log.append("default allocator")

    pool = types.SimpleNamespace(malloc="private malloc")
    cuda = types.SimpleNamespace(Stream=Stream, MemoryPool=lambda: pool, using_allocator=Allocator)
    cupy = types.SimpleNamespace(cuda=cuda, array=np.array)
    cublas = types.SimpleNamespace(create=lambda: 77, setStream=lambda h, s: log.append(("bind", h, s)),
                                   destroy=lambda h: log.append(("destroy", h)))
    monkeypatch.setitem(sys.modules, "cupy", cupy)
    monkeypatch.setitem(sys.modules, "cupy_backends.cuda.libs", types.SimpleNamespace(cublas=cublas))
    backend = types.SimpleNamespace(cublas_handle=None)

    def fn(a):
        log.append(("fn", backend.cublas_handle))
        return a * 3

    captured = cuda_graph.cupy_capture(fn, (np.ones(2),), backend)
    assert log == [("stream", True), ("bind", 77, 1234), ("allocator", "private malloc"), "on stream",
                   ("fn", 77), "sync", "begin", ("fn", 77), "end", "off stream", "default allocator", "upload", "sync"]
    assert backend.cublas_handle is None and captured.keep[0] is pool
    np.testing.assert_array_equal(captured.outputs, [3.0, 3.0])
    with pytest.raises(ZeroDivisionError):                      # a failed capture gives its handle back
        cuda_graph.cupy_capture(lambda a: 1 / 0, (np.ones(2),), backend)
    assert log[-3:] == ["off stream", "default allocator", ("destroy", 77)] and backend.cublas_handle is None
