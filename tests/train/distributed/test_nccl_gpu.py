"""The NCCL backend with one rank on a GPU (marked gpu: skipped visibly without a CuPy GPU or a loadable NCCL).

Two NCCL ranks cannot share one GPU, so this is what one GPU can check: every collective,
the bucketed all-reduce inside train_step, and `fit`, through NCCL exactly as on 8 GPUs.
The multi-rank logic runs on CPU ranks in test_mpi.py.
"""
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

import minitensor as mt
from train.distributed.launch import why_no_nccl

ROOT = Path(__file__).resolve().parents[3]


def _why_not() -> str:
    """What this test needs, checked as it is used: a CuPy GPU and a loadable NCCL (no MPI: one rank)."""
    if not mt.available("cupy"):
        return f"no CuPy GPU ({mt.why_unavailable('cupy')})"
    return why_no_nccl()


WHY = _why_not()
pytestmark = [pytest.mark.gpu, pytest.mark.skipif(bool(WHY), reason=WHY)]


def test_nccl_one_rank_trains_and_fits_like_no_communicator(tmp_path):
    out = tmp_path / "nccl.json"
    env = dict(os.environ, PYTHONPATH=str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", ""))
    done = subprocess.run([sys.executable, "tests/train/distributed/nccl_worker.py", str(out), str(tmp_path)],
                          cwd=ROOT, env=env, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-4000:]
    result = json.loads(out.read_text())
    assert result["world_size"] == 1 and result["collectives"]
    # float32 on the GPU: the same kernels in the same order; the tolerance only allows for
    # non-deterministic reductions inside CuPy/cuBLAS, not for a missing or doubled gradient.
    assert result["train_max_abs"] <= 1e-5 * max(result["train_scale"], 1.0), result
    assert result["fit"]["same_keys"] and result["fit"]["max_abs"] <= 1e-4, result
