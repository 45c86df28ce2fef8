"""`python -m train bench --decode`: both systems decode the same sentences; the report says how they compare."""
import json

import numpy as np
import pytest

from transformer import Transformer, TransformerConfig

from cli_helpers import run_cli

pytest.importorskip("ctranslate2")
from train.experiments import decode_bench  # noqa: E402


def test_bench_model_times_both_and_counts_equal_greedy_outputs(words_tokenizer):
    config = TransformerConfig.tiny(vocab_size=words_tokenizer.vocab_size, d_model=16, d_ff=32, h=2, max_len=64)
    model = Transformer(config, np.random.default_rng(0), backend="cpu")
    lines = [" ".join(f"w{(7 * i + j) % 200}" for j in range(1 + i % 5)) for i in range(12)]
    result = decode_bench.bench_model("tiny", model, words_tokenizer, lines, sentences=10, repeats=2, threads=1,
                                      say=lambda message: None)
    assert result["sentences"] == 10 and result["threads"] == 1 and result["ct2_use_mkl"]
    for key in ("greedy", "beam4"):
        entry = result[key]
        assert entry["ours_wall_s"] > 0 and entry["ct2_wall_s"] > 0 and entry["ratio_cpu"] > 0
        assert entry["ratio_wall_range"][0] <= entry["ratio_wall_range"][1]
        assert 0 < entry["ours_positions"] <= entry["ct2_positions"], "CTranslate2 runs each batch to its limit"
        assert entry["ct2_wall_s"] <= max(entry["ct2_wall_s_by_layout"].values()), "the faster layout each repeat"
        assert entry["ratio_wall_per_position"] == pytest.approx(
            entry["ratio_wall"] * entry["ct2_positions"] / entry["ours_positions"])
    assert result["greedy"]["same_outputs"] == 10, "an untrained model decodes to its limit in both, token for token"
    assert "greedy" in decode_bench.format_report([result])


def test_missing_demo_run_is_skipped_with_the_reason(tmp_path):
    done = run_cli("bench", "--decode", "--models", "demo", "--demo-dir", str(tmp_path / "none"), "--json")
    assert done.returncode == 0, done.stderr.decode()
    assert json.loads(done.stdout)[0]["skipped"].startswith(f"no trained demo in {tmp_path / 'none'}")
    assert run_cli("bench", "--decode", "--models", "demo,big").returncode == 2
