"""backends/cuda_graph.py without a GPU: one capture per input shapes, replays that copy the new inputs in
and hand back the captured outputs, a failed capture said once and eager after; and cupy_capture with
a NumPy stand-in for CuPy (FakeCupy) that models what a real capture gets wrong: its order of work
(handle bound, private pool, warm-up before the capture, handle unbound after), a stream that runs
ahead of the one still writing the inputs, uploads through one reused pinned staging buffer, and
graphs that replay every kernel argument (a dropout seed) as captured. The capture itself is
proven on a GPU: benchmarks/bench_cuda_graph.py, run by benchmarks/gpu_lease.sh.
"""
import sys
import types

import numpy as np
import pytest

import minitensor as mt

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


class FakeCupy:
    """NumPy playing CuPy for cupy_capture, with a log of what is asked of it and three hazards modelled:
    - streams: work queued on a stream (`queue`) is done when that stream synchronizes or another stream
      waits for an event recorded after it; a copy made on the capture stream happens at once (a
      non-blocking stream runs ahead of any stream it does not wait for);
    - uploads (`asarray` of host data) go through the pinned allocator's one staging buffer, which every
      upload reuses; a captured upload replays as a copy from that buffer, whatever it holds then;
    - a graph replays fn with every dropout seed it drew during the capture (kernel arguments are baked).
    """

    def __init__(self, log):
        self.log, self.staging, self.replayed_copies = log, np.zeros(64), []
        fake = self

        class Stream:
            ptr = 1234

            def __init__(self, non_blocking=False, name="capture"):
                self.queue, self.name, self.recording = [], name, None
                if name == "capture":
                    log.append(("stream", non_blocking))

            def __enter__(self):
                fake.current, self.previous = self, fake.current
                log.append("on stream")

            def __exit__(self, *exc):
                fake.current = self.previous
                log.append("off stream")

            def run_queue(self, upto=None):
                upto = len(self.queue) if upto is None else upto
                for work in self.queue[:upto]:
                    work()
                del self.queue[:upto]

            def synchronize(self):
                log.append("sync")
                self.run_queue()

            def record(self):
                return (self, len(self.queue))

            def wait_event(self, event):
                log.append(("wait for", event[0].name))
                event[0].run_queue(event[1])

            def begin_capture(self):
                log.append("begin")
                self.recording = FakeCudaGraph(log, fake.caller)

            def end_capture(self):
                log.append("end")
                graph, self.recording = self.recording, None
                return graph

        self.caller = self.current = Stream(name="caller")
        self.pinned_malloc = self.default_pinned_malloc = self._staging_buffer
        cuda = types.SimpleNamespace(
            Stream=Stream, MemoryPool=lambda: types.SimpleNamespace(malloc="private malloc"),
            using_allocator=self._allocator, get_current_stream=lambda: self.current,
            set_pinned_memory_allocator=self._set_pinned)
        self.cuda = cuda

    def _allocator(self, malloc):
        log = self.log

        class Allocator:
            def __enter__(self):
                log.append(("allocator", malloc))

            def __exit__(self, *exc):
                log.append("default allocator")

        return Allocator()

    def _set_pinned(self, malloc):
        self.pinned_malloc = malloc

    def get_default_pinned_memory_pool(self):
        return types.SimpleNamespace(malloc=self.default_pinned_malloc)

    def _staging_buffer(self, nbytes):
        return self.staging

    def array(self, a, copy=True):
        return np.array(a, copy=True)

    def asarray(self, host):
        """An upload: host -> the staging buffer -> a device array; recorded as a copy from the buffer."""
        if self.replayed_copies:                                 # a replay: the recorded copy from the buffer
            device, staging = self.replayed_copies.pop(0)
            device[...] = staging
            return device
        host = np.asarray(host, dtype=float)
        staging = self.pinned_malloc(host.nbytes)
        staging[:host.size] = host.ravel()
        device = staging[:host.size].reshape(host.shape).copy()
        graph = self.current.recording
        if graph is not None:
            graph.copies.append((device, staging[:host.size].reshape(host.shape)))
        return device


class FakeCudaGraph:
    """A captured graph: a replay re-runs fn with the seeds drawn at capture, and its uploads replaced by
    copies from where the capture read them (`copies`: the staging buffer, as it is at the replay)."""

    def __init__(self, log, caller):
        self.log, self.caller, self.seeds, self.copies, self.replay = log, caller, [], [], None

    def upload(self, stream):
        self.log.append("upload")

    def launch(self):
        self.caller.run_queue()                                   # launched on the caller's stream: after its work
        self.replay()


def cupy_stand_in(monkeypatch, log):
    """FakeCupy in sys.modules, a cuBLAS stand-in, and a backend whose seeded dropout bakes its seed into
    the capture in progress (as a kernel argument is); cupy_capture's graph gets a replay that models it."""
    cupy = FakeCupy(log)
    cublas = types.SimpleNamespace(create=lambda: 77, setStream=lambda h, s: log.append(("bind", h, s)),
                                   destroy=lambda h: log.append(("destroy", h)))
    monkeypatch.setitem(sys.modules, "cupy", cupy)
    monkeypatch.setitem(sys.modules, "cupy_backends.cuda.libs", types.SimpleNamespace(cublas=cublas))
    numpy_backend = mt.get_backend("numpy")
    dropout = numpy_backend.dropout
    replaying = []

    def baked_dropout(x, p, seed, time_major=False):
        graph = cupy.current.recording
        if graph is not None:
            graph.seeds.append(seed)
        if replaying:
            seed = replaying[0].pop(0)
        return dropout(x, p, seed, time_major)

    monkeypatch.setattr(numpy_backend, "dropout", baked_dropout)
    capture = cuda_graph.cupy_capture

    def capture_with_replay(fn, inputs, backend):
        captured = capture(fn, inputs, backend)

        def replay():
            replaying.append(list(captured.graph.seeds))
            cupy.replayed_copies[:] = captured.graph.copies
            try:
                captured.outputs[...] = fn(*captured.inputs)
            finally:
                replaying.clear()
                cupy.replayed_copies.clear()

        captured.graph.replay = replay
        return captured

    return cupy, capture_with_replay, types.SimpleNamespace(cublas_handle=None)


