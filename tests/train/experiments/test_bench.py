"""`python -m train bench` runs a real step and prints the tracked JSON fields."""
import json
import subprocess
import sys
from pathlib import Path

import pytest

import minitensor as mt
from cli_helpers import assert_one_line_error, run_cli

ROOT = Path(__file__).resolve().parents[3]


def test_bench_cli_json_has_tracked_fields():
    done = subprocess.run([sys.executable, "-m", "train", "bench", "--backend", "cpu", "--steps", "1",
                           "--warmup", "0", "--batch", "4", "--no-peer", "--json"],
                          capture_output=True, text=True, cwd=ROOT, timeout=300)
    assert done.returncode == 0, done.stderr
    result = json.loads(done.stdout.strip().splitlines()[-1])
    for key in ("step_ms", "tgt_tok_s", "peak_mem_bytes", "first_step_s", "op_ms", "launches_per_step",
                "syncs_per_step", "warmup_steps", "mfu"):
        assert key in result, key
    assert result["step_ms"] > 0 and result["tgt_tok_s"] > 0
    assert 0 < result["launches_per_step"] < 1000 and result["syncs_per_step"] == 1   # the cpu preset: 3+3 layers
    assert result["op_ms"]["Linear.forward"] > 0          # the per-op breakdown saw the model's layers


def test_bench_refuses_mixed_precision_on_cpu():
    done = subprocess.run([sys.executable, "-m", "train", "bench", "--backend", "cpu", "--precision", "fp16",
                           "--no-peer"], capture_output=True, text=True, cwd=ROOT, timeout=300)
    assert done.returncode == 2 and "error:" in done.stderr and "Traceback" not in done.stderr


@pytest.mark.skipif(mt.available("cuda"), reason="a GPU is here")
def test_bench_on_a_missing_backend_is_one_line():
    """`bench --backend cuda` without a GPU: one error line, as `fit` says it, not a traceback."""
    assert_one_line_error(run_cli("bench", "--backend", "cuda", "--no-peer"), "--backend cuda is not available here")


@pytest.mark.parametrize("option", [["--steps", "0"], ["--steps", "-2"], ["--warmup", "-1"], ["--batch", "-4"]])
def test_bench_refuses_counts_that_time_nothing(option):
    """--steps 0 would divide by zero (a traceback); a negative --warmup or --batch is not taken silently."""
    assert_one_line_error(run_cli("bench", "--no-peer", *option), f"{option[0]} must be")
