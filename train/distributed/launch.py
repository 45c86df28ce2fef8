"""Starting ranks: which launcher started this process, whether MPI and NCCL load here, and each rank's GPU.

What a launch needs before any communicator exists, shared by communicators.py (which builds
them) and nccl.py. A launch is recognised by the variables every MPI launcher sets for its
processes: PMI_* for MPICH's mpiexec and Intel MPI, OMPI_* for Open MPI, PMIX_* and
SLURM_STEP_NUM_TASKS for srun. A missing library is said in one line (`why_no_mpi`,
`why_no_nccl`), never met later as an AttributeError.
"""
from __future__ import annotations

import os
import shutil
import sys
import sysconfig

from train.errors import InputError

LAUNCHER_SIZES = ("PMI_SIZE", "OMPI_COMM_WORLD_SIZE", "MV2_COMM_WORLD_SIZE", "SLURM_STEP_NUM_TASKS")
LAUNCHER_VARIABLES = ("PMI_RANK", "PMIX_RANK", *LAUNCHER_SIZES)


def launched_by_mpi(environ=None) -> bool:
    """True inside a process started by mpiexec, mpirun or srun (with more than one task)."""
    environ = os.environ if environ is None else environ
    return any(name in environ for name in LAUNCHER_VARIABLES if name != "SLURM_STEP_NUM_TASKS") \
        or int(environ.get("SLURM_STEP_NUM_TASKS", "1")) > 1


def launcher_size(environ=None) -> int | None:
    """The number of processes the launcher says it started, where it says it."""
    environ = os.environ if environ is None else environ
    return next((int(environ[name]) for name in LAUNCHER_SIZES if name in environ), None)


def why_no_mpi() -> str:
    """"" when `from mpi4py import MPI` works; else why not (mpi4py missing, or no MPI library under it)."""
    try:
        from mpi4py import MPI  # noqa: F401 - only whether it loads
    except (ImportError, RuntimeError, OSError) as err:
        return f"{type(err).__name__}: {err}"
    return ""


def why_no_nccl() -> str:
    """"" when NCCL works through CuPy; else why not. `from cupy.cuda import nccl` succeeds without
    libnccl (then `nccl.available` is False and its functions are missing), so that is checked too."""
    try:
        from cupy.cuda import nccl
    except (ImportError, RuntimeError, OSError) as err:
        return f"CuPy's NCCL module does not load ({type(err).__name__}: {err})"
    if not getattr(nccl, "available", False):
        return "CuPy finds no NCCL library (cupy.cuda.nccl.available is False): pip install nvidia-nccl-cu12 (or -cu13)"
    return ""


def require_nccl(world_size: int) -> None:
    """An InputError saying what is missing unless NCCL works here."""
    why = why_no_nccl()
    if why:
        raise InputError(f"train.backend = 'cuda' on {world_size} rank(s) needs NCCL: {why}")


def mpiexec_path() -> str | None:
    """The mpiexec of this Python's MPI (the `mpich` package installs it beside python), else PATH's; None without MPI."""
    if why_no_mpi():
        return None
    for folder in (sysconfig.get_path("scripts"), os.path.dirname(sys.executable)):
        candidate = os.path.join(folder, "mpiexec")
        if os.path.isfile(candidate):
            return candidate
    return shutil.which("mpiexec")


def device_index(local_rank: int, local_size: int, device_count: int) -> int:
    """The GPU of a rank: its local rank, one GPU per rank; an InputError if a node has more ranks than GPUs.

    A rank that sees a single GPU was given it by the launcher (srun --gpus-per-task=1,
    CUDA_VISIBLE_DEVICES per rank): that one.
    """
    if device_count == 1:
        return 0
    if local_size > device_count:
        raise InputError(f"{local_size} ranks were started on a node with {device_count} GPU(s): start one rank "
                         f"per GPU (mpiexec -ppn {device_count}, srun --ntasks-per-node={device_count})")
    return local_rank
