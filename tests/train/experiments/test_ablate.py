"""`python -m train ablate`: Table 3's grid (§6.2), its scaling, parameter counts, the runner's resume, the table."""

import csv
import dataclasses
import json
import os
import signal
import subprocess
import sys
import time

import numpy as np
import pytest

from cli_helpers import ROOT, run_cli
from train import config as config_lib
from train.config import RunConfig
from train.errors import InputError
from train.experiments import ablate
from train.experiments import ablate_report
from train.experiments.ablate_grid import TABLE3, count_parameters, expand, expand_recipe, paper_size_parameters
from train.run.faults import DivergedError
from train.run.metrics import read_metrics
from transformer.config import TransformerConfig
from transformer.model import Transformer

FIELDS = ("N", "d_model", "d_ff", "h", "d_k", "d_v", "p_drop", "eps_ls", "positional")

# Table 3 of the paper, typed from the paper: (variant, N, d_model, d_ff, h, d_k, d_v, P_drop, eps_ls, positional).
# Blank cells are base's values; row B changes d_k only (d_v stays 64).
PAPER_GRID = [
    ("base", 6, 512, 2048, 8, 64, 64, 0.1, 0.1, "sinusoidal"),
    ("A1", 6, 512, 2048, 1, 512, 512, 0.1, 0.1, "sinusoidal"),
    ("A2", 6, 512, 2048, 4, 128, 128, 0.1, 0.1, "sinusoidal"),
    ("A3", 6, 512, 2048, 16, 32, 32, 0.1, 0.1, "sinusoidal"),
    ("A4", 6, 512, 2048, 32, 16, 16, 0.1, 0.1, "sinusoidal"),
    ("B1", 6, 512, 2048, 8, 16, 64, 0.1, 0.1, "sinusoidal"),
    ("B2", 6, 512, 2048, 8, 32, 64, 0.1, 0.1, "sinusoidal"),
    ("C1", 2, 512, 2048, 8, 64, 64, 0.1, 0.1, "sinusoidal"),
    ("C2", 4, 512, 2048, 8, 64, 64, 0.1, 0.1, "sinusoidal"),
    ("C3", 8, 512, 2048, 8, 64, 64, 0.1, 0.1, "sinusoidal"),
    ("C4", 6, 256, 2048, 8, 32, 32, 0.1, 0.1, "sinusoidal"),
    ("C5", 6, 1024, 2048, 8, 128, 128, 0.1, 0.1, "sinusoidal"),
    ("C6", 6, 512, 1024, 8, 64, 64, 0.1, 0.1, "sinusoidal"),
    ("C7", 6, 512, 4096, 8, 64, 64, 0.1, 0.1, "sinusoidal"),
    ("D1", 6, 512, 2048, 8, 64, 64, 0.0, 0.1, "sinusoidal"),
    ("D2", 6, 512, 2048, 8, 64, 64, 0.2, 0.1, "sinusoidal"),
    ("D3", 6, 512, 2048, 8, 64, 64, 0.1, 0.0, "sinusoidal"),
    ("D4", 6, 512, 2048, 8, 64, 64, 0.1, 0.2, "sinusoidal"),
    ("E1", 6, 512, 2048, 8, 64, 64, 0.1, 0.1, "learned"),
    ("big", 6, 1024, 4096, 16, 64, 64, 0.3, 0.1, "sinusoidal"),
]

