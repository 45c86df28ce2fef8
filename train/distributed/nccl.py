"""NCCL collectives on GPU arrays through CuPy: the communicator of multi-GPU training (train/distributed/communicators.py).

One process per GPU (device = local rank, launch.device_index). Rank 0 makes the NCCL
unique id and the host communicator carries it to the others; small host values, the barrier and
the abort go over that host communicator too. With one rank the host is SingleProcess and no MPI
is needed at all (the world-size-1 benchmark: benchmarks/bench_data_parallel.py).

Collectives run on their own CUDA stream, in the order of the training stream: the side
stream waits for an event recorded where the gradients were written, runs the all-reduce,
and records a second event that the training stream waits on before the optimizer reads
the result (`handle.wait()`). The host never blocks, so the all-reduce of one bucket
overlaps the backward pass of the layers below it.

Watchdog: a rank that died or hangs leaves its peers waiting inside NCCL for ever. Each
collective is given to the host's watchdog (train/distributed/watchdog.py) with its CUDA event,
so an NCCL collective that has not finished within `train.collective_timeout_s` ends the job
like a host one, naming the rank it waited for; NCCL's asynchronous errors are checked each second.

Two NCCL ranks cannot share a GPU: multi-rank behaviour is tested on CPU ranks (the Mpi
backend drives the same code), this backend with one rank on a GPU.
"""
from __future__ import annotations

import cupy

from train.distributed.launch import device_index, require_nccl


class _StreamHandle:
    """A collective running on the side stream; wait() makes the current stream wait for it (no host sync)."""

    def __init__(self, done: cupy.cuda.Event, array):
        self.done, self.array = done, array   # the buffer must outlive the collective

    def wait(self) -> None:
        cupy.cuda.get_current_stream().wait_event(self.done)


class Nccl:
    """NCCL on GPU arrays; `host` (Mpi, or SingleProcess for one rank) for the set-up, host values, barrier and abort."""

    def __init__(self, host):
        require_nccl(host.world_size)
        from cupy.cuda import nccl

        self.nccl, self.host = nccl, host
        self.rank, self.world_size = host.rank, host.world_size
        self.local_rank, self.local_size = host.local_rank, host.local_size
        self.device = cupy.cuda.Device(device_index(self.local_rank, self.local_size,
                                                    cupy.cuda.runtime.getDeviceCount()))
        self.device.use()                                      # before the model allocates anything
        uid = host.all_gather_json(nccl.get_unique_id() if self.rank == 0 else None)[0]   # 128 small ints
        self.comm = nccl.NcclCommunicator(self.world_size, tuple(uid), self.rank)
        self.stream = cupy.cuda.Stream(non_blocking=True)
        self.dtypes = {cupy.dtype(cupy.float16): nccl.NCCL_FLOAT16, cupy.dtype(cupy.float32): nccl.NCCL_FLOAT32,
                       cupy.dtype(cupy.float64): nccl.NCCL_FLOAT64, cupy.dtype(cupy.int32): nccl.NCCL_INT32,
                       cupy.dtype(cupy.int64): nccl.NCCL_INT64}
        self.ops = {"sum": nccl.NCCL_SUM, "max": nccl.NCCL_MAX, "min": nccl.NCCL_MIN}
        self.watchdog = host.watchdog
        if self.watchdog is not None:
            self.watchdog.checks.append(self._check_async_error)
            self.watchdog.before_abort.append(self.comm.abort)

    def _check_async_error(self) -> None:
        self.device.use()                                      # the watchdog's thread: the same GPU
        self.comm.check_async_error()

    def _launch(self, array, what: str, collective) -> _StreamHandle:
        if not array.flags.c_contiguous:
            raise ValueError(f"NCCL {what} needs a contiguous array, got strides {array.strides}")
        self.stream.wait_event(cupy.cuda.get_current_stream().record())    # after the writes of `array`
        collective(array.data.ptr, array.size, self.dtypes[array.dtype], self.stream.ptr)
        done = self.stream.record()
        if self.watchdog is not None:
            self.watchdog.start(f"NCCL {what} of {array.nbytes:,} bytes", done=lambda: done.done)
        return _StreamHandle(done, array)

    def all_reduce_async(self, array, op: str = "sum") -> _StreamHandle:
        return self._launch(array, f"all-reduce ({op})", lambda ptr, n, dtype, stream:
                            self.comm.allReduce(ptr, ptr, n, dtype, self.ops[op], stream))

    def all_reduce(self, array, op: str = "sum"):
        self.all_reduce_async(array, op).wait()
        return array

    def broadcast(self, array, root: int = 0):
        self._launch(array, "broadcast", lambda ptr, n, dtype, stream:
                     self.comm.broadcast(ptr, ptr, n, dtype, root, stream)).wait()
        return array

    def all_reduce_host(self, values, op: str = "sum"):
        return self.host.all_reduce_host(values, op)

    def all_gather_json(self, value) -> list:
        return self.host.all_gather_json(value)

    def barrier(self) -> None:
        self.host.barrier()

    def busy(self, what: str):
        return self.host.busy(what)

    def abort(self, code: int = 1) -> None:
        try:
            self.comm.abort()
        finally:
            self.host.abort(code)

    def describe(self) -> str:
        return f"{self.host.describe()}; NCCL {self.nccl.get_version()}, GPU {self.device.id} on rank {self.rank}"
