"""Reliability: kills, signals, divergence, full disks, bad input, and no pickle/eval.

Every fault here is listed in docs/faults.md. Training runs use a
tiny model on the built-in task (numpy backend, one thread), so the whole file
takes well under a minute on 2 cores. Bad inputs already covered by
tests/train/test_cli.py (mismatched line counts, non-UTF-8, unknown config key,
tampered checkpoint, empty stdin, tokenizer/vocabulary mismatch) are not repeated.
"""

import contextlib
import errno
import json
import os
import random
import re
import signal
import socket
import subprocess
import sys
import time
import warnings
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

import minitensor as mt
import transformer.checkpoint as checkpoint_module
from cli_helpers import ENV, ROOT, assert_one_line_error, run_cli
from train import config as config_lib
from train.config import RunConfig
from train.errors import InputError
from train.run.loop import fit
from train.run.loss_scaler import DynamicLossScaler, LossScaleOverflowError
from transformer.checkpoint import CheckpointError, latest_valid_checkpoint, list_checkpoints, load_checkpoint

TINY = [
    "task.n_train=200", "task.n_valid=8", "task.n_test=8", "tokenizer.vocab_size=80",
    "model.N=1", "model.d_model=16", "model.d_ff=32", "model.h=2", "model.max_len=64",
    "train.max_tokens=256", "train.warmup_steps=4", "train.backend=numpy", "train.log_every=1",
    "train.valid_every=0", "train.valid_bleu_sentences=2", "train.valid_beam=1", "train.ckpt_every=1",
    "train.keep_last=3", "train.average_last=2", "train.threads=1",
]
STEP_LINE = b" | loss "  # a training log line: the loop is running


def fit_cmd(run_dir: Path, *extra: str) -> list[str]:
    sets = [arg for item in TINY + list(extra) for arg in ("--set", item)]
    return [sys.executable, "-m", "train", "fit", "--config", str(ROOT / "configs" / "demo.toml"),
            "--run-dir", str(run_dir), "--no-progress", *sets]


def tiny_config(*extra: str) -> RunConfig:
    return config_lib.apply_overrides(RunConfig(name="demo"), TINY + list(extra))


def quiet_fit(*args, **kwargs):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # the tiny corpus lowers the vocabulary size (a warning)
        return fit(*args, progress=False, **kwargs)


def snapshot(folder: Path) -> dict:
    return {p.relative_to(folder): p.stat().st_mtime_ns for p in folder.rglob("*")} if folder.exists() else {}


def wait_until(condition, timeout: float, poll: float = 0.005) -> bool:
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        if condition():
            return True
        time.sleep(poll)
    return False


def step_of(path: Path) -> int:
    return int(path.name.split("_")[1].split(".")[0])


# ------------------------------------------------------------------ 1. SIGKILL
def test_sigkill_at_20_random_moments_leaves_only_valid_checkpoints_and_resumes(tmp_path):
    """Kill -9 twenty times (half at random delays, half while a checkpoint is being written)."""
    rng = random.Random(8)
    run_dir = tmp_path / "run"
    cmd = fit_cmd(run_dir, "train.max_steps=100000", "train.ckpt_every=2")
    kills_during_write = 0
    for i in range(20):
        before = latest_valid_checkpoint(run_dir)
        log = tmp_path / f"kill{i}.log"
        with open(log, "wb") as out:
            proc = subprocess.Popen(cmd, stdout=out, stderr=subprocess.STDOUT, cwd=ROOT, env=ENV)
            try:
                assert wait_until(lambda: STEP_LINE in log.read_bytes() or proc.poll() is not None, 60)
                if i % 2:
                    time.sleep(rng.uniform(0.0, 0.3))
                else:  # the moment a write is under way (busy polling: writes take milliseconds)
                    wait_until(lambda: any(run_dir.glob("ckpt_*.tmp-*")), 10, poll=0)
                    time.sleep(rng.uniform(0.0, 0.001))
                proc.send_signal(signal.SIGKILL)
            finally:
                proc.kill()
                proc.wait()
        text = log.read_text()
        assert proc.returncode == -signal.SIGKILL, text
        if before is not None:
            assert "resuming run" in text and f"restored {before.name} (step {step_of(before)}," in text, text
        kills_during_write += any(run_dir.glob("ckpt_*.tmp-*"))
        checkpoints = list_checkpoints(run_dir)
        assert all(re.fullmatch(r"ckpt_\d{8}\.safetensors", p.name) for p in checkpoints)
        for path in checkpoints:  # every file named as a checkpoint loads and verifies
            _, metadata = load_checkpoint(path, verify=True)
            assert metadata["progress"]["step"] == step_of(path)
        if before is not None:
            assert checkpoints and step_of(checkpoints[-1]) >= step_of(before)  # never goes back
    assert kills_during_write >= 1, "no kill landed during a checkpoint write"
    newest = latest_valid_checkpoint(run_dir)
    done = subprocess.run(fit_cmd(run_dir, f"train.max_steps={step_of(newest) + 3}", "train.ckpt_every=2"),
                          capture_output=True, cwd=ROOT, env=ENV, timeout=300)
    out = done.stdout.decode()
    assert done.returncode == 0, done.stderr.decode()
    assert f"restored {newest.name}" in out and f"done: step {step_of(newest) + 3}" in out
    assert not list(run_dir.glob("*.tmp*")), "leftover temporary files were not cleaned up"