# The same grid scaled to configs/multi30k.toml (N 3, d_model 256, d_ff 1024, h 4, d_k = d_v = 64), worked by hand:
# N x 3/6, d_model x 256/512, d_ff x 1024/2048, h x 4/8 (h 1 -> 0.5 -> 1), d_k, d_v x 64/64; A, C4/C5 and big
# keep d_k = d_v = d_model/h.
MULTI30K_GRID = [
    ("base", 3, 256, 1024, 4, 64, 64, 0.1, 0.1, "sinusoidal"),
    ("A1", 3, 256, 1024, 1, 256, 256, 0.1, 0.1, "sinusoidal"),
    ("A2", 3, 256, 1024, 2, 128, 128, 0.1, 0.1, "sinusoidal"),
    ("A3", 3, 256, 1024, 8, 32, 32, 0.1, 0.1, "sinusoidal"),
    ("A4", 3, 256, 1024, 16, 16, 16, 0.1, 0.1, "sinusoidal"),
    ("B1", 3, 256, 1024, 4, 16, 64, 0.1, 0.1, "sinusoidal"),
    ("B2", 3, 256, 1024, 4, 32, 64, 0.1, 0.1, "sinusoidal"),
    ("C1", 1, 256, 1024, 4, 64, 64, 0.1, 0.1, "sinusoidal"),
    ("C2", 2, 256, 1024, 4, 64, 64, 0.1, 0.1, "sinusoidal"),
    ("C3", 4, 256, 1024, 4, 64, 64, 0.1, 0.1, "sinusoidal"),
    ("C4", 3, 128, 1024, 4, 32, 32, 0.1, 0.1, "sinusoidal"),
    ("C5", 3, 512, 1024, 4, 128, 128, 0.1, 0.1, "sinusoidal"),
    ("C6", 3, 256, 512, 4, 64, 64, 0.1, 0.1, "sinusoidal"),
    ("C7", 3, 256, 2048, 4, 64, 64, 0.1, 0.1, "sinusoidal"),
    ("D1", 3, 256, 1024, 4, 64, 64, 0.0, 0.1, "sinusoidal"),
    ("D2", 3, 256, 1024, 4, 64, 64, 0.2, 0.1, "sinusoidal"),
    ("D3", 3, 256, 1024, 4, 64, 64, 0.1, 0.0, "sinusoidal"),
    ("D4", 3, 256, 1024, 4, 64, 64, 0.1, 0.2, "sinusoidal"),
    ("E1", 3, 256, 1024, 4, 64, 64, 0.1, 0.1, "learned"),
    ("big", 3, 512, 2048, 8, 64, 64, 0.3, 0.1, "sinusoidal"),
]

TINY_TOML = """\
name = "tiny"
[task]
kind = "builtin"
n_train = 100
n_valid = 8
n_test = 8
[tokenizer]
vocab_size = 80
[model]
N = 2
d_model = 32
d_ff = 64
h = 4
max_len = 64
[train]
backend = "numpy"
threads = 1
max_tokens = 256
max_steps = 5
warmup_steps = 4
log_every = 5
valid_every = 0
valid_bleu_sentences = 4
ckpt_every = 5
keep_last = 1
average_last = 1
"""


def grid_of(variants) -> list[tuple]:
    return [(v.id, *(getattr(v.config.model, name) for name in FIELDS)) for v in variants]


def test_grid_at_paper_scale_is_table3_exactly():
    paper = RunConfig(model=TransformerConfig.base(), train=config_lib.TrainConfig(max_steps=100_000))
    assert grid_of(expand(paper)) == PAPER_GRID


def test_grid_scaled_to_multi30k_follows_the_printed_rule():
    run_config = config_lib.load(ROOT / "configs" / "multi30k.toml")
    variants = expand(run_config, steps=1234)
    assert grid_of(variants) == MULTI30K_GRID
    assert {(v.config.train.max_steps, v.config.train.seed) for v in variants} == {(1234, run_config.train.seed)}
    assert [v.notes for v in variants if v.notes] == [("h 1 x 4/8 = 0.5 -> 1",)]
    # only the model and the budget change: data, tokenizer, optimizer and decoding are the base's
    for v in variants:
        assert v.config.replace(name=run_config.name, model=run_config.model,
                                train=run_config.train) == run_config


def test_rows_select_variants_and_bad_rows_are_input_errors():
    run_config = config_lib.load(ROOT / "configs" / "multi30k.toml")
    assert [v.id for v in expand(run_config, rows=("D", "E"))] == ["base", "D1", "D2", "D3", "D4", "E1"]
    with pytest.raises(InputError, match="unknown row 'F'"):
        expand(run_config, rows=("A", "F"))
    with pytest.raises(InputError, match="--steps must be positive"):
        expand(run_config, steps=0)


