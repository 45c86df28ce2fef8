"""Beam size and α chosen on a dev set (§6.1), stored with the run, and used by the next decoding."""

import json
import warnings
from pathlib import Path

import numpy as np
import pytest

from cli_helpers import assert_one_line_error, run_cli
from train import commands
from train.__main__ import build_parser
from train.experiments import tune_decoding as tuning
from train.run.manifest import Manifest
from transformer.checkpoint import save_model
from transformer.config import TransformerConfig
from transformer.model import Transformer

REFS = ["a b c d e f g h", "i j k l m n o p", "q r s t u v w x"]


def _cut(n: int) -> list[str]:
    """The references with each line cut to its first n words: shorter outputs, the brevity penalty's case."""
    return [" ".join(ref.split()[:n]) for ref in REFS]


def test_the_grid_best_is_chosen_and_the_brevity_penalty_is_reported():
    # each setting's outputs: longer with a larger α, as a small model's are
    outputs = {(1, None): _cut(6), (4, 0.0): _cut(3), (4, 0.6): _cut(4), (4, 1.5): _cut(8), (4, 2.0): _cut(7)}
    rows = tuning.tune(lambda beam, alpha: outputs[beam, alpha], REFS, list(outputs), say=lambda line: None)
    chosen = tuning.best(rows)
    assert (chosen.beam, chosen.alpha) == (4, 1.5)
    assert chosen.bleu == pytest.approx(100.0) and chosen.brevity_penalty == pytest.approx(1.0)
    short = next(r for r in rows if r.alpha == 0.0)
    assert short.length_ratio == pytest.approx(3 / 8) and short.brevity_penalty < 0.2
    assert max(rows, key=lambda r: r.bleu) is chosen


def test_a_tie_goes_to_the_cheaper_search():
    rows = [tuning.GridPoint(1, None, 30.0, 1.0, 1.0), tuning.GridPoint(4, 1.0, 30.0, 1.0, 1.0),
            tuning.GridPoint(4, 0.6, 30.0, 1.0, 1.0)]
    assert tuning.best(rows).beam == 1
    assert tuning.best(rows[1:]).alpha == 0.6


def test_the_grid_starts_with_greedy_and_refuses_nonsense():
    assert tuning.grid([4, 8], [1.0, 0.6]) == [(1, None), (4, 0.6), (4, 1.0), (8, 0.6), (8, 1.0)]
    with pytest.raises(Exception, match="α values 0 or more"):
        tuning.grid([4], [-1.0])


@pytest.fixture
def run_dir(tmp_path):
    """A run directory (manifest, tokenizer, one untrained checkpoint) and a three-line dev set."""
    from train.data.tokenizer import Tokenizer

    folder = tmp_path / "run"
    folder.mkdir()
    Manifest.create(folder)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        tokenizer = Tokenizer.train([" ".join(f"w{i}" for i in range(200))] * 5, folder / "tokenizer", vocab_size=40)
    config = TransformerConfig.tiny(vocab_size=tokenizer.vocab_size, N=1, d_model=16, d_ff=16, h=2)
    save_model(folder / "ckpt_00000001.safetensors", Transformer(config, np.random.default_rng(0)),
               metadata={"tokenizer_hash": tokenizer.model_hash})
    (tmp_path / "dev.src").write_text("w1 w2 w3 w4 w5 w6\nw7 w8 w9 w10 w11\nw12 w13 w14 w15 w16 w17 w18\n")
    (tmp_path / "dev.ref").write_text("w1 w2 w3 w4 w5 w6\nw7 w8 w9 w10 w11\nw12 w13 w14 w15 w16 w17 w18\n")
    return folder


