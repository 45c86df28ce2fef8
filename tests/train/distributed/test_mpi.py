"""Data-parallel training on CPU ranks under `mpiexec` (mpi4py + the `mpich` package, both in the test extra).

k ranks give the weights of one process (float64, <= 1e-10), whatever the number of ranks, batches
and (simulated) nodes; `python -m train fit` on 2 ranks writes the checkpoints a single process writes,
and a resume on another number of ranks keeps the update or is refused; ranks that disagree at
start stop together; a rank that fails, is killed or stops ends the whole job.
"""
import contextlib
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
from train.distributed.launch import mpiexec_path
from train.run.loop import fit
from train.run.metrics import read_metrics
from transformer.checkpoint import list_checkpoints, load_checkpoint

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


@pytest.mark.parametrize("ranks, nodes", [(2, None), (3, None), (4, 2)])
def test_k_ranks_train_exactly_like_one_process(ranks, nodes, tmp_path):
    out = tmp_path / "result.json"
    done = run_mpi(ranks, "tests/train/distributed/mpi_worker.py", str(out), *([str(nodes)] if nodes else []))
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
    per_node = ranks // (nodes or 1) if nodes else None
    if nodes:                                             # 2 simulated nodes of 2 ranks: local rank = GPU
        layout = [rank["node"] for rank in result["ranks"]]
        assert [n["local_rank"] for n in layout] == [r % per_node for r in range(ranks)]
        assert [n["device"] for n in layout] == [r % per_node for r in range(ranks)]
        assert all(n["local_size"] == per_node for n in layout)


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


TWO = "train.tokens_per_update=512"     # 2 micro-batches of 256 tokens an update: 2 ranks × 1 = 1 process × 2
FOUR = "train.tokens_per_update=1024"   # 4 of them: 2 ranks × 2, 3 ranks × 2 with 2 empty slots, 1 process × 4


def _ok(done: subprocess.CompletedProcess) -> str:
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-3000:]
    return done.stdout


@pytest.fixture(scope="module")
def two_rank_run(tmp_path_factory):
    """`fit` on 2 ranks to step 3, and on to step 6: (the run, a copy as it was at step 3, the second output)."""
    root = tmp_path_factory.mktemp("two_ranks")
    run, at_3 = root / "two", root / "at_3"
    first = _ok(run_mpi(2, "-m", "train", *fit_args(run, TWO, "train.max_steps=3")))
    assert "update: 512 padded tokens per side = 2 ranks × 1 micro-batch of ≤ 256 tokens" in first
    assert "data parallel over 2 ranks" in first
    shutil.copytree(run, at_3)
    second = _ok(run_mpi(2, "-m", "train", *fit_args(run, TWO, "train.max_steps=6")))   # the same world size
    assert "restored ckpt_00000003" in second
    return run, at_3


def test_fit_on_two_ranks_checkpoints_and_resumes_like_one_process(two_rank_run, tmp_path):
    two, at_3 = two_rank_run
    one = tmp_path / "one"                                             # 2 ranks x 1 batch = 1 process x 2 batches,
    _fit_one_process(one, TWO, "train.max_steps=3")                   # stopped at 3 as well (its final validation
    _fit_one_process(one, TWO, "train.max_steps=6")                   # at step 3 is in the progress too)
    for name in ("ckpt_00000003.safetensors", "ckpt_00000006.safetensors"):
        _assert_same_checkpoint(two / name, one / name)
    steps = [r["step"] for r in read_metrics(two / "metrics.jsonl", "train")]
    assert steps == [1, 2, 3, 4, 5, 6]                                 # rank 0 alone wrote the metrics
    assert sorted(p.name for p in two.iterdir()) == sorted(p.name for p in one.iterdir())
    _, meta = load_checkpoint(two / "ckpt_00000006.safetensors")
    assert meta["update"] == {"world_size": 2, "batches": 2, "batch_tokens": 256, "accum": 1,
                              "tokens_per_rank": 256, "tokens_per_update": 512}

    moved = tmp_path / "two_then_one"                                  # another world size, from a checkpoint:
    shutil.copytree(at_3, moved)                                       # the same update, the same checkpoint
    out = _ok(run_mpi(1, "-m", "train", *fit_args(moved, TWO, "train.max_steps=6")))
    assert "= 1 rank × 2 micro-batches of ≤ 256 tokens (kept from ckpt_00000003.safetensors, written by 2 rank(s))" in out
    _assert_same_checkpoint(moved / "ckpt_00000006.safetensors", one / "ckpt_00000006.safetensors")