def test_recipe_grid_changes_one_setting_at_a_time():
    run_config = config_lib.load(ROOT / "configs" / "multi30k.toml")
    variants = expand_recipe(run_config)
    changed = {v.id: config_lib.diff(variants[0].config.to_dict(), v.config.to_dict()) for v in variants}
    assert changed == {
        "base": [], "warmup500": ["name", "train.warmup_steps"], "warmup2000": ["name", "train.warmup_steps"],
        "lr0.5": ["name", "train.lr_factor"], "lr2": ["name", "train.lr_factor"],
        "pdrop0.2": ["model.p_drop", "name"], "pdrop0.3": ["model.p_drop", "name"],
        "vocab4000": ["model.vocab_size", "name", "tokenizer.vocab_size"],
        "vocab16000": ["model.vocab_size", "name", "tokenizer.vocab_size"], "steps6000": ["name", "train.max_steps"]}
    assert (variants[5].config.model.p_drop, variants[8].config.model.vocab_size) == (0.2, 16000)
    assert all(v.paper is None for v in variants)


def test_closed_form_parameter_count_matches_built_models():
    """count_parameters against Transformer.num_parameters, for every variant of a small base and its variants
    with untied embeddings and pre-norm (the parts the Table 3 grid does not vary)."""
    base = RunConfig(model=TransformerConfig(vocab_size=50, N=2, d_model=32, d_ff=64, h=4, max_len=16))
    for variant in expand(base):
        for extra in ({}, {"tie_embeddings": False, "norm": "pre"}):
            model_config = dataclasses.replace(variant.config.model, **extra)
            built = Transformer(model_config, np.random.default_rng(0), backend="numpy")
            assert count_parameters(model_config) == built.num_parameters(), (variant.id, extra)


def test_paper_size_counts_are_near_table3_params_column():
    """Our count of each paper-size model is within 7% of Table 3's params (the vocabulary is the unknown);
    a wrong expansion (say B changing d_v too: 49M for 58M) would be far off."""
    paper = RunConfig(model=TransformerConfig.base())
    counted = {v.id: (paper_size_parameters(v) / 1e6, v.paper.params_m) for v in expand(paper)}
    with_params = {k: v for k, v in counted.items() if v[1] is not None}
    assert sorted(with_params) == ["B1", "B2", "C1", "C2", "C3", "C4", "C5", "C6", "C7", "base", "big"]
    for variant_id, (ours, table) in with_params.items():
        assert abs(ours / table - 1) < 0.07, (variant_id, ours, table)
    assert round(counted["base"][0], 1) == 63.1 and round(counted["big"][0], 1) == 214.2


def test_list_prints_scaling_rule_and_both_parameter_columns(capsys):
    from train.__main__ import main

    assert main(["ablate", "--config", str(ROOT / "configs" / "multi30k.toml"), "--rows", "B", "--list"]) == 0
    out = capsys.readouterr().out
    assert "scaling rule: sizes scale by our base over the paper's base" in out
    assert "3,000 steps per variant" in out
    b1 = next(line for line in out.splitlines() if line.startswith("B1 "))
    assert b1.split() == ["B1", "d_k", "16", "d_k", "16", "6.69M", "56.0M", "58M"]
    assert not any(line.startswith(("A1", "C1")) for line in out.splitlines())


