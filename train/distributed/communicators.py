"""The communicator of data-parallel training: one process per device, gradients summed across them.

The paper trained on 8 GPUs (§5.2); so does `mpiexec -n 8 python -m train fit ...`.

    comm = from_launcher(backend)            # under mpiexec / srun: MPI or NCCL; otherwise one process
    comm.rank, comm.world_size, comm.local_rank
    comm.all_reduce(array)                   # in place: the sum over ranks, on the training backend's arrays
    handle = comm.all_reduce_async(array)    # ... the same, started now; handle.wait() before reading it
    comm.all_reduce_host(np.array([...]))    # small host values (token counts, flags); op="max" too
    comm.broadcast(array)                    # in place: rank 0's values everywhere
    comm.barrier(); comm.abort(code)

Three backends behind that interface:
  SingleProcess  world size 1: every collective leaves its input as it is, so one code path runs everywhere.
  Mpi            mpi4py on host (NumPy) arrays: CPU runs, CI, debugging. Async = MPI_Iallreduce.
  Nccl           NCCL through CuPy on GPU arrays, one GPU per process (train/distributed/nccl.py).

Every rank must issue the same collectives in the same order; train/run/step.py and
train/distributed/grad_sync.py are written so that they do, whatever data each rank holds.

A launch is recognised by the variables every MPI launcher sets for its processes
(PMI_* for MPICH's mpiexec and Intel MPI, OMPI_* for Open MPI, PMIX_* for `srun --mpi=pmix`).

Failure: MPI cannot carry on once a rank is gone, so the job ends. `abort_on_error` turns an
exception on any rank into `error: rank R of K: ...` and MPI_Abort, which stops every process of
the job within seconds. A rank killed outright cannot speak for itself: the launcher reports it
(MPICH: "BAD TERMINATION ... PID p"; Open MPI and Slurm name the rank), and `describe()` is the
start-up line that maps each PID to its rank.
"""
from __future__ import annotations

import contextlib
import os
import shutil
import sys
import sysconfig
import time
import traceback

import numpy as np

from train.errors import InputError

ABORT_GRACE_S = 1.0
LAUNCHER_VARIABLES = ("PMI_SIZE", "PMI_RANK", "OMPI_COMM_WORLD_SIZE", "PMIX_RANK", "MV2_COMM_WORLD_SIZE")


class Done:
    """The handle of a collective that has already finished."""

    def wait(self) -> None:
        return None


class SingleProcess:
    """World size 1: the sum over one rank is the array itself."""

    rank, world_size, local_rank = 0, 1, 0

    def all_reduce(self, array, op: str = "sum"):
        return array

    def all_reduce_async(self, array, op: str = "sum") -> Done:
        return Done()

    def all_reduce_host(self, values, op: str = "sum") -> np.ndarray:
        return np.array(values)

    def broadcast(self, array, root: int = 0):
        return array

    def barrier(self) -> None:
        return None

    def abort(self, code: int = 1) -> None:
        raise SystemExit(code)

    def describe(self) -> str:
        return f"one process (pid {os.getpid()})"


class _MpiRequest:
    def __init__(self, request, array):
        self.request, self.array = request, array   # the buffer must outlive the request

    def wait(self) -> None:
        self.request.Wait()


class Mpi:
    """MPI collectives on host arrays (mpi4py), over `comm` (default: every process of the launch)."""

    def __init__(self, comm=None):
        from mpi4py import MPI

        self.MPI = MPI
        self.comm = MPI.COMM_WORLD if comm is None else comm
        self.rank, self.world_size = self.comm.Get_rank(), self.comm.Get_size()
        node = self.comm.Split_type(MPI.COMM_TYPE_SHARED)      # the ranks on this machine
        self.local_rank = node.Get_rank()
        node.Free()
        self.ops = {"sum": MPI.SUM, "max": MPI.MAX, "min": MPI.MIN}

    def all_reduce(self, array, op: str = "sum"):
        self.comm.Allreduce(self.MPI.IN_PLACE, array, op=self.ops[op])
        return array

    def all_reduce_async(self, array, op: str = "sum") -> _MpiRequest:
        return _MpiRequest(self.comm.Iallreduce(self.MPI.IN_PLACE, array, op=self.ops[op]), array)

    def all_reduce_host(self, values, op: str = "sum") -> np.ndarray:
        return self.all_reduce(np.array(values), op)

    def broadcast(self, array, root: int = 0):
        self.comm.Bcast(array, root=root)
        return array

    def barrier(self) -> None:
        self.comm.Barrier()

    def abort(self, code: int = 1) -> None:
        self.comm.Abort(code)
        os._exit(code)             # MPI_Abort may return while the launcher ends the job: never carry on

    def describe(self) -> str:
        where = self.comm.allgather((os.getpid(), self.MPI.Get_processor_name(), self.local_rank))
        return "ranks: " + ", ".join(f"{r} pid {pid} on {host} (local {local})"
                                     for r, (pid, host, local) in enumerate(where))


