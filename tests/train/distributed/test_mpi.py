"""Data-parallel training on CPU ranks under `mpiexec` (mpi4py + the `mpich` package, both in the test extra).

k ranks give the weights of one process (float64, <= 1e-10), whatever the number of ranks and
batches; `python -m train fit` on 2 ranks writes the checkpoints a single process writes and
resumes on another number of ranks; a rank that fails or is killed ends the whole job.
"""
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import time
import warnings
from pathlib import Path

import numpy as np
import pytest

from train import config as config_lib
from train.distributed.communicators import mpiexec_path
from train.run.loop import fit
from train.run.metrics import read_metrics
from transformer.checkpoint import load_checkpoint

ROOT = Path(__file__).resolve().parents[3]
ENV = dict(os.environ, PYTHONPATH=str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", ""))


MPIEXEC = mpiexec_path()
pytestmark = pytest.mark.skipif(MPIEXEC is None, reason="needs mpi4py and mpiexec: pip install -e '.[test]' "
                                                        "installs both (mpi4py and the mpich package)")

TINY = ["task.n_train=100", "task.n_valid=8", "task.n_test=8", "tokenizer.vocab_size=80", "model.N=1",
        "model.d_model=16", "model.d_ff=32", "model.h=2", "model.max_len=64", "train.max_tokens=256",
        "train.warmup_steps=4", "train.backend=numpy", "train.log_every=1", "train.valid_every=0",
        "train.valid_bleu_sentences=4", "train.ckpt_every=3", "train.threads=1", "train.keep_last=5",
        "train.average_last=2", "train.bucket_mb=0.004", "train.check_replicas=true"]   # 4 kB buckets: several


def run_mpi(ranks: int, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run([MPIEXEC, "-n", str(ranks), sys.executable, *args], cwd=ROOT, env=ENV,
                          capture_output=True, text=True, timeout=300)    # a hang guard only


def fit_args(run_dir: Path, *sets: str) -> list[str]:
    return ["fit", "--config", "configs/demo.toml", "--run-dir", str(run_dir), "--no-progress",
            *(f"--set={s}" for s in TINY + list(sets))]


@pytest.mark.parametrize("ranks", [2, 4])
def test_k_ranks_train_exactly_like_one_process(ranks, tmp_path):
    out = tmp_path / "result.json"
    done = run_mpi(ranks, "tests/train/distributed/mpi_worker.py", str(out))
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-3000:]
    result = json.loads(out.read_text())
    assert result["world_size"] == ranks
    assert result["moved"] > 0.1                          # 3 updates moved the weights: a real comparison
    for name in ("accum", "concat", "uneven"):            # see mpi_worker.py for each reference
        assert result["relative"][name] <= 1e-10, (name, result["relative"])
        assert result["key_bias_abs"][name] <= 1e-8, (name, result["key_bias_abs"])
    assert result["control"] > 1e-3                       # other dropout masks: a difference the checks would see
    assert result["overlap_identical"] and result["buckets"] > 10
    for rank in result["ranks"]:
        assert all(rank["dp_equal_to_rank0"].values())    # every rank holds rank 0's weights, bit for bit
        assert rank["nan"] == {"stepped": False, "scale": 512.0, "unchanged": True, "agreed_false": False}
        assert "rank(s) [1] differ from rank 0's" in rank["replica_error"]


def _fit_one_process(run_dir: Path, *sets: str):
    run_config = config_lib.load(ROOT / "configs" / "demo.toml", TINY + list(sets))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")                   # the tiny corpus lowers the vocabulary size
        return fit(run_config, run_dir, progress=False)


def _assert_same_checkpoint(a: Path, b: Path) -> None:
    tensors_a, meta_a = load_checkpoint(a)
    tensors_b, meta_b = load_checkpoint(b)
    assert tensors_a.keys() == tensors_b.keys()
    for key in tensors_a:                                 # weights, Adam moments and step
        np.testing.assert_array_equal(tensors_a[key], tensors_b[key], err_msg=f"{a.name}: {key}")
    assert meta_a["rng_state"] == meta_b["rng_state"]     # the dropout generator: no rank-specific state
    for progress in (meta_a["progress"], meta_b["progress"]):
        progress.pop("elapsed_s")
    assert meta_a["progress"] == meta_b["progress"]


def test_fit_on_two_ranks_checkpoints_and_resumes_like_one_process(tmp_path):
    two, moved = tmp_path / "two", tmp_path / "two_then_one"
    done = run_mpi(2, "-m", "train", *fit_args(two, "train.accum=1", "train.max_steps=3"))
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-3000:]
    assert "data parallel over 2 ranks" in done.stdout
    shutil.copytree(two, moved)
    done = run_mpi(2, "-m", "train", *fit_args(two, "train.accum=1", "train.max_steps=6"))   # the same world size
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-3000:]
    assert "restored ckpt_00000003" in done.stdout

    one = tmp_path / "one"                                             # 2 ranks x 1 batch = 1 process x 2 batches,
    _fit_one_process(one, "train.accum=2", "train.max_steps=3")      # stopped at 3 as well (its final validation
    _fit_one_process(one, "train.accum=2", "train.max_steps=6")      # at step 3 is in the progress too)
    for name in ("ckpt_00000003.safetensors", "ckpt_00000006.safetensors"):
        _assert_same_checkpoint(two / name, one / name)
    steps = [r["step"] for r in read_metrics(two / "metrics.jsonl", "train")]
    assert steps == [1, 2, 3, 4, 5, 6]                                 # rank 0 alone wrote the metrics
    assert sorted(p.name for p in two.iterdir()) == sorted(p.name for p in one.iterdir())

    _fit_one_process(moved, "train.accum=2", "train.max_steps=6")    # another world size, from a checkpoint
    _assert_same_checkpoint(moved / "ckpt_00000006.safetensors", one / "ckpt_00000006.safetensors")


