"""`python -m train scale`: the parameter count, the ring all-reduce model with and without overlap, the CLI."""
import json

import numpy as np
import pytest

from train.__main__ import main
from train.experiments.scale import Link, allreduce_time, parameter_count, project
from transformer import Transformer, TransformerConfig


@pytest.mark.parametrize("changes", [{}, {"norm": "pre"}, {"tie_embeddings": False}, {"positional": "learned"},
                                     {"d_k": 3, "d_v": 5}])
def test_parameter_count_matches_the_model(changes):
    config = TransformerConfig(vocab_size=23, N=2, d_model=8, d_ff=12, h=2, max_len=16, **changes)
    assert parameter_count(config) == Transformer(config, np.random.default_rng(0)).num_parameters()


def test_ring_allreduce_and_overlap_follow_the_formulas():
    link = Link("test", bus_gbps=100.0, latency_us=0.0)
    # 2(n−1)/n · bytes / busbw: n = 2 moves each byte once, n = 4 one and a half times
    assert allreduce_time(2, 1e9, link, 1) == pytest.approx(0.010)
    assert allreduce_time(4, 1e9, link, 1) == pytest.approx(0.015)
    assert allreduce_time(1, 1e9, link, 1) == 0.0
    assert allreduce_time(2, 1e9, Link("x", 100.0, 50.0), 4) == pytest.approx(0.010 + 4 * 50e-6)
    rows = project(step_s=0.3, grad_bytes=1e9, link=link, bucket_mb=250.0)          # 4 buckets of 250 MB
    assert rows[0]["efficiency"] == 1.0 and rows[0]["allreduce_ms"] == 0.0
    two = rows[1]
    assert two["step_no_overlap_ms"] == pytest.approx(310.0)
    # backward of the micro-batch (0.2 s) hides all but the last bucket: 2.5 ms of it stays exposed
    assert two["step_ms"] == pytest.approx(302.5)
    assert [r["efficiency"] for r in rows] == sorted((r["efficiency"] for r in rows), reverse=True)
    slow = project(step_s=0.003, grad_bytes=1e9, link=link, bucket_mb=250.0)[1]      # backward too short to hide it
    assert slow["step_ms"] == pytest.approx(3.0 + 10.0 - 2.0)
    none = project(step_s=0.3, grad_bytes=1e9, link=link, bucket_mb=0.0)[1]          # no buckets: nothing hides
    assert none["step_ms"] == pytest.approx(310.0)


def test_scale_command_projects_a_given_step(capsys):
    assert main(["scale", "--preset", "base", "--step-ms", "176", "--link", "nvlink4", "--link", "30", "--json"]) == 0
    result = json.loads(capsys.readouterr().out)
    assert result["tgt_tokens_per_device"] == 25_000 and result["parameters"] == parameter_count(TransformerConfig())
    eight = result["links"]["nvlink4"]["rows"][7]
    assert eight["devices"] == 8 and eight["efficiency"] >= 0.9
    assert result["links"]["30"]["rows"][7]["efficiency_no_overlap"] < eight["efficiency_no_overlap"]
    base = result["paper_runs"]["base"]
    assert base["hours_8_devices"]["nvlink4"] == pytest.approx(100_000 * eight["step_ms"] / 3.6e6)
    assert main(["scale", "--link", "infiniband"]) == 2
    assert "--link must be one of nvlink4, pcie5" in capsys.readouterr().err
