"""benchmarks/step_vs_pytorch_interleaved.py: both steps timed in turn, with each side's breakdown (needs torch)."""
import json
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("torch")

ROOT = Path(__file__).resolve().parents[2]


def test_interleaved_rounds_time_both_sides_and_break_them_down():
    done = subprocess.run([sys.executable, "benchmarks/step_vs_pytorch_interleaved.py", "--rounds", "2", "--steps", "1",
                           "--profile", "--json"], capture_output=True, text=True, cwd=ROOT, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    report = json.loads(done.stdout.strip().splitlines()[-1])
    assert report["preset"] == "multi30k_cpu" and report["threads"] == 1
    assert len(report["ours_ms_rounds"]) == len(report["pytorch_ms_rounds"]) == 2
    assert report["ratio_ours_over_pytorch"] == pytest.approx(report["ours_ms"] / report["pytorch_ms"])
    assert report["ours_op_ms"]["Linear.forward"] > 0 and any("mm" in k for k in report["pytorch_op_ms"])