def test_the_run_then_decodes_with_the_tuned_choice(run_dir, monkeypatch):
    """tune-decoding stores the dev set's best (beam 4, α 1.5 here) with the run; evaluate and translate on
    a checkpoint of that run then decode with it, and an explicit --beam/--alpha still wins."""
    ckpt, dev = run_dir / "ckpt_00000001.safetensors", run_dir.parent
    refs = (dev / "dev.ref").read_text().splitlines()

    def decode_by_alpha(model, tokenizer, sources, beam, alpha, **options):  # α 1.5 alone gives the references
        return refs if (beam, alpha) == (4, 1.5) else [" ".join(line.split()[:4]) for line in refs]
    monkeypatch.setattr("train.experiments.tune_decoding.translate_lines", decode_by_alpha)
    args = build_parser().parse_args(["tune-decoding", "--ckpt", str(ckpt), "--src", str(dev / "dev.src"),
                                      "--ref", str(dev / "dev.ref"), "--alphas", "0,0.6,1.5,2"])
    assert commands.tune_decoding(args) == 0
    stored = json.loads((run_dir / "decoding.json").read_text())
    assert (stored["beam"], stored["alpha"]) == (4, 1.5)
    assert [(row["beam"], row["alpha"]) for row in stored["grid"]] == [(1, None), (4, 0.0), (4, 0.6), (4, 1.5),
                                                                       (4, 2.0)]
    assert Manifest.load(run_dir).owns("decoding.json")

    used = []
    monkeypatch.setattr("train.evaluate.translate.translate_in_chunks",
                        lambda model, tokenizer, lines, write, **options: used.append(options) or refs)
    for argv in (["evaluate", "--ckpt", str(ckpt), "--src", str(dev / "dev.src"), "--ref", str(dev / "dev.ref")],
                 ["translate", "--ckpt", str(ckpt), "--input", str(dev / "dev.src"), "--output", str(dev / "out")],
                 ["evaluate", "--ckpt", str(ckpt), "--src", str(dev / "dev.src"), "--ref", str(dev / "dev.ref"),
                  "--beam", "2"],
                 ["evaluate", "--ckpt", str(ckpt), "--src", str(dev / "dev.src"), "--ref", str(dev / "dev.ref"),
                  "--beam", "5", "--alpha", "0.6"]):
        args = build_parser().parse_args(argv)
        assert getattr(commands, args.command)(args) == 0
    assert [(o["beam"], o["alpha"]) for o in used] == [(4, 1.5), (4, 1.5), (2, 1.5), (5, 0.6)]


def test_without_a_tuned_choice_the_paper_defaults_hold(run_dir):
    assert tuning.resolve(run_dir / "ckpt_00000001.safetensors", None, None) == (4, 0.6, "default")
    assert tuning.resolve(run_dir / "ckpt_00000001.safetensors", 1, 0.0) == (1, 0.0, "given")
    assert tuning.resolve(run_dir / "ckpt_00000001.safetensors", None, None, {"beam": 21, "alpha": 0.3})[:2] == (21, 0.3)


def test_a_decoding_file_the_user_wrote_is_neither_used_nor_overwritten(run_dir):
    """decoding.json counts only when the run's manifest says tune-decoding wrote it."""
    (run_dir / "decoding.json").write_text('{"beam": 9, "alpha": 3.0}\n')
    assert tuning.resolve(run_dir / "ckpt_00000001.safetensors", None, None)[:2] == (4, 0.6)
    with pytest.raises(Exception, match="did not write it"):
        tuning.save_choice(run_dir / "ckpt_00000001.safetensors", {"beam": 4, "alpha": 1.0})
    assert json.loads((run_dir / "decoding.json").read_text())["beam"] == 9


def test_tune_decoding_end_to_end_on_a_real_model(run_dir):
    """The real searches on an untrained model: the grid is printed, the choice stored, and translate says
    it decodes with it."""
    dev = run_dir.parent
    result = run_cli("tune-decoding", "--ckpt", str(run_dir / "ckpt_00000001.safetensors"), "--src",
                     str(dev / "dev.src"), "--ref", str(dev / "dev.ref"), "--alphas", "0.6,1.5", "--max-len-b", "5")
    out = result.stdout.decode()
    assert result.returncode == 0, result.stderr.decode()
    assert "greedy" in out and "beam 4, α 0.6" in out and "beam 4, α 1.5" in out and "best on dev" in out
    stored = json.loads((run_dir / "decoding.json").read_text())
    result = run_cli("translate", "--ckpt", str(run_dir / "ckpt_00000001.safetensors"), "--max-len-b", "5",
                     stdin=b"w1 w2\n")
    assert result.returncode == 0, result.stderr.decode()
    assert f"decoding: beam {stored['beam']}, α {stored['alpha']:g} (tuned on dev" in result.stderr.decode()


def test_bad_grids_are_one_line_errors(run_dir):
    dev = run_dir.parent
    result = run_cli("tune-decoding", "--ckpt", str(run_dir / "ckpt_00000001.safetensors"), "--src",
                     str(dev / "dev.src"), "--ref", str(dev / "dev.ref"), "--alphas", "-1")
    assert_one_line_error(result, "α values 0 or more")
    result = run_cli("evaluate", "--ckpt", str(run_dir / "ckpt_00000001.safetensors"), "--src",
                     str(dev / "dev.src"), "--ref", str(dev / "dev.ref"), "--alpha", "-0.5")
    assert_one_line_error(result, "--alpha must be 0 or more")
