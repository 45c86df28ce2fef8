"""`python -m train` as a user runs it: --help everywhere, one-line errors with file and line, exit codes."""

import warnings
from pathlib import Path

import numpy as np
import pytest

from cli_helpers import ROOT, assert_one_line_error, run_cli
from train.__main__ import build_parser
from transformer.checkpoint import save_model
from transformer.config import TransformerConfig
from transformer.model import Transformer

COMMANDS = ["demo", "prepare", "fit", "translate", "evaluate", "score", "average", "plot", "export-tensorboard",
            "doctor", "bench", "export", "ablate", "scale", "evalb", "parse-eval", "tune-decoding"]


def test_every_command_has_help():
    parser = build_parser()
    subcommands = parser._subparsers._group_actions[0].choices  # argparse keeps them here
    assert sorted(subcommands) == sorted(COMMANDS)
    for command in [None, *COMMANDS]:
        result = run_cli(*([command] if command else []), "--help")
        assert result.returncode == 0, result.stderr.decode()
        assert "usage: python -m train" in result.stdout.decode()


@pytest.fixture
def texts(tmp_path):
    def write(name: str, content: bytes) -> Path:
        path = tmp_path / name
        path.write_bytes(content)
        return path
    return write


def test_evaluate_mismatched_line_counts(texts):
    src, ref = texts("a.en", b"one\ntwo\nthree\n"), texts("a.de", b"eins\nzwei\n")
    result = run_cli("evaluate", "--ckpt", "none.safetensors", "--src", str(src), "--ref", str(ref))
    assert_one_line_error(result, f"{src} has 3 lines", f"{ref} has 2")


def test_evaluate_empty_file(texts):
    src, ref = texts("e.en", b""), texts("e.de", b"eins\n")
    assert_one_line_error(run_cli("evaluate", "--ckpt", "x", "--src", str(src), "--ref", str(ref)),
                          f"{src}: empty file")


def test_evaluate_non_utf8_reference_names_file_and_line(texts):
    """A bad reference line is an error before anything is translated (a bad source line only costs
    its own translation: tests/train/evaluate/test_translate.py::test_a_bad_line_costs_that_line_only)."""
    src, ref = texts("b.en", b"fine\nbad byte\n"), texts("b.de", b"gut\nschlecht \xff\n")
    assert_one_line_error(run_cli("evaluate", "--ckpt", "x", "--src", str(src), "--ref", str(ref)),
                          f"{ref}:2: not valid UTF-8")


def test_fit_unknown_config_key_names_file_line_and_suggestion(texts):
    config = texts("bad.toml", b'name = "x"\n[model]\nd_modle = 64\n')
    line = assert_one_line_error(run_cli("fit", "--config", str(config)), f"{config}:3", "'model.d_modle'",
                                 "did you mean 'model.d_model'")
    assert line.startswith("error: ")
    assert_one_line_error(run_cli("fit", "--config", str(ROOT / "configs" / "demo.toml"), "--set", "train.max_tokns=9"),
                          "'train.max_tokns'", "did you mean 'train.max_tokens'")


def test_fit_training_files_mismatch_and_non_utf8(texts, tmp_path):
    src, tgt = texts("t.en", b"a b\nc d\ne f\n"), texts("t.de", b"a b\nc d\n")
    config = texts("files.toml", f'name = "f"\n[task]\nkind = "files"\ntrain_src = "{src}"\ntrain_tgt = "{tgt}"\n'
                                 f'valid_src = "{src}"\nvalid_tgt = "{src}"\n[tokenizer]\nvocab_size = 20\n'.encode())
    assert_one_line_error(run_cli("fit", "--config", str(config), "--run-dir", str(tmp_path / "r1")),
                          f"{src} has 3 lines", f"{tgt} has 2")
    bad = texts("u.de", b"a b\n\xc3\x28 d\ne f\n")  # same run dir: it never got to a checkpoint
    assert_one_line_error(run_cli("fit", "--config", str(config), "--run-dir", str(tmp_path / "r1"),
                                  "--set", f'task.train_tgt="{bad}"'), f"{bad}:2: not valid UTF-8")


def test_fit_placeholder_paths_are_explained(tmp_path):
    result = run_cli("fit", "--config", str(ROOT / "configs" / "wmt14_en_de_base.toml"), "--backend", "numpy",
                     "--run-dir", str(tmp_path / "wmt"))
    assert_one_line_error(result, "task.train_src and task.train_tgt must be set")


def test_fit_never_overwrites_an_existing_directory(tmp_path):
    run_dir = tmp_path / "mine"
    run_dir.mkdir()
    (run_dir / "important.txt").write_text("keep me")
    for force in ([], ["--force"]):  # --force starts a *run* over; this folder is not one
        result = run_cli("fit", "--config", str(ROOT / "configs" / "demo.toml"), "--run-dir", str(run_dir), *force)
        line = assert_one_line_error(result, str(run_dir), "not a run directory", "'important.txt'")
        assert "--force" not in line  # never suggest the flag that deletes files
        assert sorted(p.name for p in run_dir.iterdir()) == ["important.txt"]
        assert (run_dir / "important.txt").read_text() == "keep me"


