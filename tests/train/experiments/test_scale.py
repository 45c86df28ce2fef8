"""`python -m train scale`: the parameter count, the model's terms in closed form, its check against published runs."""
import json

import numpy as np
import pytest

from cli_helpers import assert_one_line_error, run_cli
from train.__main__ import main
from train.experiments import batch_work, scale_report, scale_validation
from train.experiments.scale import (GRAD_BYTES, LINKS, NCCL_OF_NETWORK, NCCL_OF_NVLINK, NVLINK_GBPS, Link, across_nodes, allreduce_time,
                                     bucket_sizes, embedding_bytes, parameter_count, project, straggler)
from train.run.metrics import PEAK_TFLOPS, train_flops
from transformer import Transformer, TransformerConfig

NEWSTEST = batch_work.newstest_lengths()
needs_newstest = pytest.mark.skipif(NEWSTEST is None, reason="needs ../shared/data/wmt_newstest (WMT sentence lengths)")


@pytest.mark.parametrize("changes", [{}, {"norm": "pre"}, {"tie_embeddings": False}, {"positional": "learned"},
                                     {"d_k": 3, "d_v": 5}])
def test_parameter_count_matches_the_model(changes):
    config = TransformerConfig(vocab_size=23, N=2, d_model=8, d_ff=12, h=2, max_len=16, **changes)
    assert parameter_count(config) == Transformer(config, np.random.default_rng(0)).num_parameters()


def test_ring_allreduce_and_latency_per_bucket_follow_the_formulas():
    link = Link("test", bus_gbps=100.0, latency_us=0.0)
    # 2(n−1)/n · bytes / busbw: n = 2 moves each byte once, n = 4 one and a half times
    assert allreduce_time(2, 1e9, link, 1) == pytest.approx(0.010)
    assert allreduce_time(4, 1e9, link, 1) == pytest.approx(0.015)
    assert allreduce_time(1, 1e9, link, 1) == 0.0
    measured_at_2 = Link("x", 100.0, 50.0, at_ranks=2)          # 2 hops at 2 ranks, 14 at 8: 7 × the latency
    assert allreduce_time(2, 1e9, measured_at_2, 4) == pytest.approx(0.010 + 4 * 50e-6)
    assert allreduce_time(8, 1e9, measured_at_2, 4) == pytest.approx(0.0175 + 4 * 7 * 50e-6)


def test_only_the_measured_overlap_hides_the_allreduce_and_never_the_last_bucket():
    link = Link("test", bus_gbps=100.0, latency_us=0.0)
    none = project(step_s=0.3, grad_bytes=1e9, link=link, bucket_mb=250.0)           # 4 buckets, overlap 0
    assert none[0]["efficiency"] == 1.0 and none[0]["allreduce_ms"] == 0.0
    assert none[1]["step_ms"] == pytest.approx(310.0) == none[1]["step_no_overlap_ms"]
    half = project(step_s=0.3, grad_bytes=1e9, link=link, bucket_mb=250.0, overlap=0.5)[1]
    assert half["step_ms"] == pytest.approx(305.0)
    full = project(step_s=0.3, grad_bytes=1e9, link=link, bucket_mb=250.0, overlap=1.0)[1]
    assert full["step_ms"] == pytest.approx(302.5)                                    # the last 250 MB bucket: 2.5 ms
    rows = project(step_s=0.3, grad_bytes=1e9, link=link, bucket_mb=250.0)
    assert [r["efficiency"] for r in rows] == sorted((r["efficiency"] for r in rows), reverse=True)


def test_the_straggler_is_the_expected_slowest_rank():
    assert straggler(np.ones(10), 8) == 1.0 and straggler(None, 8) == 1.0
    two_kinds = np.array([0.5, 1.5])              # E[max of 2] = 1/4 · 0.5 + 3/4 · 1.5 = 1.25, mean 1
    assert straggler(two_kinds, 2) == pytest.approx(1.25, abs=0.01)
    assert straggler(two_kinds, 8) == pytest.approx(1.5 - 0.5 ** 8, abs=0.01)
    assert straggler(two_kinds, 8, accum=4) < straggler(two_kinds, 8)   # sums of 4 vary less: the wait shrinks
    rows = project(0.1, 1e6, Link("t", 100.0, 0.0), work=two_kinds)
    assert rows[1]["step_ms"] == pytest.approx(100 * straggler(two_kinds, 2) + 2 * 0.5 * 1e6 / 100e9 * 1e3)