def test_cupy_capture_binds_a_handle_waits_warms_up_then_captures_with_a_private_pool(monkeypatch):
    """The order of work, with FakeCupy logging what is asked of it."""
    log = []
    cupy, _, backend = cupy_stand_in(monkeypatch, log)

    def fn(a):
        log.append(("fn", backend.cublas_handle))
        return a * 3

    captured = cuda_graph.cupy_capture(fn, (np.ones(2),), backend)
    assert log == [("stream", True), ("bind", 77, 1234), ("wait for", "caller"), ("allocator", "private malloc"),
                   "on stream", ("fn", 77), "sync", "begin", ("fn", 77), "end", "off stream", "default allocator",
                   "upload", "sync"]
    assert backend.cublas_handle is None and captured.keep[0].malloc == "private malloc"
    np.testing.assert_array_equal(captured.outputs, [3.0, 3.0])
    assert cupy.pinned_malloc is cupy.default_pinned_malloc          # CuPy's own pinned allocator is back
    with pytest.raises(ZeroDivisionError):                      # a failed capture gives its handle back
        cuda_graph.cupy_capture(lambda a: 1 / 0, (np.ones(2),), backend)
    assert log[-3:] == ["off stream", "default allocator", ("destroy", 77)] and backend.cublas_handle is None


def test_the_capture_copies_its_inputs_after_the_stream_writing_them_is_done(monkeypatch):
    """The caller's stream still has the input's write queued: a copy that does not wait for it copies stale
    memory, which the warm-up then runs on (token ids from stale memory can index out of bounds: a sticky
    CUDA error). Every run of fn, the warm-up's too, must see the written input."""
    cupy, capture, backend = cupy_stand_in(monkeypatch, [])
    x = np.zeros(4)
    cupy.caller.queue.append(lambda: x.__setitem__(..., [1.0, 2.0, 3.0, 4.0]))   # the producer, not yet done
    seen = []
    graphed = GraphedCall(lambda a: seen.append(a.copy()) or a * 2, backend, capture=capture)
    graphed(x)
    assert len(seen) == 3                                         # warm-up, capture, replay
    for run in seen[:2]:                                          # (the replay's copy is queued after the write)
        np.testing.assert_array_equal(run, [1.0, 2.0, 3.0, 4.0])


def test_a_replay_never_reuses_a_dropout_seed(monkeypatch):
    """Dropout on: two calls must draw two masks. A replayed seed repeats the first mask, so the capture is
    refused, said in one line, and every call runs eagerly with a fresh seed."""
    _, capture, backend = cupy_stand_in(monkeypatch, [])
    dropout = mt.nn.Dropout(0.5, rng=np.random.default_rng(0))
    said = []
    graphed = GraphedCall(lambda a: dropout(mt.Tensor(a)).data, backend, log=said.append, capture=capture)
    x = np.ones(256, dtype=np.float32)
    masks = [graphed(x).copy() for _ in range(3)]
    assert not np.array_equal(masks[1], masks[2]) and not np.array_equal(masks[0], masks[1])
    assert len(said) == 1 and "dropout" in said[0] and "\n" not in said[0]


def test_no_upload_from_the_host_is_captured(monkeypatch):
    """A captured upload replays as a copy from CuPy's reused staging buffer: after another upload it adds
    the wrong numbers. The capture is refused instead, and every call runs eagerly."""
    cupy, capture, backend = cupy_stand_in(monkeypatch, [])
    drawn = []

    def add_a_host_number(a):
        drawn.append(10.0 ** len(drawn))                         # a number the host picks on each call
        return a + cupy.asarray([drawn[-1]])

    said = []
    graphed = GraphedCall(add_a_host_number, backend, log=said.append, capture=capture)
    x = np.zeros(1)
    graphed(x)
    cupy.asarray(np.full(1, -5.0))                               # someone else's upload reuses the buffer
    assert graphed(x)[0] == drawn[-1]                            # a captured upload would add -5
    assert len(said) == 1 and "upload" in said[0]


def test_every_host_number_refuses_a_capture_in_progress():
    """The learning rate and step, a dropout seed and an upload from the host each fail a capture; outside one
    they are ordinary calls."""
    adam = mt.optim.Adam([mt.nn.Parameter(np.ones(3, dtype=np.float32))], lr=1e-3)
    dropout = mt.nn.Dropout(0.1)
    backend = mt.get_backend("numpy")
    hazards = {"learning rate": adam.current_lr, "dropout": dropout.draw, "upload": lambda: backend.asarray([1.0])}
    with cuda_graph.capturing():
        for word, call in hazards.items():
            with pytest.raises(cuda_graph.CaptureRefused, match=word):
                call()
    for call in hazards.values():
        call()
