"""Starting many ranks: launcher detection, one GPU per local rank, and what is missing said plainly.

The GPU machine had mpi4py without an MPI library (`from mpi4py import MPI` fails) and CuPy
without libnccl (`from cupy.cuda import nccl` succeeds, `nccl.available` is False). Both are
simulated here by replacing the modules, so the checks run on any CPU machine.
"""
import re
import sys
import types

import pytest

from train.distributed import launch
from train.distributed.communicators import SingleProcess, for_backend, host_from_launcher
from train.distributed.launch import device_index, launched_by_mpi, launcher_size, why_no_mpi, why_no_nccl
from train.errors import InputError


def _failing_import(name: str, why: str) -> types.ModuleType:
    """A package whose submodules fail to import, as when their shared library is missing."""
    module = types.ModuleType(name)

    def __getattr__(attribute):
        if attribute.startswith("__"):            # __path__ and friends: the import system asks for them
            raise AttributeError(attribute)
        raise ImportError(why)

    module.__getattr__ = __getattr__
    return module


def _without_mpi(monkeypatch):
    """mpi4py installed, its MPI library missing: `from mpi4py import MPI` raises ImportError."""
    monkeypatch.setitem(sys.modules, "mpi4py", _failing_import("mpi4py", "libmpi.so.12: cannot open shared object file"))
    monkeypatch.delitem(sys.modules, "mpi4py.MPI", raising=False)


def _cupy_with(monkeypatch, nccl):
    """A stand-in CuPy whose cupy.cuda.nccl is `nccl` (None: importing it fails)."""
    cupy = types.ModuleType("cupy")
    cupy.cuda = _failing_import("cupy.cuda", "libnccl.so.2: cannot open shared object file")
    if nccl is not None:
        cupy.cuda.nccl = nccl
    monkeypatch.setitem(sys.modules, "cupy", cupy)
    monkeypatch.setitem(sys.modules, "cupy.cuda", cupy.cuda)
    monkeypatch.delitem(sys.modules, "cupy.cuda.nccl", raising=False)


def test_launchers_are_recognised_by_their_variables():
    assert not launched_by_mpi({"HOME": "/root"})
    assert launched_by_mpi({"PMI_RANK": "0", "PMI_SIZE": "2"}) and launched_by_mpi({"OMPI_COMM_WORLD_SIZE": "8"})
    assert launched_by_mpi({"PMIX_RANK": "3"})
    assert launched_by_mpi({"SLURM_STEP_NUM_TASKS": "16", "SLURM_PROCID": "3"})     # srun
    assert not launched_by_mpi({"SLURM_STEP_NUM_TASKS": "1", "SLURM_PROCID": "0"})  # one task: just a process
    assert launcher_size({"PMI_SIZE": "4"}) == 4 and launcher_size({"SLURM_STEP_NUM_TASKS": "16"}) == 16
    assert launcher_size({"PMIX_RANK": "0"}) is None
    assert isinstance(host_from_launcher({"HOME": "/root"}), SingleProcess)


def test_one_gpu_per_local_rank_and_no_more_ranks_than_gpus():
    assert [device_index(local, 8, 8) for local in range(8)] == list(range(8))
    assert [device_index(local, 8, 1) for local in range(8)] == [0] * 8     # the launcher bound one GPU to each
    with pytest.raises(InputError, match=r"16 ranks were started on a node with 8 GPU\(s\): start one rank per GPU "
                                         r"\(mpiexec -ppn 8, srun --ntasks-per-node=8\)"):
        device_index(3, 16, 8)


def test_mpi4py_without_an_mpi_library_is_one_clear_error(monkeypatch):
    _without_mpi(monkeypatch)
    assert why_no_mpi().startswith("ImportError")
    assert launch.mpiexec_path() is None                # the MPI tests then skip, visibly
    with pytest.raises(InputError, match=r"started by an MPI launcher but MPI does not load \(ImportError"):
        host_from_launcher({"PMI_RANK": "0", "PMI_SIZE": "2"})


def test_nccl_with_one_rank_needs_no_mpi(monkeypatch):
    _without_mpi(monkeypatch)
    host = SingleProcess()
    assert for_backend(host, "cuda", 600.0) is host            # one rank: nothing to communicate, no NCCL either


@pytest.mark.parametrize("nccl, why", [(types.SimpleNamespace(available=False), "cupy.cuda.nccl.available is False"),
                                       (None, "CuPy's NCCL module does not load (ImportError: libnccl.so.2")])
def test_cupy_without_libnccl_is_one_clear_error_not_an_attribute_error(monkeypatch, nccl, why):
    _cupy_with(monkeypatch, nccl)
    assert why in why_no_nccl()

    class TwoRanks(SingleProcess):
        world_size = 2

    with pytest.raises(InputError, match=r"train.backend = 'cuda' on 2 rank\(s\) needs NCCL: .*" + re.escape(why)):
        for_backend(TwoRanks(), "cuda", 600.0)
    assert for_backend(TwoRanks(), "cpu", 600.0).world_size == 2  # CPU ranks: MPI alone, NCCL not asked for


def test_nccl_built_directly_says_what_is_missing():
    """benchmarks/bench_data_parallel.py builds Nccl(SingleProcess()) itself; with the real CuPy of a machine
    without libnccl (this CI's cupy-cuda13x) importing the module works and building it is the one-line error."""
    pytest.importorskip("cupy")
    why = why_no_nccl()
    if not why:
        pytest.skip("NCCL loads here: tests/train/distributed/test_nccl_gpu.py runs it")
    from train.distributed.nccl import Nccl

    with pytest.raises(InputError, match=r"train.backend = 'cuda' on 1 rank\(s\) needs NCCL: " + re.escape(why)):
        Nccl(SingleProcess())