@pytest.fixture(scope="module")
def checkpoint(tmp_path_factory):
    """A checkpoint for a 50-word vocabulary, and tokenizers with 50 and with another size."""
    from train.data.tokenizer import Tokenizer

    folder = tmp_path_factory.mktemp("ckpt")
    words = " ".join(f"w{i}" for i in range(200))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        other = Tokenizer.train([words] * 5, folder / "other", vocab_size=40)
    config = TransformerConfig.tiny(vocab_size=other.vocab_size + 10, N=1, d_model=16, d_ff=16, h=2)
    path = folder / "ckpt_00000001.safetensors"
    save_model(path, Transformer(config, np.random.default_rng(0)))
    return path, other.model_path


def test_checkpoint_and_tokenizer_vocabulary_mismatch(checkpoint):
    path, tokenizer = checkpoint
    result = run_cli("translate", "--ckpt", str(path), "--tokenizer", str(tokenizer), stdin=b"w1 w2\n")
    assert_one_line_error(result, str(path), "vocabulary of", str(tokenizer))


def test_missing_checkpoint_and_tokenizer(checkpoint, tmp_path):
    path, _ = checkpoint
    assert_one_line_error(run_cli("translate", "--ckpt", str(tmp_path / "nope.safetensors"), stdin=b"hi\n"),
                          "nope.safetensors: checkpoint not found")
    assert_one_line_error(run_cli("translate", "--ckpt", str(path), stdin=b"hi\n"),
                          "tokenizer.model: tokenizer not found")


def test_corrupt_checkpoint_is_a_one_line_error(checkpoint, tmp_path):
    path, tokenizer = checkpoint
    broken = tmp_path / "broken.safetensors"
    data = bytearray(path.read_bytes())
    data[-3] ^= 0xFF  # flip a byte in the last tensor
    broken.write_bytes(bytes(data))
    result = run_cli("translate", "--ckpt", str(broken), "--tokenizer", str(tokenizer), stdin=b"w1\n")
    assert_one_line_error(result, "broken.safetensors", "sha256")


def test_debug_shows_traceback(texts):
    src, ref = texts("d.en", b"one\n"), texts("d.de", b"")
    result = run_cli("--debug", "evaluate", "--ckpt", "x", "--src", str(src), "--ref", str(ref))
    assert result.returncode != 0 and "Traceback" in result.stderr.decode()


def test_average_and_plot_errors(tmp_path):
    assert_one_line_error(run_cli("average", "--last", "5", str(tmp_path)), "not a run directory")
    assert_one_line_error(run_cli("plot", str(tmp_path)), "no metrics.jsonl")


def test_doctor_reports_backends():
    result = run_cli("doctor")
    assert result.returncode == 0
    out = result.stdout.decode()
    assert "NumPy" in out and "numpy  ok" in out and "cupy" in out


def test_decoding_progress_is_logged_as_lines_where_stderr_is_a_log(monkeypatch):
    """translate/evaluate/parse-eval in a batch job (stderr a file, not a terminal) say how far they got, as
    prepare does: a line every LOG_EVERY_S seconds (0 here), not silence until the scores."""
    import io

    from train import commands

    monkeypatch.setattr("train.data.progress.LOG_EVERY_S", 0.0)
    log = io.StringIO()
    monkeypatch.setattr("sys.stderr", log)
    with commands._progress(3, "translating") as bar:
        bar.update(2)
        bar.update(1)
    lines = log.getvalue().splitlines()
    assert lines and all("\r" not in line for line in lines) and "translating" in lines[-1] and "3/3" in lines[-1]


def test_prepare_refuses_a_negative_worker_count_before_anything_is_made(tmp_path):
    result = run_cli("prepare", "--config", str(ROOT / "configs" / "demo.toml"), "--data-dir", str(tmp_path / "p"),
                     "--workers", "-1")
    assert_one_line_error(result, "--workers must be 0 (one process per core for a large corpus) or more, got -1")
    assert not (tmp_path / "p").exists()


def test_a_file_of_the_users_in_the_way_of_an_output_folder_is_one_line(tmp_path):
    """`plot RUN_DIR` where RUN_DIR/plots is a file of the user's (or any output under a file): one line naming
    the path, exit 2, the file kept; never a FileExistsError / NotADirectoryError traceback."""
    from train.run.manifest import Manifest
    from train.run.metrics import MetricsWriter

    manifest = Manifest.create(tmp_path)
    with MetricsWriter(manifest.claim("metrics.jsonl", append=True), manifest=manifest) as metrics:
        metrics.write("train", 1, loss=5.5, lr=1e-4, grad_norm=None, epoch=0)
    (tmp_path / "plots").write_text("mine")
    assert_one_line_error(run_cli("plot", str(tmp_path)), f"{tmp_path / 'plots'}: File exists")
    assert (tmp_path / "plots").read_text() == "mine"


@pytest.mark.parametrize("command", [["translate", "--ckpt", "x.safetensors"], ["bench", "--no-peer"], ["scale"]])
def test_an_unknown_backend_is_refused_by_the_parser(command):
    """`--backend foo` is the parser's one-line error in translate, bench and scale, not a ValueError traceback from minitensor."""
    result = run_cli(*command, "--backend", "foo")
    stderr = result.stderr.decode()
    assert result.returncode == 2 and "invalid choice: 'foo'" in stderr and "Traceback" not in stderr, stderr


def test_the_parser_takes_every_backend_name_minitensor_takes():
    """The parser's --backend choices are minitensor's names and aliases (`gpu` too), nothing it would refuse."""
    from minitensor.backends import _ALIASES, _MODULES
    from train.__main__ import BACKENDS

    assert set(_MODULES) | set(_ALIASES) <= set(BACKENDS)
    args = build_parser().parse_args(["bench", "--backend", "gpu"])
    assert args.backend == "gpu"