def test_a_resume_on_more_ranks_than_batches_is_refused_naming_both_world_sizes(two_rank_run, tmp_path):
    run = tmp_path / "run"
    shutil.copytree(two_rank_run[1], run)
    before = sorted(p.name for p in run.iterdir())
    done = run_mpi(3, "-m", "train", *fit_args(run, TWO, "train.max_steps=6"))
    assert done.returncode == 2
    errors = [line for line in (done.stdout + done.stderr).splitlines() if line.startswith("error:")]
    assert errors and all("written by 2 rank(s)" in e and "3 ranks cannot share them" in e for e in errors), errors
    assert sorted(p.name for p in run.iterdir()) == before             # nothing trained, nothing written


def test_a_resume_on_ranks_that_do_not_divide_the_update_keeps_it_exactly(tmp_path):
    """4 micro-batches an update: 2 ranks take 2 each; resumed on 3 ranks, 2 + 2 + 0 (one rank idle) is the same
    update, bit for bit (the same sums in the same order; the dropout generator jumps over the used slots only)."""
    two, three = tmp_path / "two", tmp_path / "three"
    _ok(run_mpi(2, "-m", "train", *fit_args(two, FOUR, "train.max_steps=3")))
    shutil.copytree(two, three)
    _ok(run_mpi(2, "-m", "train", *fit_args(two, FOUR, "train.max_steps=6")))
    out = _ok(run_mpi(3, "-m", "train", *fit_args(three, FOUR, "train.max_steps=6")))
    assert "3 ranks × 2 micro-batches of ≤ 256 tokens; 2 empty micro-batch slots" in out
    _assert_same_checkpoint(three / "ckpt_00000006.safetensors", two / "ckpt_00000006.safetensors")


def _mpmd(rank0: list[str], rank1: list[str]) -> subprocess.CompletedProcess:
    """One rank each with its own arguments (MPICH's `mpiexec -n 1 A : -n 1 B`)."""
    return subprocess.run([MPIEXEC, "-n", "1", sys.executable, "-m", "train", *rank0, ":",
                           "-n", "1", sys.executable, "-m", "train", *rank1],
                          cwd=ROOT, env=ENV, capture_output=True, text=True, timeout=300)   # a hang guard only


def test_a_rank_with_another_config_stops_every_rank_at_start(tmp_path):
    run = tmp_path / "run"
    done = _mpmd(fit_args(run, TWO, "train.max_steps=3"), fit_args(run, TWO, "train.max_steps=3", "train.lr_factor=3.0"))
    assert done.returncode == 2, done.stdout[-2000:] + done.stderr[-3000:]
    assert "config of rank 1 differs from rank 0's (train.lr_factor = 2.0 vs 3.0, rank 0 vs rank 1)" in done.stderr
    assert not list_checkpoints(run) and "step " not in done.stdout    # stopped before the first update


def test_a_rank_given_an_older_checkpoint_stops_every_rank_at_start(two_rank_run, tmp_path):
    """Rank 1's node sees an older copy of the run directory: without the check it would train from step 3."""
    new, old = tmp_path / "new", tmp_path / "old"
    shutil.copytree(two_rank_run[0], new)
    shutil.copytree(two_rank_run[1], old)
    done = _mpmd(fit_args(new, TWO, "train.max_steps=9"), fit_args(old, TWO, "train.max_steps=9"))
    assert done.returncode == 2, done.stdout[-2000:] + done.stderr[-3000:]
    for field in ("step and data position of rank 1 differs", "RNG state of rank 1 differs",
                  "checkpoint of rank 1 differs"):
        assert field in done.stderr, done.stderr[-3000:]
    assert '"file": "ckpt_00000006.safetensors"' in done.stderr and list_checkpoints(new)[-1].name.endswith("06.safetensors")


def test_a_start_up_failure_on_one_rank_ends_every_rank_within_60_s(tmp_path):
    """Rank 1's config is missing: it fails before anything else, and must take rank 0 (already training) with it."""
    started = time.monotonic()
    done = _mpmd(fit_args(tmp_path / "run", TWO, "train.max_steps=100000"),
                 ["fit", "--config", "configs/missing.toml", "--run-dir", str(tmp_path / "run")])
    assert time.monotonic() - started < 60
    assert done.returncode == 2
    assert "error: rank 1 of 2: configs/missing.toml: config file not found; ending the job" in done.stderr