def prepared_files(folder: Path) -> dict:
    """Every file preparation writes in a run and its data directory (task text, tokenizer, token ids),
    by its bytes' hash. manifest.json (timings, date) and file_hashes.json (paths, mtimes) are left out."""
    import hashlib
    return {str(p.relative_to(folder)): hashlib.sha256(p.read_bytes()).hexdigest()
            for pattern in ("run/tokenizer.*", "prepared/*/*") for p in folder.glob(pattern)
            if p.is_file() and p.name != "manifest.json"}


KEY_FOLDER = "????????????????"  # prepared/<16 hex digits of the content hash>


@pytest.mark.parametrize("stage, busy", [("task text", "prepared/builtin.tmp-*"),
                                         ("tokenizer", f"prepared/{KEY_FOLDER}.tmp-*"),
                                         ("token ids", f"prepared/{KEY_FOLDER}.tmp-*/*.raw")])
def test_sigkill_during_data_preparation_then_rerun_prepares_the_same_files(tmp_path, stage, busy):
    """Kill -9 while the task, the tokenizer or the token ids are being written; the rerun must not
    trust a half-written file: it ends with exactly the files of a run that was never interrupted
    (byte for byte: the tokenizer is deterministic)."""
    extra = ("task.n_train=20000", "train.max_steps=1")
    reference = tmp_path / "reference"  # each run with its own prepared/ beside it
    done = subprocess.run(fit_cmd(reference / "run", *extra), capture_output=True, cwd=ROOT, env=ENV, timeout=300)
    assert done.returncode == 0, done.stderr.decode()
    for attempt in range(8):  # a stage can take only a fraction of a second: a busy machine may miss the moment
        killed = tmp_path / f"killed{attempt}"
        proc = subprocess.Popen(fit_cmd(killed / "run", *extra), stdout=subprocess.DEVNULL,
                                stderr=subprocess.DEVNULL, cwd=ROOT, env=ENV)
        try:
            wait_until(lambda: any(killed.glob(busy)) or proc.poll() is not None, 60, poll=0)
            proc.kill()
        finally:
            proc.wait()
        if proc.returncode == -signal.SIGKILL:
            break
    assert proc.returncode == -signal.SIGKILL, f"the run finished before a kill during the {stage}"
    assert not [p for p in killed.glob(f"prepared/{KEY_FOLDER}") if p.is_dir()], f"killed after the {stage}"
    done = subprocess.run(fit_cmd(killed / "run", *extra), capture_output=True, cwd=ROOT, env=ENV, timeout=300)
    assert done.returncode == 0, done.stderr.decode()
    assert prepared_files(killed) == prepared_files(reference)
    assert not list(killed.rglob("*.tmp*")) and not list(killed.rglob("*.raw")), "partial files left behind"


# ------------------------------------------------------------------ 1b. what is not ours, and one writer
def test_force_in_a_folder_that_was_never_a_run_deletes_nothing(tmp_path):
    """`fit --run-dir DIR --force` in a folder of the user's must not delete data/train.en, cache/notes.txt
    or a file named plots: it is refused, with or without --force, and nothing changes."""
    folder = tmp_path / "mine"
    for name, text in (("data/train.en", "my corpus\n"), ("cache/notes.txt", "notes"), ("plots", "a file")):
        (folder / name).parent.mkdir(parents=True, exist_ok=True)
        (folder / name).write_text(text)
    before = {p: (p.read_bytes() if p.is_file() else None, p.stat().st_mtime_ns) for p in folder.rglob("*")}
    for force in (["--force"], []):
        result = run_cli(*fit_cmd(folder, "train.max_steps=1")[3:], *force)
        line = assert_one_line_error(result, f"{folder}: not a run directory", "choose a new or empty --run-dir")
        assert "--force" not in line
        assert {p: (p.read_bytes() if p.is_file() else None, p.stat().st_mtime_ns) for p in folder.rglob("*")} == before