def launched_by_mpi(environ=None) -> bool:
    """True inside a process started by mpiexec, mpirun or srun --mpi=..."""
    environ = os.environ if environ is None else environ
    return any(name in environ for name in LAUNCHER_VARIABLES)


def mpiexec_path() -> str | None:
    """The mpiexec of this Python's MPI (the `mpich` package installs it beside python), else PATH's; None without mpi4py."""
    try:
        import mpi4py  # noqa: F401 - only whether it is there
    except ImportError:
        return None
    for folder in (sysconfig.get_path("scripts"), os.path.dirname(sys.executable)):
        candidate = os.path.join(folder, "mpiexec")
        if os.path.isfile(candidate):
            return candidate
    return shutil.which("mpiexec")


def from_launcher(backend: str):
    """The communicator for how this process was started: NCCL for a GPU backend, MPI for a CPU one,
    or SingleProcess when there is no launcher or it started a single process.

    On a GPU this also picks the device, local rank modulo the GPUs here, before anything is allocated.
    """
    if not launched_by_mpi():
        return SingleProcess()
    try:
        host = Mpi()
    except ImportError:
        raise InputError("started by an MPI launcher but mpi4py is not installed: "
                         "pip install mpi4py (and an MPI, e.g. the `mpich` package)") from None
    if host.world_size == 1:
        return SingleProcess()
    if backend in ("cupy", "cuda"):
        from train.distributed.nccl import Nccl

        return Nccl(host)
    return host


@contextlib.contextmanager
def rank_zero_first(comm):
    """Rank 0 runs the block first (it writes the run directory); the others run it once it is done (they read)."""
    if comm.rank != 0:
        comm.barrier()
    yield
    if comm.rank == 0:
        comm.barrier()


@contextlib.contextmanager
def abort_on_error(comm, exit_codes: dict[type, int]):
    """With more than one rank, an exception on any of them ends the whole job, never a hang.

    The message names the rank; `exit_codes` maps the expected exception types to the exit
    status (their message is one line); anything else prints its traceback and exits 1.
    With one rank the exception propagates as usual.
    """
    try:
        yield
    except BaseException as err:  # noqa: BLE001 - every rank must leave the job, whatever happened
        if comm.world_size == 1 or isinstance(err, SystemExit):
            raise
        code = next((c for kind, c in exit_codes.items() if isinstance(err, kind)), 1)
        what = str(err) or type(err).__name__
        print(f"error: rank {comm.rank} of {comm.world_size}: {what}; ending the job", file=sys.stderr, flush=True)
        if code == 1:
            traceback.print_exc()
            sys.stderr.flush()
        time.sleep(ABORT_GRACE_S)      # the launcher forwards output asynchronously: let it pass the message on
        comm.abort(code)


class Silent:
    """What the ranks other than 0 log and record with: nothing (any call, any method)."""

    def __call__(self, *args, **kwargs) -> None:
        return None

    def __getattr__(self, name):
        return self


SIGNAL_NAMES = ("", "SIGINT", "SIGTERM")


def agree(comm, flag: bool) -> bool:
    """True on every rank when any rank says True (e.g. rank 0's early-stopping decision)."""
    return bool(comm.all_reduce_host(np.array([int(flag)], np.int64), op="max")[0])


def agree_on_signal(comm, received: str | None) -> str | None:
    """The stop signal seen by any rank (signals reach ranks at different moments), the same on every rank."""
    code = SIGNAL_NAMES.index(received or "")
    agreed = int(comm.all_reduce_host(np.array([code], np.int64), op="max")[0])
    return SIGNAL_NAMES[agreed] or None