@needs_newstest
def test_batches_of_one_budget_differ_in_work_and_fairseqs_more_than_ours():
    src, tgt = NEWSTEST
    config = TransformerConfig.big().replace(vocab_size=33_712)
    fairseq = batch_work.fairseq_batches(src, tgt, 10_240)
    assert all(len(b) * (-(-max(src[b].max(), tgt[b].max()) // 8) * 8) <= 10_240 for b in fairseq)
    ours = batch_work.our_batches(src, tgt, 10_240)
    theirs, mine = batch_work.batch_work(fairseq, src, tgt, config, pad=8), batch_work.batch_work(ours, src, tgt, config)
    assert theirs.mean() == pytest.approx(1.0) and mine.mean() == pytest.approx(1.0)
    assert theirs.std() > 5 * mine.std()         # sorting by source length leaves the target side ragged


# The model's open miss, named: NVIDIA's 2022 DGX-1 mixed-precision rows scale worse than predicted (+4.7, +4.8).
# Every DGX-1 row lacks a few ms a step (2022: 6.5-7.8 ms; 2020: 3.3-5.2 ms, with fp16 and fp32 gradients alike),
# so it is not the link's bandwidth; its cause is not found.
KNOWN_MISSES = {("DGX-1 V100, AMP, 5,120 tokens a GPU", 4), ("DGX-1 V100, AMP, 5,120 tokens a GPU", 8)}


def test_a_pair_longer_than_the_budget_is_left_out_of_the_batches_not_an_error():
    """A small --batch on real sentence lengths: the pairs no batch of that budget can hold are left out (as
    task.max_len leaves them out of a run), and the batches still index the full arrays."""
    src, tgt = np.array([5, 40, 6, 7, 5, 6, 8, 5, 90, 6]), np.array([6, 4, 5, 7, 6, 5, 7, 6, 9, 120])
    batches = batch_work.our_batches(src, tgt, 16)
    taken = np.concatenate(batches)
    assert not {1, 8, 9} & set(taken.tolist())
    assert all(max(src[b].max(), tgt[b].max()) * len(b) <= 16 for b in batches)
    assert set(taken.tolist()) <= {0, 2, 3, 4, 5, 6, 7}


def test_the_model_meets_the_published_table_it_was_not_fitted_on():
    """Held-out MAE <= 2 points, no held-out row off by more than 4 (but the named misses, by at most 5), errors
    of both signs; the 2019 rows the model covers within 5; one fit row, whose prediction is its published value."""
    v = scale_validation.validate()
    fit = [r for r in v["rows"] if r["role"] == "fit"]
    assert [(r["setup"], r["gpus"]) for r in fit] == [scale_validation.FIT_ROW]
    assert fit[0]["predicted"] == pytest.approx(fit[0]["published"], abs=1e-9)
    held_out = [r for r in v["rows"] if r["role"] == "held-out" and r["covered"]]
    errors = {(r["setup"], r["gpus"]): 100 * (r["predicted"] - r["published"]) for r in held_out}
    assert len(errors) == 29 and v["held_out_mae"] == pytest.approx(np.mean(np.abs(list(errors.values()))))
    assert v["held_out_mae"] <= 2.0, errors
    assert min(errors.values()) < 0 < max(errors.values())
    for key, error in errors.items():
        assert abs(error) <= (5.0 if key in KNOWN_MISSES else 4.0), (key, error)
        if key[0].startswith("2019"):
            assert abs(error) <= 5.0, (key, error)
    assert all(r["why"] for r in v["rows"] if not r["covered"])
    assert v["straggler_scale"] == pytest.approx(1.84, abs=0.01)        # λ, from the fit row alone


def test_the_table_is_the_published_numbers_with_their_sources():
    rows = {(r["setup"], r["gpus"]): r for r in scale_validation.validate()["rows"]}
    assert rows[("DGX A100, AMP, 10,240 tokens a GPU", 8)]["published"] == pytest.approx(551_599 / 8 / 82_059)
    assert rows[("DGX-2 V100, AMP, 10,240 tokens a GPU", 16)]["published"] == pytest.approx(0.810, abs=5e-4)
    assert rows[("2019 DGX-1 V100, fp16, 2,560 tokens a GPU", 8)]["published"] == pytest.approx(0.978, abs=5e-4)
    for row in rows.values():
        assert any(commit in row["source"] for commit in ("d666f14553125df590224ac11f12ba43fffbf1dc",
                                                          "2de29455a696b5608e24daa95f579f689b2d59e1",
                                                          "0053b4b88862846fa74df947282a079898d09125")), row
    assert sum(r["role"] == "fit" for r in rows.values()) <= 2
    # the 2022 trainer's --amp is torch.cuda.amp over fp32 parameters: every 2022 row all-reduces fp32 gradients;
    # the 2020 trainer's is apex AMP O2, an fp16 model: its mixed-precision rows all-reduce fp16 gradients
    assert {s.grad_bytes for s in scale_validation.TABLE if "d666f14553125df590224ac11f12ba43fffbf1dc" in s.source} == {4}
    assert all(s.grad_bytes == (2 if "AMP" in s.name else 4) for s in scale_validation.TABLE
               if "2de29455a696b5608e24daa95f579f689b2d59e1" in s.source)
    assert rows[("2020 DGX-1 V100, AMP O2, 5,120 tokens a GPU", 8)]["published"] == pytest.approx(223_245 / 8 / 33_468)


@needs_newstest
def test_the_stored_newstest_inputs_are_what_batch_work_computes():
    """TARGET_TOKENS and STRAGGLER let the table run without ../shared/data; they must stay batch_work's numbers."""
    src, tgt = NEWSTEST
    for budget, tokens in scale_validation.TARGET_TOKENS.items():
        batches = batch_work.fairseq_batches(src, tgt, budget)
        assert batch_work.mean_target_tokens(batches, tgt) == pytest.approx(tokens, abs=0.1)
        work = batch_work.batch_work(batches, src, tgt, scale_validation.MODEL, pad=8)
        for n, value in scale_validation.STRAGGLER[budget].items():
            assert straggler(work, n) == pytest.approx(value, abs=1e-4), (budget, n)


def test_the_last_bucket_holds_the_tied_embedding_and_the_network_caps_the_ring():
    config = TransformerConfig.big()
    assert embedding_bytes(config) == 37_000 * 1024 * GRAD_BYTES
    assert embedding_bytes(config.replace(tie_embeddings=False)) == 0.0
    assert bucket_sizes(100e6, 25.0) == (4, pytest.approx(25e6))
    assert bucket_sizes(100e6, 25.0, last_at_least=60e6) == (4, 60e6)
    link = Link("test", bus_gbps=100.0, latency_us=0.0)
    hidden = project(0.3, 1e9, link, bucket_mb=250.0, overlap=1.0, last_bucket_at_least=500e6)[1]
    assert hidden["exposed_ms"] == pytest.approx(5.0)                  # the 500 MB embedding bucket, 2 ranks
    assert across_nodes(link, 400.0).bus_gbps == 100.0 and across_nodes(link, 50.0).bus_gbps == pytest.approx(
        50.0 * NCCL_OF_NETWORK)
    rows = project(0.3, 1e9, link, bucket_mb=0.0, devices=[8, 16], gpus_per_node=8, network_gbps=50.0)
    assert rows[0]["allreduce_ms"] == pytest.approx(2 * 7 / 8 * 1e9 / 100e9 * 1e3)
    assert rows[1]["allreduce_ms"] == pytest.approx(2 * 15 / 16 * 1e9 / (50e9 * NCCL_OF_NETWORK) * 1e3)


def test_every_gpu_has_nvlink_and_a_datasheet_peak(capsys):
    assert set(NVLINK_GBPS) == {"A100", "H100", "H200", "V100"}                   # the --gpu choices
    assert all(key in PEAK_TFLOPS for key in NVLINK_GBPS)
    with pytest.raises(SystemExit):
        main(["scale", "--gpu", "B200"])
    capsys.readouterr()


def test_scale_command_projects_a_given_step_and_prints_its_validation(capsys):
    assert main(["scale", "--preset", "base", "--step-ms", "176", "--link", "nvlink4", "--link", "30", "--json"]) == 0
    result = json.loads(capsys.readouterr().out)
    assert result["tgt_tokens_per_device"] == 25_000 and result["parameters"] == parameter_count(TransformerConfig())
    eight = result["links"]["nvlink4"]["rows"][7]
    assert eight["devices"] == 8 and eight["efficiency"] < 1.0 and result["links"]["nvlink4"]["overlap"] == 0.0
    assert result["links"]["30"]["rows"][7]["efficiency"] < eight["efficiency"]
    base = result["paper_runs"]["base"]
    assert base["tokens_per_device"] == 3125                      # §5.1's update over 8 GPUs
    assert base["hours"]["nvlink4"] == pytest.approx(
        100_000 * base["step_1_device_ms"] / base["efficiency"]["nvlink4"] / 3.6e6)
    assert main(["scale", "--preset", "base", "--step-ms", "176", "--link", "nvlink4"]) == 0
    report = capsys.readouterr().out
    assert f"held-out error ±{scale_validation.validate()['held_out_mae']:.1f} points on 29 published rows" in report
    assert main(["scale", "--link", "infiniband"]) == 2
    assert "--link must be one of nvlink3, nvlink4, pcie5" in capsys.readouterr().err
    assert main(["scale", "--overlap", "1.5"]) == 2
    assert main(["scale", "--overlap", "sometimes"]) == 2
    assert main(["scale", "--network", "carrier-pigeon"]) == 2
    assert main(["scale", "--batch", "10", "--tokens-per-gpu", "3000"]) == 2


def test_scale_with_the_flops_straggler_projects_as_before_the_fitted_scale(capsys):
    """Defaults keep today's setup: λ = 1, no overlap gives project()'s rows with the old arguments exactly."""
    assert main(["scale", "--preset", "base", "--step-ms", "176", "--link", "nvlink4", "--straggler-scale", "1",
                 "--json"]) == 0
    rows = json.loads(capsys.readouterr().out)["links"]["nvlink4"]["rows"]
    work = scale_report._work(TransformerConfig(), 25_000, NEWSTEST)
    assert rows == project(0.176, parameter_count(TransformerConfig()) * GRAD_BYTES, LINKS["nvlink4"], 25.0, 1, work, 0.0)


def test_scale_expresses_a_setup_of_nodes_of_gpus(capsys):
    assert main(["scale", "--preset", "base", "--step-ms", "176", "--gpu", "H100", "--overlap", "on", "--nodes", "2",
                 "--json"]) == 0
    result = json.loads(capsys.readouterr().out)
    link = result["links"]["H100"]
    assert link["bus_gbps"] == pytest.approx(370.0) and link["overlap"] == 1.0
    assert [row["devices"] for row in link["rows"]] == [1, 2, 3, 4, 5, 6, 7, 8, 16]
    assert result["paper_runs"]["base"]["devices"] == 16 and result["paper_runs"]["base"]["tokens_per_device"] == 1562.5
    assert result["setup"]["precision"] == "fp16" and result["setup"]["mfu"] == pytest.approx(
        train_flops(TransformerConfig(), 25_000, 25_000, 100, 100) / 0.176 / 989e12)
    assert result["validation"]["held_out_rows"] == 29


def test_scale_validate_prints_the_table_and_its_json(capsys):
    assert main(["scale", "--validate", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert set(out) == {"rows", "held_out_mae"} and out["held_out_mae"] <= 2.0
    assert {"setup", "gpus", "published", "predicted", "role", "source"} <= set(out["rows"][0])
    assert {r["role"] for r in out["rows"]} == {"fit", "held-out"}
    assert main(["scale", "--validate"]) == 0
    text = capsys.readouterr().out
    assert f"held-out mean absolute error: {out['held_out_mae']:.1f} points" in text and "not covered" in text


def test_scale_refuses_zero_timed_steps():
    """`scale --steps 0` measured no step and divided by zero (a traceback)."""
    assert_one_line_error(run_cli("scale", "--steps", "0"), "--steps must be at least 1")