@contextlib.contextmanager
def trainer(run_dir: Path, log: Path):
    """A `fit` process training in run_dir, yielded once its first step is logged; killed -9 on leaving."""
    with open(log, "wb") as out:
        proc = subprocess.Popen(fit_cmd(run_dir, "train.max_steps=100000", "train.ckpt_every=2"), stdout=out,
                                stderr=subprocess.STDOUT, cwd=ROOT, env=ENV)
        try:
            assert wait_until(lambda: STEP_LINE in log.read_bytes(), 60), log.read_text()
            yield proc
        finally:
            proc.kill()
            proc.wait()


def test_second_writer_is_refused_and_a_dead_holders_lock_is_taken_over(tmp_path):
    """Two `fit` processes on one run directory: the second gets a one-line error naming the first (pid,
    host) and writes nothing; after the first is killed -9, its lock is taken over and the run resumes."""
    run_dir = tmp_path / "run"
    with trainer(run_dir, tmp_path / "first.log") as first:
        metrics_before = (run_dir / "metrics.jsonl").read_bytes()
        second = run_cli(*fit_cmd(run_dir, "train.max_steps=100000", "train.ckpt_every=2")[3:])
        assert_one_line_error(second, f"{run_dir}: another process is training in this run directory",
                              f"pid {first.pid} on host {socket.gethostname()}")
        assert (run_dir / "metrics.jsonl").read_bytes().startswith(metrics_before)  # appended by the first only
        assert b"resume" not in (run_dir / "metrics.jsonl").read_bytes()
    assert f'"pid": {first.pid}' in (run_dir / "run.lock").read_text()  # the dead holder's lock is still there
    newest = latest_valid_checkpoint(run_dir)
    third = subprocess.run(fit_cmd(run_dir, f"train.max_steps={step_of(newest) + 1}", "train.ckpt_every=2"),
                           capture_output=True, cwd=ROOT, env=ENV, timeout=300)
    assert third.returncode == 0, third.stderr.decode()
    assert f"restored {newest.name}" in third.stdout.decode()
    assert (run_dir / "run.lock").read_text() == ""  # released at the end


def test_deleting_run_lock_admits_no_second_trainer(tmp_path):
    """After `rm run.lock` a second `fit` must not train in the same folder (checkpoints of both runs would mix,
    metrics.jsonl would hold two step-20 records): the lock is on the folder itself."""
    run_dir = tmp_path / "run"
    with trainer(run_dir, tmp_path / "first.log"):
        (run_dir / "run.lock").unlink()
        second = run_cli(*fit_cmd(run_dir, "train.max_steps=100000", "train.ckpt_every=2")[3:])
        assert_one_line_error(second, f"{run_dir}: another process is training in this run directory",
                              "run.lock was deleted")
        assert wait_until(lambda: len(list_checkpoints(run_dir)) >= 2, 120)
    steps = [r["step"] for r in read_metrics_raw(run_dir / "metrics.jsonl") if r["kind"] == "train"]
    assert steps == sorted(set(steps)), "two trainers wrote one log"
    assert b"resume" not in (run_dir / "metrics.jsonl").read_bytes()


def read_metrics_raw(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines() if line.endswith("}")]


# ------------------------------------------------------------------ 2. graceful stop
@pytest.mark.parametrize("signame", ["SIGINT", "SIGTERM"])
def test_signal_finishes_step_writes_checkpoint_and_exits_0(tmp_path, signame):
    run_dir = tmp_path / "run"
    log = tmp_path / "log"
    with open(log, "wb") as out:
        proc = subprocess.Popen(fit_cmd(run_dir, "train.max_steps=100000", "train.ckpt_every=1000"),
                                stdout=out, stderr=subprocess.STDOUT, cwd=ROOT, env=ENV)
        try:
            assert wait_until(lambda: STEP_LINE in log.read_bytes(), 60)
            proc.send_signal(getattr(signal, signame))
            proc.wait(timeout=300)
        finally:
            proc.kill()
            proc.wait()
    text = log.read_text()
    assert proc.returncode == 0, text
    match = re.search(rf"stopped by {signame} at step (\d+); to resume, run the same command again", text)
    assert match, text
    step = int(match.group(1))
    assert [step_of(p) for p in list_checkpoints(run_dir)] == [step]  # ckpt_every 1000: written by the stop
    load_checkpoint(list_checkpoints(run_dir)[-1])
    resumed = subprocess.run(fit_cmd(run_dir, f"train.max_steps={step + 1}", "train.ckpt_every=1000"),
                             capture_output=True, cwd=ROOT, env=ENV, timeout=300)
    assert resumed.returncode == 0 and f"restored ckpt_{step:08d}.safetensors" in resumed.stdout.decode()


