"""The communicator of data-parallel training: one process per device, gradients summed across them.

The paper trained on 8 GPUs (§5.2); so does `mpiexec -n 8 python -m train fit ...`.

    host = host_from_launcher()              # under mpiexec / mpirun / srun: MPI; otherwise one process
    comm = for_backend(host, backend, timeout_s)   # NCCL for a GPU backend on several ranks, else the host
    comm.rank, comm.world_size, comm.local_rank, comm.local_size   # local: the ranks on this node
    comm.all_reduce(array)                   # in place: the sum over ranks, on the training backend's arrays
    handle = comm.all_reduce_async(array)    # ... the same, started now; handle.wait() before reading it
    comm.all_reduce_host(np.array([...]))    # small host values (token counts, flags); op="max" too
    comm.all_gather_json(value)              # every rank's small JSON-able value, in rank order
    comm.broadcast(array)                    # in place: rank 0's values everywhere
    comm.barrier(); comm.abort(code)
    with comm.busy("validation"): ...        # a long phase this rank runs alone (the watchdog waits for it)

Three backends behind that interface:
  SingleProcess  world size 1: every collective leaves its input as it is, so one code path runs everywhere.
  Mpi            mpi4py on host (NumPy) arrays: CPU runs, CI, debugging. Async = MPI_Iallreduce.
  Nccl           NCCL through CuPy on GPU arrays, one GPU per process (train/distributed/nccl.py).

Every rank must issue the same collectives in the same order; train/run/step.py and
train/distributed/grad_sync.py are written so that they do, whatever data each rank holds.

A launch is recognised by the variables every MPI launcher sets for its processes
(train/distributed/launch.py). Many nodes: the ranks of one node are found by MPI's shared-memory split
(MPI_COMM_TYPE_SHARED), whatever the launcher and however it placed the ranks; each takes the
GPU of its local rank (`launch.device_index`), one GPU per rank.

Failure: MPI cannot carry on once a rank is gone, so the job ends. `abort_on_error` turns an
exception on any rank into `error: rank R of K: ...` and MPI_Abort, which stops every process of
the job within seconds; `python -m train fit` enters it right after MPI starts, before it reads
anything (a rank that exited before MPI_Init would leave the others waiting in it for ever).
A rank that stops without an exception (killed, SIGSTOP, wedged) is the watchdog's
(train/distributed/watchdog.py): every collective is timed, and one that waits longer than
`train.collective_timeout_s` ends the job, naming the rank it waited for. The launcher also
reports a rank killed outright (MPICH: "BAD TERMINATION ... PID p"), and `describe()` is the
start-up line that maps each PID to its rank.
"""
from __future__ import annotations

import contextlib
import json
import os
import sys
import time
import traceback

import numpy as np

from train.distributed.launch import launched_by_mpi, launcher_size, require_nccl, why_no_mpi
from train.distributed.watchdog import Watchdog
from train.errors import InputError

ABORT_GRACE_S = 1.0
SPIN_S = 2e-3                  # a waiting rank asks MPI without pause for this long,
POLL_S = 2e-4                  # then every POLL_S whether its collective is done


def _to_json(value) -> str:
    """JSON text of a small value (NumPy scalars and arrays as plain numbers and lists): what ranks exchange."""
    return json.dumps(value, default=lambda o: o.tolist() if hasattr(o, "tolist") else repr(o))


class Done:
    """The handle of a collective that has already finished."""

    def wait(self) -> None:
        return None


class SingleProcess:
    """World size 1: the sum over one rank is the array itself."""

    rank, world_size, local_rank, local_size = 0, 1, 0, 1
    watchdog = None

    def all_reduce(self, array, op: str = "sum"):
        return array

    def all_reduce_async(self, array, op: str = "sum") -> Done:
        return Done()

    def all_reduce_host(self, values, op: str = "sum") -> np.ndarray:
        return np.array(values)

    def all_gather_json(self, value) -> list:
        return [json.loads(_to_json(value))]

    def broadcast(self, array, root: int = 0):
        return array

    def barrier(self) -> None:
        return None

    def busy(self, what: str):
        return contextlib.nullcontext()

    def abort(self, code: int = 1) -> None:
        raise SystemExit(code)

    def describe(self) -> str:
        return f"one process (pid {os.getpid()})"


class _MpiRequest:
    def __init__(self, comm: "Mpi", request, array, number: int):
        self.comm, self.request, self.array, self.number = comm, request, array, number   # the buffer must outlive it

    def wait(self) -> None:
        self.comm._wait(self.request, self.number)


