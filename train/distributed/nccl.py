"""NCCL collectives on GPU arrays through CuPy: the communicator of multi-GPU training (train/distributed/communicators.py).

One process per GPU (device = local rank modulo the GPUs on the machine). Rank 0 makes the
NCCL unique id and MPI carries it to the others; small host values, the barrier and the
abort go over that MPI communicator too.

Collectives run on their own CUDA stream, in the order of the training stream: the side
stream waits for an event recorded where the gradients were written, runs the all-reduce,
and records a second event that the training stream waits on before the optimizer reads
the result (`handle.wait()`). The host never blocks, so the all-reduce of one bucket
overlaps the backward pass of the layers below it.

Watchdog: a rank that died or hangs leaves its peers waiting inside NCCL forever. A
background thread checks every second that each collective finished within `timeout_s`
(and that NCCL reports no asynchronous error); otherwise it names the rank and the
collective, aborts the NCCL communicator and ends the job with MPI_Abort.

Two NCCL ranks cannot share a GPU: multi-rank behaviour is tested on CPU ranks (the Mpi
backend drives the same code), this backend with one rank on a GPU.
"""
from __future__ import annotations

import collections
import sys
import threading
import time

import cupy
from cupy.cuda import nccl

DTYPES = {cupy.dtype(cupy.float16): nccl.NCCL_FLOAT16, cupy.dtype(cupy.float32): nccl.NCCL_FLOAT32,
          cupy.dtype(cupy.float64): nccl.NCCL_FLOAT64, cupy.dtype(cupy.int32): nccl.NCCL_INT32,
          cupy.dtype(cupy.int64): nccl.NCCL_INT64}
OPS = {"sum": nccl.NCCL_SUM, "max": nccl.NCCL_MAX, "min": nccl.NCCL_MIN}


class _StreamHandle:
    """A collective running on the side stream; wait() makes the current stream wait for it (no host sync)."""

    def __init__(self, done: cupy.cuda.Event, array):
        self.done, self.array = done, array   # the buffer must outlive the collective

    def wait(self) -> None:
        cupy.cuda.get_current_stream().wait_event(self.done)


class Nccl:
    """NCCL on GPU arrays; `host` (train.distributed.communicators.Mpi) for the set-up, host values, barrier and abort."""

    def __init__(self, host, timeout_s: float = 600.0):
        self.host = host
        self.rank, self.world_size, self.local_rank = host.rank, host.world_size, host.local_rank
        self.device = cupy.cuda.Device(self.local_rank % cupy.cuda.runtime.getDeviceCount())
        self.device.use()                                      # before the model allocates anything
        uid = nccl.get_unique_id() if self.rank == 0 else None
        self.comm = nccl.NcclCommunicator(self.world_size, host.comm.bcast(uid, root=0), self.rank)
        self.stream = cupy.cuda.Stream(non_blocking=True)
        self.watchdog = _Watchdog(self, timeout_s)

    def _launch(self, array, what: str, collective) -> _StreamHandle:
        if not array.flags.c_contiguous:
            raise ValueError(f"NCCL {what} needs a contiguous array, got strides {array.strides}")
        self.stream.wait_event(cupy.cuda.get_current_stream().record())    # after the writes of `array`
        collective(array.data.ptr, array.size, DTYPES[array.dtype], self.stream.ptr)
        done = self.stream.record()
        self.watchdog.track(done, f"{what} of {array.nbytes:,} bytes")
        return _StreamHandle(done, array)

    def all_reduce_async(self, array, op: str = "sum") -> _StreamHandle:
        return self._launch(array, f"all-reduce ({op})", lambda ptr, n, dtype, stream:
                            self.comm.allReduce(ptr, ptr, n, dtype, OPS[op], stream))

    def all_reduce(self, array, op: str = "sum"):
        self.all_reduce_async(array, op).wait()
        return array

    def broadcast(self, array, root: int = 0):
        self._launch(array, "broadcast", lambda ptr, n, dtype, stream:
                     self.comm.broadcast(ptr, ptr, n, dtype, root, stream)).wait()
        return array

    def all_reduce_host(self, values, op: str = "sum"):
        return self.host.all_reduce_host(values, op)

    def barrier(self) -> None:
        self.host.barrier()

    def abort(self, code: int = 1) -> None:
        try:
            self.comm.abort()
        finally:
            self.host.abort(code)

    def describe(self) -> str:
        return f"{self.host.describe()}; NCCL {nccl.get_version()}, GPU {self.device.id} on rank {self.rank}"


class _Watchdog:
    """Ends the job when a collective has not finished after `timeout_s` (a peer died or hangs)."""

    def __init__(self, comm: Nccl, timeout_s: float):
        self.comm, self.timeout_s = comm, timeout_s
        self.pending = collections.deque()                    # (event, started, what), oldest first
        self.lock = threading.Lock()
        threading.Thread(target=self._run, name="nccl-watchdog", daemon=True).start()

    def track(self, event: cupy.cuda.Event, what: str) -> None:
        with self.lock:
            self.pending.append((event, time.monotonic(), what))

    def _run(self) -> None:
        self.comm.device.use()                                 # CUDA calls from this thread: the same GPU
        while True:
            time.sleep(1.0)
            with self.lock:
                while self.pending and self.pending[0][0].done:
                    self.pending.popleft()
                late = self.pending[0] if self.pending else None
            try:
                self.comm.comm.check_async_error()
            except Exception as err:  # noqa: BLE001 - any NCCL error ends the job
                self._abort(f"NCCL reported an error: {err}")
            if late is not None and time.monotonic() - late[1] > self.timeout_s:
                self._abort(f"NCCL {late[2]} did not finish within {self.timeout_s:.0f} s "
                            f"(a peer rank died or hangs)")

    def _abort(self, why: str) -> None:
        print(f"error: rank {self.comm.rank} of {self.comm.world_size}: {why}; ending the job",
              file=sys.stderr, flush=True)
        self.comm.abort(1)