def test_fit_restores_the_previous_signal_handlers(tmp_path):
    previous = {s: signal.getsignal(s) for s in (signal.SIGINT, signal.SIGTERM)}
    quiet_fit(tiny_config("train.max_steps=1"), tmp_path)
    assert {s: signal.getsignal(s) for s in previous} == previous


# ------------------------------------------------------------------ 3. numeric faults
def test_divergence_stops_with_step_and_parameter_and_keeps_last_good_checkpoint(tmp_path):
    run_dir = tmp_path / "run"
    result = subprocess.run(fit_cmd(run_dir, "train.max_steps=50", "train.lr_factor=1e30"),
                            capture_output=True, cwd=ROOT, env=ENV, timeout=300)
    line = assert_one_line_error(result, "training diverged", "first non-finite gradient in '", status=3)
    step = int(re.search(r"step (\d+): training diverged", line).group(1))
    assert 1 < step < 50
    checkpoints = list_checkpoints(run_dir)
    assert step_of(checkpoints[-1]) == step - 1  # nothing saved for the faulty step
    assert f"last good checkpoint is {checkpoints[-1].name}" in line
    for _, array in load_checkpoint(checkpoints[-1])[0].items():
        assert np.isfinite(array).all()


def flat_grad(*grads):
    """The gradients of parameters as the training loop hands them to the scaler: Adam's flat gather."""
    params = []
    for grad in grads:
        p = mt.nn.Parameter(np.zeros_like(grad))
        p.grad = np.asarray(grad, np.float32)
        params.append(p)
    return mt.optim.Adam(params).gather_grads()


@pytest.mark.filterwarnings("ignore::RuntimeWarning")  # inf + -inf in the finiteness sum is the point
def test_loss_scaler_skips_and_backs_off_on_inf_grads():
    scaler = DynamicLossScaler(init_scale=1024.0, growth_interval=3, max_consecutive_overflows=5)
    assert scaler.update(scaler.unscale_and_check(flat_grad(np.full(4, 2048.0))))
    bad = flat_grad(np.array([1.0, np.inf]), np.array([-np.inf]))
    assert not scaler.unscale_and_check(bad)
    assert not scaler.update(False)  # the step is skipped ...
    assert scaler.scale == 512.0 and scaler.skipped_steps == 1  # ... and the scale halved
    good = flat_grad(np.full(3, 512.0))
    assert scaler.update(scaler.unscale_and_check(good)) and scaler.consecutive_overflows == 0
    np.testing.assert_array_equal(good, np.ones(3, np.float32))  # unscaled by 512, in place


@pytest.mark.filterwarnings("ignore::RuntimeWarning")
def test_loss_scaler_aborts_after_k_consecutive_overflows():
    scaler = DynamicLossScaler(init_scale=4.0, max_consecutive_overflows=4, min_scale=1.0)
    for _ in range(3):
        assert not scaler.update(scaler.unscale_and_check(flat_grad(np.array([np.nan, 1.0]))))
    assert scaler.scale == 1.0  # floored at min_scale
    with pytest.raises(LossScaleOverflowError, match="4 steps in a row"):
        scaler.update(scaler.unscale_and_check(flat_grad(np.array([np.inf]))))


# ------------------------------------------------------------------ 4. unwritable run dir, disk full
def test_run_dir_under_a_file_is_a_clear_error_before_training(tmp_path):
    blocker = tmp_path / "some_file"
    blocker.write_text("x")
    result = run_cli(*fit_cmd(tmp_path / "some_file" / "run", "train.max_steps=2")[3:])
    assert_one_line_error(result, "some_file/run: cannot create the run directory")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["some_file"]