# ------------------------------------------------------------------ the runner
def test_tiny_grid_resumes_after_sigkill_between_variants(tmp_path):
    """Kill -9 right after the first variant's result is recorded; the rerun skips it and completes the table."""
    (tmp_path / "tiny.toml").write_text(TINY_TOML)
    args = ["ablate", "--grid", "table3", "--config", "tiny.toml", "--rows", "D", "--steps", "5",
            "--out", "grid", "--no-progress"]
    env = dict(os.environ, PYTHONPATH=str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", ""))
    process = subprocess.Popen([sys.executable, "-m", "train", *args], cwd=tmp_path, env=env,
                               stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    results, deadline = tmp_path / "grid" / "results", time.monotonic() + 300
    while not (results / "base.json").is_file() and process.poll() is None and time.monotonic() < deadline:
        time.sleep(0.01)
    process.send_signal(signal.SIGKILL)
    process.wait(timeout=300)
    finished_at_kill = sorted(p.name for p in results.glob("*.json"))
    assert "base.json" in finished_at_kill and len(finished_at_kill) < 5, finished_at_kill
    base_metrics = (tmp_path / "grid" / "base" / "metrics.jsonl").read_bytes()

    rerun = run_cli(*args, cwd=tmp_path)
    out = rerun.stdout.decode()
    assert rerun.returncode == 0, rerun.stderr.decode()
    assert "[1/5] base (base): finished earlier" in out
    assert (tmp_path / "grid" / "base" / "metrics.jsonl").read_bytes() == base_metrics   # not redone
    with open(tmp_path / "grid" / "table3.csv", newline="") as f:
        rows = {row["variant"]: row for row in csv.DictReader(f)}
    assert list(rows) == ["base", "D1", "D2", "D3", "D4"]
    assert {row["status"] for row in rows.values()} == {"done"}
    for variant_id, row in rows.items():
        final = read_metrics(tmp_path / "grid" / variant_id / "metrics.jsonl", "valid")[-1]
        assert final["step"] == 5 and float(row["ppl"]) == final["ppl"]
        if variant_id != "base":
            assert float(row["d_ppl"]) == pytest.approx(float(row["ppl"]) - float(rows["base"]["ppl"]))
    # the paper's line beside ours: Table 3 D1 (P_drop 0.0) 5.77 / 24.6 against base 4.92 / 25.8
    assert (rows["D1"]["paper_ppl"], rows["D1"]["paper_d_ppl"], rows["D1"]["paper_d_bleu"]) == ("5.77", "0.85", "-1.2")
    assert (tmp_path / "grid" / "table3.png").stat().st_size > 1000
    assert "| D1 | p_drop 0.0 | p_drop 0.0 |" in (tmp_path / "grid" / "table3.md").read_text()
    tokenizers = {(tmp_path / "grid" / v / "tokenizer.model").read_bytes() for v in rows}
    assert len(tokenizers) == 1, "every variant must see the same vocabulary for its perplexity to compare"

    changed = run_cli(*args, "--set", "train.warmup_steps=3", cwd=tmp_path)     # another base: refused
    assert changed.returncode == 2 and "different config" in changed.stderr.decode()


def test_out_dir_that_is_not_a_grid_is_refused(tmp_path):
    (tmp_path / "tiny.toml").write_text(TINY_TOML)
    (tmp_path / "mine").mkdir()
    (tmp_path / "mine" / "notes.txt").write_text("my notes")
    result = run_cli("ablate", "--config", "tiny.toml", "--rows", "D", "--out", "mine", cwd=tmp_path)
    assert result.returncode == 2
    assert result.stderr.decode().startswith("error: mine: exists and is not empty but holds no ablation grid")
    assert [p.name for p in (tmp_path / "mine").iterdir()] == ["notes.txt"]


def tiny_variants(tmp_path, rows=("E",)):
    (tmp_path / "tiny.toml").write_text(TINY_TOML)
    return expand(config_lib.load(tmp_path / "tiny.toml"), rows, steps=3)


def test_kill_after_last_checkpoint_before_validation_is_recovered(tmp_path, capsys):
    """fit returns at once for a run at its last step; the grid then validates it itself, the same numbers."""
    variants = tiny_variants(tmp_path)
    first, _ = ablate.run_grid(variants[:1], tmp_path, progress=False)
    metrics = tmp_path / "base" / "metrics.jsonl"
    lines = metrics.read_text().splitlines()
    metrics.write_text("\n".join(line for line in lines if '"kind": "valid"' not in line) + "\n")
    (tmp_path / "results" / "base.json").unlink()               # as if killed before the validation was written
    again, _ = ablate.run_grid(variants[:1], tmp_path, progress=False)
    assert again["base"]["ppl"] == pytest.approx(first["base"]["ppl"], rel=1e-6)
    assert again["base"]["bleu"] == first["base"]["bleu"]
    assert read_metrics(metrics, "valid")[-1]["step"] == 3


def test_a_diverged_variant_is_recorded_and_the_grid_goes_on(tmp_path, monkeypatch, capsys):
    from train.run import loop

    real_fit = loop.fit

    def fit(config, run_dir, **kwargs):
        if config.name.endswith("-E1"):
            raise DivergedError("step 2: training diverged: loss is nan")
        return real_fit(config, run_dir, **kwargs)

    monkeypatch.setattr(loop, "fit", fit)
    variants = tiny_variants(tmp_path)
    results, stopped = ablate.run_grid(variants, tmp_path, progress=False)
    assert stopped is None and results["E1"]["status"] == "diverged" and results["base"]["status"] == "done"
    ablate_report.write(tmp_path, variants, results)
    assert "positional learned (diverged)" in (tmp_path / "table3.md").read_text()
    assert json.loads((tmp_path / "results" / "E1.json").read_text())["status"] == "diverged"


def test_same_direction_compares_signs_with_the_paper(tmp_path):
    """Synthetic results: the table's changes and agreement follow from the numbers, the paper's from Table 3."""
    variants = tiny_variants(tmp_path, rows=("A", "E"))
    fake = {"base": (10.0, 30.0), "A1": (11.0, 29.0), "A2": (9.0, 31.0), "A3": (10.5, 30.0), "E1": (12.0, 29.5)}
    results = {k: {"status": "done", "ppl": p, "bleu": b, "params": 1000, "vocab": 80, "bleu_sentences": 4,
                   "valid_beam": 1, "train_seconds": 1.0} for k, (p, b) in fake.items()}
    ablate_report.write(tmp_path, variants, results)
    with open(tmp_path / "table3.csv", newline="") as f:
        rows = {row["variant"]: row for row in csv.DictReader(f)}
    # paper: A1 5.29 / 24.9 (PPL up, BLEU down), A2 5.00 / 25.5 (up, down), A3 4.91 / 25.8 (down, =), E 4.92 / 25.7
    assert (rows["A1"]["same_direction_ppl"], rows["A1"]["same_direction_bleu"]) == ("yes", "yes")
    assert (rows["A2"]["same_direction_ppl"], rows["A2"]["same_direction_bleu"]) == ("no", "no")
    assert (rows["A3"]["same_direction_ppl"], rows["A3"]["same_direction_bleu"]) == ("no", "-")
    assert (rows["E1"]["same_direction_ppl"], rows["E1"]["same_direction_bleu"]) == ("-", "yes")
    assert rows["A4"]["status"] == "pending" and rows["A4"]["d_ppl"] == ""
    table = (tmp_path / "table3.md").read_text()
    assert "| A1 | h 1, d_k 512, d_v 512 | h 1, d_k 32, d_v 32 |" in table
    assert "| 11.00 | +1.00 ↑ | 5.29 | +0.37 ↑ | 29.00 | -1.00 ↓ | 24.9 | -0.9 ↓ | yes, yes |" in table
    assert [p.ppl for p in TABLE3 if p.row == "base"] == [4.92]


def test_recipe_report_has_no_paper_columns(tmp_path):
    (tmp_path / "tiny.toml").write_text(TINY_TOML)
    variants = expand_recipe(config_lib.load(tmp_path / "tiny.toml"))
    results = {v.id: {"status": "done", "ppl": 10.0 + i, "bleu": 30.0 - i, "params": 1000, "vocab": 80,
                      "bleu_sentences": 4, "valid_beam": 1, "train_seconds": 1.0} for i, v in enumerate(variants)}
    written = ablate_report.write(tmp_path, variants, results)
    assert [p.name for p in written] == ["recipe.md", "recipe.csv", "recipe.png"]
    table = (tmp_path / "recipe.md").read_text()
    assert "paper" not in table.split("\n")[4] and "| lr0.5 | train.lr_factor 0.5 | 0.00M | 13.00 | +3.00 ↑ |" in table
