"""The §6.3 parsing task end to end: treebank files -> parallel text, its configs, a few training
steps, and `python -m train parse-eval` / `evalb` as a user runs them."""

import warnings
from pathlib import Path

import pytest

from train import config as config_lib
from train.config import RunConfig
from train.data.files import iter_parallel, shared_data_dir
from train.data.store import resolve_paths
from train.errors import InputError
from train.parsing.trees import clean, delinearise, read_trees
from train.run.loop import fit

from cli_helpers import ROOT, assert_one_line_error, run_cli

TREES = [
    "( (S (NP-SBJ (DT The) (NN cat)) (VP (VBD sat) (PP-LOC (IN on) (NP (DT the) (NN mat)))) (. .)) )",
    "( (S (NP-SBJ-1 (PRP It)) (VP (VBD was) (ADJP-PRD (JJ red)) (S (NP-SBJ (-NONE- *-1)))) (. .)) )",
    "( (S (NP-SBJ (NNS Dogs)) (VP (VBP run) (ADVP (RB fast))) (. .)) )",
]


def write_treebank(folder: Path) -> Path:
    """wsj_0001.mrg .. wsj_0003.mrg under folder/combined, a copy of all three trees each."""
    (folder / "combined").mkdir(parents=True)
    for number in (1, 2, 3):
        (folder / "combined" / f"wsj_{number:04d}.mrg").write_text("\n".join(TREES) + "\n")
    return folder


def ptb_overrides(treebank: Path) -> list[str]:
    return [f"task.kind='ptb'", f"task.treebank='{treebank}'", "task.treebank_train='0001-0002'",
            "task.treebank_valid='0003-0003'", "task.treebank_test='0003-0003'"]


def test_ptb_task_writes_words_trees_and_gold_files(tmp_path):
    config = config_lib.apply_overrides(RunConfig(), ptb_overrides(write_treebank(tmp_path / "tb")))
    paths = resolve_paths(config.task, tmp_path / "run")
    pairs = list(iter_parallel(*paths["train"]))
    assert len(pairs) == 6
    gold = read_trees(paths["train"][1].with_suffix(".gold"))
    for (_, words, tokens), tree in zip(pairs, gold):
        assert words.split() == tree.words()
        assert str(delinearise(tokens.split(), words.split(), tree.tags())[0]) == str(tree) == str(clean(tree))
    assert pairs[1][1:] == ("It was red .", "(S (NP It )NP (VP was (ADJP red )ADJP )VP . )S")
    assert paths["train"][0].parent.name.startswith("ptb-")                 # named by content
    stamp = paths["test"][1].stat().st_mtime_ns
    assert resolve_paths(config.task, tmp_path / "run") == paths
    assert paths["test"][1].stat().st_mtime_ns == stamp                  # the same content: reused, not rewritten


@pytest.mark.parametrize("override, message", [
    ("task.treebank_train='179-1'", "task.treebank_train = '179-1': expected FIRST-LAST"),
    ("task.treebank_valid='0500-0599'", "no wsj_NNNN.mrg files numbered 0500-0599"),
    ("task.treebank='/nonexistent/treebank.zip'", "treebank not found"),
])
def test_ptb_task_input_errors(tmp_path, override, message):
    config = config_lib.apply_overrides(RunConfig(), ptb_overrides(write_treebank(tmp_path / "tb")) + [override])
    with pytest.raises(InputError, match=message):
        resolve_paths(config.task, tmp_path / "run")


@pytest.mark.parametrize("name", ["ptb_parse", "ptb_parse_cpu"])
def test_parse_configs_have_the_section_6_3_settings(name):
    config = config_lib.load(ROOT / "configs" / f"{name}.toml")
    assert config.task.kind == "ptb" and config.model.N == 4                          # §6.3: 4 layers
    assert (config.decode.beam, config.decode.alpha, config.decode.max_len_b) == (21, 0.3, 300)
    assert config.tokenizer.model_type == "word"
    if name == "ptb_parse":
        assert config.model.d_model == 1024                                            # §6.3
        assert config.model.d_ff == 2048 and config.model.h == 8                       # "unchanged from base"


@pytest.mark.skipif(shared_data_dir() is None, reason="../shared/data (the PTB sample) is not here")
def test_default_ptb_task_splits_the_sample_as_suggested(tmp_path):
    paths = resolve_paths(config_lib.load(ROOT / "configs" / "ptb_parse_cpu.toml").task, tmp_path)
    counts = {split: sum(1 for _ in iter_parallel(*pair)) for split, pair in paths.items()}
    assert counts == {"train": 3669, "valid": 127, "test": 118}                       # 3914 trees in all