class Mpi:
    """MPI collectives on host arrays (mpi4py), over `comm` (default: every process of the launch), timed.

    `node_of(rank)` overrides the node split (tests: 4 ranks on one machine as 2 simulated nodes).
    """

    def __init__(self, comm=None, timeout_s: float = 600.0, node_of=None):
        from mpi4py import MPI

        self.MPI = MPI
        self.comm = MPI.COMM_WORLD if comm is None else comm
        self.rank, self.world_size = self.comm.Get_rank(), self.comm.Get_size()
        node = (self.comm.Split_type(MPI.COMM_TYPE_SHARED) if node_of is None     # the ranks on this machine
                else self.comm.Split(node_of(self.rank), self.rank))
        self.local_rank, self.local_size = node.Get_rank(), node.Get_size()
        node.Free()
        self.ops = {"sum": MPI.SUM, "max": MPI.MAX, "min": MPI.MIN}
        self.watchdog = Watchdog(self.comm, timeout_s, self.abort)

    def _wait(self, request, number: int) -> None:
        """Spin for SPIN_S (a small collective is done by then), then poll with sleeps (a blocking MPI wait would
        spin a core for as long as it waits: ranks may outnumber cores, and one may wait minutes for rank 0)."""
        spin_until = time.perf_counter() + SPIN_S
        while not request.Test():
            if time.perf_counter() > spin_until:
                time.sleep(POLL_S)
        self.watchdog.finish(number)

    def _run(self, what: str, start):
        number = self.watchdog.start(what)
        self._wait(start(), number)

    def all_reduce(self, array, op: str = "sum"):
        self._run(f"all-reduce ({op}) of {array.nbytes:,} bytes",
                  lambda: self.comm.Iallreduce(self.MPI.IN_PLACE, array, op=self.ops[op]))
        return array

    def all_reduce_async(self, array, op: str = "sum") -> _MpiRequest:
        number = self.watchdog.start(f"all-reduce ({op}) of {array.nbytes:,} bytes")
        return _MpiRequest(self, self.comm.Iallreduce(self.MPI.IN_PLACE, array, op=self.ops[op]), array, number)

    def all_reduce_host(self, values, op: str = "sum") -> np.ndarray:
        return self.all_reduce(np.array(values), op)

    def all_gather_json(self, value) -> list:
        data = np.frombuffer(_to_json(value).encode("utf-8"), dtype=np.uint8)
        sizes = np.zeros(self.world_size, dtype=np.int64)
        self._run("all-gather of sizes", lambda: self.comm.Iallgather(np.array([data.size], np.int64), sizes))
        gathered = np.empty(int(sizes.sum()), dtype=np.uint8)
        self._run(f"all-gather of {data.size:,} bytes", lambda: self.comm.Iallgatherv(data, (gathered, sizes)))
        ends = np.cumsum(sizes)
        return [json.loads(gathered[end - size:end].tobytes().decode("utf-8")) for end, size in zip(ends, sizes)]

    def broadcast(self, array, root: int = 0):
        self._run(f"broadcast of {array.nbytes:,} bytes", lambda: self.comm.Ibcast(array, root=root))
        return array

    def barrier(self) -> None:
        self._run("barrier", self.comm.Ibarrier)

    def busy(self, what: str):
        return self.watchdog.busy(what)

    def abort(self, code: int = 1) -> None:
        self.comm.Abort(code)
        os._exit(code)             # MPI_Abort may return while the launcher ends the job: never carry on

    def describe(self) -> str:
        where = self.all_gather_json((os.getpid(), self.MPI.Get_processor_name(), self.local_rank))
        return "ranks: " + ", ".join(f"{r} pid {pid} on {host} (local {local})"
                                     for r, (pid, host, local) in enumerate(where))


def host_from_launcher(environ=None):
    """Mpi over every process of the launch, or SingleProcess without a launcher (or with one process).

    Call it first, before anything can fail: MPI_Init waits for every rank, so a rank that failed
    before it would leave the others waiting for ever.
    """
    if not launched_by_mpi(environ):
        return SingleProcess()
    why = why_no_mpi()
    if why:
        raise InputError(f"started by an MPI launcher but MPI does not load ({why}): pip install mpi4py, with an "
                         f"MPI library under it (your cluster's, or the `mpich` package)")
    host = Mpi()
    expected = launcher_size(environ)
    if expected is not None and expected != host.world_size:
        raise InputError(f"the launcher started {expected} processes but MPI sees {host.world_size}: this mpi4py's "
                         f"MPI is not the launcher's (srun: --mpi=pmi2 or --mpi=pmix and an MPI built for Slurm)")
    return host if host.world_size > 1 else SingleProcess()


def for_backend(host, backend: str, timeout_s: float):
    """The training communicator: NCCL over `host` for a GPU backend on several ranks, else `host` itself."""
    if host.watchdog is not None:
        host.watchdog.timeout_s = timeout_s
    if host.world_size > 1 and backend in ("cupy", "cuda"):
        require_nccl(host.world_size)
        from train.distributed.nccl import Nccl  # here: nccl.py imports CuPy, which a CPU run may lack

        return Nccl(host)
    return host


@contextlib.contextmanager
def rank_zero_first(comm):
    """Rank 0 runs the block first (it writes the run directory); the others run it once it is done (they read).

    Each announces the block as busy: the others wait for it without a time limit while it is
    alive (preparing the data can take an hour, reading it back a while).
    """
    if comm.rank != 0:
        comm.barrier()
    with comm.busy("preparing the run" if comm.rank == 0 else "reading the run rank 0 prepared"):
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