@pytest.mark.skipif(hasattr(os, "geteuid") and os.geteuid() == 0, reason="root ignores directory permissions")
def test_read_only_run_dir_is_a_clear_error(tmp_path):
    locked = tmp_path / "locked"
    locked.mkdir()
    locked.chmod(0o500)
    try:
        assert_one_line_error(run_cli(*fit_cmd(locked, "train.max_steps=2")[3:]), "not writable")
        assert_one_line_error(run_cli(*fit_cmd(locked / "run", "train.max_steps=2")[3:]), "cannot create")
    finally:
        locked.chmod(0o700)


class _DiskFullFile:
    """A file whose first write stops halfway with ENOSPC (part of the checkpoint reaches the disk)."""

    def __init__(self, file):
        self.file = file

    def write(self, data):
        self.file.write(bytes(data)[: len(data) // 2])  # half of it reaches the disk, then the disk is full
        raise OSError(errno.ENOSPC, "No space left on device")

    def __getattr__(self, name):
        return getattr(self.file, name)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.file.close()


@pytest.mark.parametrize("where", ["write", "rename"])
def test_disk_full_during_checkpoint_keeps_previous_newest(tmp_path, monkeypatch, where):
    saves = {"n": 0}  # two files per checkpoint (weights, optimizer state): the 5th write is checkpoint 3's
    real_open, real_replace = open, os.replace

    def full_open(path, mode="r", *args, **kwargs):
        file = real_open(path, mode, *args, **kwargs)
        if "w" in mode and ".safetensors.tmp-" in str(path):
            saves["n"] += 1
            if saves["n"] > 4:
                return _DiskFullFile(file)
        return file

    def full_replace(src, dst, *args, **kwargs):
        if ".safetensors.tmp-" in str(src):
            saves["n"] += 1
            if saves["n"] > 4:
                raise OSError(errno.ENOSPC, "No space left on device")
        return real_replace(src, dst, *args, **kwargs)

    if where == "write":
        monkeypatch.setattr(checkpoint_module, "open", full_open, raising=False)
    else:
        monkeypatch.setattr(os, "replace", full_replace)
    with pytest.raises(InputError, match=r"ckpt_00000003.safetensors: cannot write the checkpoint "
                                         r"\(No space left on device\); the newest good checkpoint is still "
                                         r"ckpt_00000002.safetensors"):
        quiet_fit(tiny_config("train.max_steps=6"), tmp_path)
    monkeypatch.undo()
    assert [p.name for p in list_checkpoints(tmp_path)] == ["ckpt_00000001.safetensors", "ckpt_00000002.safetensors"]
    assert not list(tmp_path.glob("*.tmp*")), "a partial file was left behind"
    assert latest_valid_checkpoint(tmp_path).name == "ckpt_00000002.safetensors"
    assert quiet_fit(tiny_config("train.max_steps=4"), tmp_path).progress.step == 4  # space is back: resumes


# ------------------------------------------------------------------ 5. bad input
@pytest.fixture(scope="module")
def tiny_run(tmp_path_factory):
    run_dir = tmp_path_factory.mktemp("tiny") / "run"
    quiet_fit(tiny_config("train.max_steps=3"), run_dir)
    return run_dir


def test_empty_and_too_long_lines_are_skipped_with_counts(tmp_path):
    words = [" ".join(f"w{(i * 7 + j) % 30}" for j in range(1 + i % 4)) for i in range(40)]
    src_lines = words[:10] + ["", words[10]] + words[11:20] + [" ".join(words)] + words[20:]
    tgt_lines = words[:10] + [words[0], ""] + words[11:20] + [words[1]] + words[20:]
    src, tgt, valid = tmp_path / "t.en", tmp_path / "t.de", tmp_path / "v.txt"
    src.write_text("\n".join(src_lines) + "\n")
    tgt.write_text("\n".join(tgt_lines) + "\n")
    valid.write_text("\n".join(words[:4]) + "\n")
    result = run_cli("fit", "--config", str(ROOT / "configs" / "demo.toml"), "--run-dir", str(tmp_path / "run"),
                     "--no-progress", "--set", "task.kind=files", "--set", f"task.train_src={src}",
                     "--set", f"task.train_tgt={tgt}", "--set", f"task.valid_src={valid}",
                     "--set", f"task.valid_tgt={valid}", "--set", "task.test_src=", "--set", "task.test_tgt=",
                     "--set", "task.max_len=20", "--set", "tokenizer.vocab_size=40",
                     *[arg for item in TINY[4:] + ["train.max_steps=1"] for arg in ("--set", item)])
    assert result.returncode == 0, result.stderr.decode()
    assert re.search(r"training pairs: 39 kept, 1 longer than 20 tokens dropped, 2 empty skipped",
                     result.stdout.decode()), result.stdout.decode()


@pytest.mark.parametrize("value", ["0", "-5"])
def test_fit_max_tokens_zero_or_negative(tmp_path, value):
    run_dir = tmp_path / "run"
    assert_one_line_error(run_cli(*fit_cmd(run_dir, f"train.max_tokens={value}")[3:]),
                          f"train.max_tokens must be positive, got {value}")
    assert not run_dir.exists()


@pytest.mark.parametrize("flag, value, message", [
    ("--beam", "0", "--beam must be at least 1, got 0"),
    ("--max-tokens", "0", "--max-tokens must be at least 1, got 0"),
    ("--max-tokens", "-3", "--max-tokens must be at least 1, got -3"),
    ("--threads", "0", "--threads must be at least 1, got 0"),
])
def test_translate_bad_decoding_options(tiny_run, flag, value, message):
    ckpt = list_checkpoints(tiny_run)[-1]
    assert_one_line_error(run_cli("translate", "--ckpt", str(ckpt), flag, value, stdin=b"one\n"), message)


def test_truncated_checkpoint_is_one_line_error_and_skipped_on_resume(tiny_run, tmp_path):
    run_dir = tmp_path / "copy"
    run_dir.mkdir()
    for path in tiny_run.iterdir():
        if path.is_file():
            (run_dir / path.name).write_bytes(path.read_bytes())
    newest = list_checkpoints(run_dir)[-1]
    newest.write_bytes(newest.read_bytes()[: newest.stat().st_size // 2])
    before = snapshot(run_dir)
    result = run_cli("translate", "--ckpt", str(newest), stdin=b"one\n")
    assert_one_line_error(result, newest.name)
    assert snapshot(run_dir) == before  # nothing overwritten
    previous = list_checkpoints(run_dir)[-2]
    with pytest.warns(UserWarning, match=f"skipping unusable checkpoint: {newest.name}"):
        assert latest_valid_checkpoint(run_dir) == previous


@settings(max_examples=40, deadline=None)
@given(st.sampled_from(["train.max_tokens", "train.collective_timeout_s", "train.max_steps", "train.ckpt_every",
                        "train.keep_last", "decode.beam", "decode.max_tokens", "model.d_model"]),
       st.integers(max_value=0))
def test_non_positive_sizes_are_input_errors(key, value):
    with pytest.raises(InputError, match=f"{re.escape(key)} must be positive"):
        config_lib.apply_overrides(RunConfig(), [f"{key}={value}"])


@pytest.fixture(scope="module")
def checkpoint_bytes(tiny_run):
    return list_checkpoints(tiny_run)[-1].read_bytes()


@settings(max_examples=40, deadline=None)
@given(st.data())
def test_any_truncation_or_flipped_tensor_byte_is_a_checkpoint_error(tmp_path_factory, checkpoint_bytes, data):
    path = tmp_path_factory.mktemp("bad") / "ckpt.safetensors"
    if data.draw(st.booleans(), label="truncate"):
        cut = data.draw(st.integers(0, len(checkpoint_bytes) - 1), label="cut")
        path.write_bytes(checkpoint_bytes[:cut])
    else:  # a flipped bit in the tensor bytes (the header is JSON: see docs/faults.md)
        start = 8 + int.from_bytes(checkpoint_bytes[:8], "little")
        at = data.draw(st.integers(start, len(checkpoint_bytes) - 1), label="at")
        bit = data.draw(st.integers(0, 7), label="bit")
        flipped = bytearray(checkpoint_bytes)
        flipped[at] ^= 1 << bit
        path.write_bytes(bytes(flipped))
    with pytest.raises(CheckpointError, match="ckpt.safetensors"):
        load_checkpoint(path)


# ------------------------------------------------------------------ 6. safety
def test_no_pickle_or_eval_in_packages():
    forbidden = re.compile(r"\bimport\s+(c?pickle|dill|marshal)\b|\bfrom\s+(c?pickle|dill|marshal)\b|"
                           r"\bpickle\.|allow_pickle\s*=\s*True|(?<![\w.])(?<!def )(eval|exec)\s*\(")
    hits = [f"{path.relative_to(ROOT)}:{n}: {line.strip()}"
            for package in ("minitensor", "transformer", "train") for path in sorted((ROOT / package).rglob("*.py"))
            for n, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1) if forbidden.search(line)]
    assert not hits, "\n".join(hits)