def test_a_few_training_steps_then_parse_eval_and_evalb(tmp_path):
    treebank = write_treebank(tmp_path / "tb")
    tiny = ["tokenizer.vocab_size=60", "tokenizer.model_type='word'", "model.N=1", "model.d_model=16",
            "model.d_ff=32", "model.h=2", "model.max_len=64", "train.max_tokens=256", "train.warmup_steps=2",
            "train.backend=numpy", "train.max_steps=3", "train.valid_every=0", "train.valid_bleu_sentences=0",
            "train.ckpt_every=3", "train.keep_last=1", "train.average_last=1", "train.threads=1"]
    config = config_lib.apply_overrides(RunConfig(name="tiny_parse"), ptb_overrides(treebank) + tiny)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")                    # the tiny corpus lowers the vocabulary size
        result = fit(config, tmp_path / "run", progress=False)
    gold, out = result.prepared.paths["test"][1].with_suffix(".gold"), tmp_path / "parsed.txt"
    parsed = run_cli("parse-eval", "--ckpt", str(result.checkpoints[-1]), "--gold", str(tmp_path / "run"), "--beam", "2",
                     "--max-len-b", "8", "--out", str(out))
    stdout = parsed.stdout.decode()
    assert parsed.returncode == 0, parsed.stderr.decode()
    assert f"parsed 3 sentences of {gold}" in stdout and "right-branching" in stdout   # the run's test split
    for parse, tree in zip(read_trees(out), read_trees(gold)):                 # the gold words and tags
        assert (parse.words(), parse.tags()) == (tree.words(), tree.tags())
    # Right-branching, by hand (punctuation out): "The cat sat on the mat" matches S(0,6) and VP(2,6)
    # of 5 gold brackets; "It was red" and "Dogs run fast" each S(0,3) and VP(1,3) of 4: 6 of 13.
    baseline = [line.split()[-1] for line in stdout.splitlines() if line.startswith("Bracketing Recall")]
    assert baseline[0] == f"{100 * 6 / 13:.2f}"
    scored = run_cli("evalb", str(gold), str(out))
    assert scored.returncode == 0 and "=== Summary ===" in scored.stdout.decode()
    again = run_cli("parse-eval", "--ckpt", str(result.checkpoints[-1]), "--gold", str(gold), "--out", str(out))
    assert_one_line_error(again, f"{out}: exists")


def test_bad_gold_file_is_a_one_line_error_naming_file_and_line(tmp_path):
    bad = tmp_path / "gold.mrg"
    bad.write_text("( (S (NN x)) )\n( (S (NN y))\n")
    result = run_cli("parse-eval", "--ckpt", "none.safetensors", "--gold", str(bad))
    assert_one_line_error(result, f"{bad}:2: unbalanced brackets")
    empty = tmp_path / "empty.txt"
    empty.write_text("")
    assert_one_line_error(run_cli("evalb", str(empty), str(bad)), f"{empty}:1: empty file")


def test_parse_eval_never_overwrites_an_out_file_made_while_it_parses(tmp_path, monkeypatch, capsys):
    """--out is checked before parsing and written when parsing is done: a file made in between (by the user,
    another parse-eval) survives, and the command ends with one line saying so, leaving no temporary."""
    from train import commands
    from train.__main__ import main
    from train.evaluate import translate

    gold, out = tmp_path / "gold.mrg", tmp_path / "parsed.txt"
    gold.write_text("\n".join(TREES) + "\n")

    def parse_while_the_user_writes_out(model, tokenizer, lines, **options):
        out.write_text("the user's")                       # after the check, before the write
        return [""] * len(lines)

    monkeypatch.setattr(commands, "_load", lambda args: (None, None))
    monkeypatch.setattr(translate, "translate_lines", parse_while_the_user_writes_out)
    assert main(["parse-eval", "--ckpt", "unused.safetensors", "--gold", str(gold), "--out", str(out)]) == 2
    errors = [line for line in capsys.readouterr().err.splitlines() if line.strip()]
    assert out.read_text() == "the user's"
    assert len(errors) == 1 and errors[0].startswith(f"error: {out}: made while parsing"), errors
    assert sorted(p.name for p in tmp_path.iterdir()) == ["gold.mrg", "parsed.txt"]


def test_parse_eval_on_a_translation_run_says_it_is_not_a_parsing_run(tmp_path):
    """--gold RUN_DIR of a translation run (the demo's, say) names the run, not a missing test.gold file."""
    import json

    run = tmp_path / "demo"
    run.mkdir()
    (tmp_path / "test.de").write_text("eins\n")
    (run / "prepared.json").write_text(json.dumps({"files": {"test_tgt": {"path": str(tmp_path / "test.de")}}}))
    result = run_cli("parse-eval", "--ckpt", "none.safetensors", "--gold", str(run))
    assert_one_line_error(result, f"{run}: not a ptb run directory")