@pytest.mark.parametrize("fault", ["raise", "kill"])
def test_a_failing_rank_ends_the_whole_job_within_60_s(fault, tmp_path):
    stamp = tmp_path / "fault_time"
    done = run_mpi(2, "tests/train/distributed/fit_with_fault.py", fault, "2", str(stamp),
                   *fit_args(tmp_path / "run", "train.accum=1", "train.max_steps=50"))
    ended = time.time()
    assert stamp.is_file(), done.stdout[-2000:] + done.stderr[-3000:]
    # The bound: the survivors must not wait for the dead rank (a hang would meet the 300 s guard).
    assert ended - float(stamp.read_text()) < 60
    assert done.returncode != 0
    output = done.stdout + done.stderr
    if fault == "raise":
        assert "error: rank 1 of 2: injected fault; ending the job" in output
    else:   # a killed process cannot speak: the launcher names its PID, and the start-up line maps it to rank 1
        pid = re.search(r"1 pid (\d+) on ", output).group(1)
        assert re.search(rf"PID {pid}\b", output), output[-3000:]


def test_scale_measures_the_allreduce_between_two_local_ranks():
    from train.experiments.scale import host_link

    link, note = host_link(on_gpu=False)                  # runs `mpiexec -n 2 python -m train scale --allreduce-only`
    assert link is not None and "measured here" in link.name, note
    assert link.bus_gbps > 0 and link.latency_us > 0
    assert note.startswith("MPI all-reduce between 2 local ranks")


def test_a_signal_to_one_rank_stops_every_rank_after_the_same_update(tmp_path):
    """Signals reach ranks at different moments; here only rank 1 gets SIGTERM. All ranks must stop after
    the same update (or the others would wait for it forever), rank 0 writing the checkpoint."""
    run_dir = tmp_path / "run"
    proc = subprocess.Popen([MPIEXEC, "-n", "2", sys.executable, "-m", "train",
                             *fit_args(run_dir, "train.accum=1", "train.max_steps=100000")],
                            cwd=ROOT, env=ENV, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    lines = []
    try:
        for line in proc.stdout:                          # wait until rank 0 reports its peers and a first update
            lines.append(line)
            if line.startswith("step ") and any("1 pid " in seen for seen in lines):
                break
        rank1 = int(re.search(r"1 pid (\d+) on ", "".join(lines)).group(1))
        os.kill(rank1, signal.SIGTERM)
        output = "".join(lines) + proc.communicate(timeout=300)[0]
    finally:
        proc.kill()
    assert proc.returncode == 0, output[-3000:]
    stopped = re.search(r"SIGTERM: stopped after step (\d+), checkpoint (ckpt_\d+\.safetensors) written", output)
    assert stopped, output[-3000:]
    assert (run_dir / stopped.group(2)).is_file() and int(stopped.group(1)) >= 1