def _signal_rank_1_after_an_update(run_dir: Path, signum: int, *sets: str) -> tuple[int, str, float]:
    """Start `fit` on 2 ranks, send rank 1 `signum` once rank 0 has logged its peers and an update:
    (exit status, output, seconds from the signal to the end of the job)."""
    proc = subprocess.Popen([MPIEXEC, "-n", "2", sys.executable, "-m", "train",
                             *fit_args(run_dir, TWO, "train.max_steps=100000", *sets)],
                            cwd=ROOT, env=ENV, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    lines, rank1 = [], None
    try:
        for line in proc.stdout:
            lines.append(line)
            if line.startswith("step ") and any("1 pid " in seen for seen in lines):
                break
        rank1 = int(re.search(r"1 pid (\d+) on ", "".join(lines)).group(1))
        os.kill(rank1, signum)
        sent = time.monotonic()
        output = "".join(lines) + proc.communicate(timeout=300)[0]    # a hang guard only
        return proc.returncode, output, time.monotonic() - sent
    finally:
        proc.kill()
        if rank1 is not None and signum == signal.SIGSTOP:
            with contextlib.suppress(ProcessLookupError):
                os.kill(rank1, signal.SIGKILL)


def test_a_stopped_rank_ends_every_rank_within_the_collective_timeout(tmp_path):
    """SIGSTOP on rank 1: rank 0 waits in a collective, asks, gets no answer, names rank 1 and ends the job."""
    code, output, seconds = _signal_rank_1_after_an_update(tmp_path / "run", signal.SIGSTOP,
                                                           "train.collective_timeout_s=3")
    assert seconds < 3 + 30, output[-3000:]
    assert code != 0
    assert re.search(r"error: rank 0 of 2: collective #\d+ \(.+\) has waited \d+ s \(train.collective_timeout_s = 3\); "
                     r"rank\(s\) 1 did not answer", output), output[-3000:]


@pytest.mark.parametrize("fault", ["raise", "kill"])
def test_a_failing_rank_ends_the_whole_job_within_60_s(fault, tmp_path):
    stamp = tmp_path / "fault_time"
    done = run_mpi(2, "tests/train/distributed/fit_with_fault.py", fault, "2", str(stamp),
                   *fit_args(tmp_path / "run", TWO, "train.max_steps=50"))
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
    from train.experiments.scale_report import host_link

    link, overlap, note = host_link(on_gpu=False)   # runs `mpiexec -n 2 python -m train scale --allreduce-only`
    assert link is not None and "measured here" in link.name, note
    assert link.bus_gbps > 0 and link.latency_us > 0 and link.at_ranks == 2
    assert 0.0 <= overlap <= 1.0
    assert note.startswith("MPI all-reduce between 2 local ranks") and "hidden behind compute" in note


def test_a_signal_to_one_rank_stops_every_rank_after_the_same_update(tmp_path):
    """Signals reach ranks at different moments; here only rank 1 gets SIGTERM. All ranks must stop after
    the same update (or the others would wait for it forever), rank 0 writing the checkpoint."""
    run_dir = tmp_path / "run"
    code, output, _ = _signal_rank_1_after_an_update(run_dir, signal.SIGTERM)
    assert code == 0, output[-3000:]
    stopped = re.search(r"SIGTERM: stopped after step (\d+), checkpoint (ckpt_\d+\.safetensors) written", output)
    assert stopped, output[-3000:]
    assert (run_dir / stopped.group(2)).is_file() and int(stopped.group(1)) >= 1


@pytest.mark.parametrize("mode", ["busy", "computing"])
def test_the_watchdog_waits_for_a_busy_rank_and_names_one_that_is_not(mode):
    """Rank 0 spends 4 s before a barrier, the timeout is 1 s: announced (validation) it is waited for;
    unannounced, rank 1 asks, learns that rank 0 is alive but elsewhere, and ends the job naming it."""
    done = run_mpi(2, "tests/train/distributed/watchdog_worker.py", mode)
    if mode == "busy":
        assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-3000:]
        assert "rank 0 passed the barrier" in done.stdout and "rank 1 passed the barrier" in done.stdout
    else:
        assert done.returncode != 0
        assert re.search(r"error: rank 1 of 2: collective #\d+ \(barrier\) has waited \d+ s "
                         r"\(train.collective_timeout_s = 1\); rank 0 has not reached it: it is computing", done.stderr), \
            done.stderr[-3000:]
