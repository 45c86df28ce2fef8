"""Prepared data: the memmap corpus, content-hash keys, reuse, and a run that refuses changed data."""

import gzip
import hashlib
import json
import os
import socket
import subprocess
import sys
import warnings
from pathlib import Path

import numpy as np
import pytest

from train import config as config_lib
from train.config import RunConfig
from train.data.builtin_task import make_number_task
from train.data.corpus import TokenizedCorpus, ids_dtype
from train.data.files import read_parallel
from train.data.store import prepare_data, remove_stale_builds
from train.data.tokenizer import Tokenizer
from train.errors import InputError
from train.run.loop import fit

ROOT = Path(__file__).resolve().parents[3]
SRC = ["one red apple is on the table", "two books are in the box", "", "Grüße aus Köln",
       "three   cups", "a b c d e f g h i j"]
TGT = ["ein roter Apfel liegt auf dem Tisch", "zwei Bücher liegen in der Kiste", "leer",
       "Grüße aus Köln: ß ä ö ü", "", "x y"]
TINY = ["tokenizer.vocab_size=60", "model.N=1", "model.d_model=16", "model.d_ff=32", "model.h=2", "model.max_len=64",
        "train.max_tokens=256", "train.warmup_steps=4", "train.backend=numpy", "train.log_every=1",
        "train.valid_every=0", "train.valid_bleu_sentences=2", "train.ckpt_every=2", "train.threads=1",
        "train.keep_last=3", "train.average_last=2"]


def write(path, lines, gz=False):
    data = "".join(line + "\n" for line in lines).encode("utf-8")
    path.write_bytes(gzip.compress(data) if gz else data)
    return path


class CharTokenizer:
    """Stand-in tokenizer: one id per character (ord), so expected ids are obvious."""

    vocab_size = 1 << 16

    def __init__(self):
        self.calls = 0

    def encode_batch(self, texts):
        self.calls += 1
        return [[ord(c) for c in text] for text in texts]


@pytest.fixture
def pair_files(tmp_path):
    return write(tmp_path / "c.en", SRC), write(tmp_path / "c.de", TGT)


def test_tokenized_corpus_matches_tokenizer_and_streams_in_chunks(tmp_path, pair_files):
    tok = CharTokenizer()
    corpus = TokenizedCorpus.build(*pair_files, tok, tmp_path / "cache", chunk_pairs=3)
    pairs, stats = read_parallel(*pair_files)
    assert corpus.stats == stats and len(corpus) == 4
    assert tok.calls == 2 * 2  # 4 kept pairs in chunks of 3 -> 2 chunks, two sides each
    for i, (src, tgt) in enumerate(pairs):
        src_ids, tgt_ids = corpus.pair(i)
        assert src_ids.dtype == np.uint16 and isinstance(src_ids, np.memmap)  # the vocabulary fits 16 bits
        assert src_ids.tolist() == [ord(c) for c in src]
        assert tgt_ids.tolist() == [ord(c) for c in tgt]
    np.testing.assert_array_equal(corpus.src_lengths, [len(s) for s, _ in pairs])
    np.testing.assert_array_equal(corpus.tgt_lengths, [len(t) for _, t in pairs])
    assert corpus.src_offsets.dtype == np.int64 and len(corpus.src_offsets) == 5
    for max_len in (20, 25, 31, 40):
        expected = [i for i, (s, t) in enumerate(pairs) if max(len(s), len(t)) <= max_len]
        np.testing.assert_array_equal(corpus.indices_within(max_len), expected)
    files = sorted(p.name for p in (tmp_path / "cache").iterdir())
    assert files == ["meta.json", "src_ids.npy", "src_offsets.npy", "tgt_ids.npy", "tgt_offsets.npy"]


def test_ids_are_uint16_when_the_vocabulary_fits_else_int32():
    assert ids_dtype(37_000) == np.uint16 and ids_dtype(65_536) == np.uint16  # ids 0..65535
    assert ids_dtype(65_537) == np.int32


def test_tokenized_corpus_error_leaves_no_valid_cache(tmp_path):
    src = write(tmp_path / "a.en", ["x", "y", "z"])
    tgt = write(tmp_path / "a.de", ["x", "y"])
    with pytest.raises(InputError, match="a.en has 3 lines"):
        TokenizedCorpus.build(src, tgt, CharTokenizer(), tmp_path / "cache")
    assert list((tmp_path / "cache").iterdir()) == []  # no meta.json, no temporary files


@pytest.fixture(scope="module")
def number_files(tmp_path_factory):
    folder = tmp_path_factory.mktemp("number")
    task = make_number_task(seed=1, n_train=400, n_valid=20, n_test=20)
    paths = {}
    for split, pairs in task.items():
        paths[split] = (write(folder / f"{split}.en", [e for e, _ in pairs]),
                        write(folder / f"{split}.de", [d for _, d in pairs]))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        tokenizer = Tokenizer.train(list(paths["train"]), folder / "tok", vocab_size=120)
    return paths, tokenizer


def test_worker_processes_encode_exactly_as_one_process(tmp_path, number_files):
    paths, tokenizer = number_files
    one = TokenizedCorpus.build(*paths["train"], tokenizer, tmp_path / "one")
    two = TokenizedCorpus.build(*paths["train"], tokenizer, tmp_path / "two", workers=2, chunk_pairs=50)
    for name in ("src_ids.npy", "src_offsets.npy", "tgt_ids.npy", "tgt_offsets.npy", "meta.json"):
        assert (tmp_path / "one" / name).read_bytes() == (tmp_path / "two" / name).read_bytes(), name
    assert one.pair(7)[1].tolist() == tokenizer.encode(read_parallel(*paths["train"])[0][7][1])
    assert len(two) == 400


def files_config(paths, *extra) -> RunConfig:
    (src, tgt), (vsrc, vtgt) = paths["train"], paths["valid"]
    return config_lib.apply_overrides(RunConfig(name="files"), [
        "task.kind=files", f"task.train_src={src}", f"task.train_tgt={tgt}", f"task.valid_src={vsrc}",
        f"task.valid_tgt={vtgt}", *TINY, *extra])


def quiet(function, *args, **kwargs):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # the tiny corpus lowers the vocabulary size (a warning)
        return function(*args, **kwargs)


def folder_mtimes(folder: Path) -> dict:
    return {p.name: p.stat().st_mtime_ns for p in folder.iterdir()}


def test_prepared_data_is_keyed_by_content_and_reused(tmp_path, number_files):
    paths, _ = number_files
    src = tmp_path / "train.en"
    src.write_bytes(paths["train"][0].read_bytes())
    paths = dict(paths, train=(src, paths["train"][1]))
    data_dir, logs = tmp_path / "prepared", []
    first = quiet(prepare_data, files_config(paths), data_dir, log=logs.append)
    assert not first.reused and first.folder.name == first.key[:16] and "preparing data" in logs[0]
    assert first.manifest["made_from"]["train_src"]["sha256"] == hashlib.sha256(src.read_bytes()).hexdigest()
    before = folder_mtimes(first.folder)

    again = prepare_data(files_config(paths), data_dir, log=logs.append)
    assert again.reused and again.folder == first.folder and "reusing prepared data" in logs[-1]
    os.utime(src, ns=(10**18, 10**18))  # touched: hashed again, same content, nothing re-encoded
    touched = prepare_data(files_config(paths), data_dir, log=logs.append)
    assert touched.reused and touched.key == first.key and folder_mtimes(first.folder) == before

    src.write_bytes(src.read_bytes().replace(b"red", b"tan", 1))  # edited (same size): another key and folder
    edited = quiet(prepare_data, files_config(paths), data_dir, log=logs.append)
    assert not edited.reused and edited.key != first.key and edited.folder.is_dir() and first.folder.is_dir()
    other_vocab = quiet(prepare_data, files_config(paths, "tokenizer.vocab_size=70"), data_dir, log=logs.append)
    assert other_vocab.key not in (first.key, edited.key)
    assert not list(data_dir.glob("*.tmp-*")), "no build folder left behind"


def test_stale_build_folders_of_dead_processes_are_removed(tmp_path):
    """Only the store's own build folders (the names _tmp_folder makes) of a dead process on this host go;
    a user's file or folder in the data folder that merely looks like a temporary of a dead pid stays."""
    done = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True)
    dead, host = int(done.stdout), socket.gethostname()
    stale = tmp_path / f"0123456789abcdef.tmp-{host}-{dead}"
    stale_task = tmp_path / f"builtin.tmp-{host}-{dead}"
    live = tmp_path / f"fedcba9876543210.tmp-{host}-{os.getpid()}"
    elsewhere = tmp_path / f"aaaaaaaaaaaaaaaa.tmp-another-host-{dead}"
    users_folder = tmp_path / f"my-corpus.tmp-{host}-{dead}"
    for folder in (stale, stale_task, live, elsewhere, users_folder):
        folder.mkdir()
    (users_folder / "notes.txt").write_text("the user's")
    users_file = tmp_path / f"train.en.tmp-{dead}"
    users_file.write_text("the user's half-edited corpus")
    remove_stale_builds(tmp_path)
    assert not stale.exists() and not stale_task.exists() and live.is_dir() and elsewhere.is_dir()
    assert users_file.read_text() == "the user's half-edited corpus"
    assert (users_folder / "notes.txt").read_text() == "the user's"


def test_resume_refuses_changed_training_data_naming_it(tmp_path, number_files):
    paths, _ = number_files
    src = tmp_path / "train.en"
    src.write_bytes(paths["train"][0].read_bytes())
    paths = dict(paths, train=(src, paths["train"][1]))
    run_dir = tmp_path / "run"
    quiet(fit, files_config(paths, "train.max_steps=2"), run_dir, progress=False)
    os.utime(src, ns=(10**18, 10**18))  # touched only: resumes
    assert quiet(fit, files_config(paths, "train.max_steps=3"), run_dir, progress=False).progress.step == 3

    src.write_bytes(src.read_bytes().replace(b"red", b"tan", 1))
    with pytest.raises(InputError, match=rf"the data changed since this run started: task.train_src {src} has "
                                         rf"other contents \(sha256 [0-9a-f]{{12}} -> [0-9a-f]{{12}}\).*--force"):
        quiet(fit, files_config(paths, "train.max_steps=4"), run_dir, progress=False)
    restarted = quiet(fit, files_config(paths, "train.max_steps=2"), run_dir, progress=False, force=True)
    assert restarted.progress.step == 2
    record = json.loads((run_dir / "prepared.json").read_text())
    assert record["files"]["train_src"]["sha256"] == hashlib.sha256(src.read_bytes()).hexdigest()


def test_a_corpus_edit_is_refused_at_once_even_with_size_and_mtime_kept(tmp_path, number_files, monkeypatch):
    """A changed corpus is refused before any re-prepare (~15 min at WMT size) and leaves no new prepared folder
    behind, even for a same-size edit with the modification time restored."""
    import train.data.store as store

    paths, _ = number_files
    src = tmp_path / "train.en"
    src.write_bytes(paths["train"][0].read_bytes())
    paths = dict(paths, train=(src, paths["train"][1]))
    run_dir, data_dir = tmp_path / "run", tmp_path / "prepared"
    quiet(fit, files_config(paths, "train.max_steps=2"), run_dir, progress=False)
    folders = sorted(data_dir.iterdir())
    stat = src.stat()
    src.write_bytes(src.read_bytes().replace(b"one", b"two", 1))  # same size ...
    os.utime(src, ns=(stat.st_atime_ns, stat.st_mtime_ns))  # ... and the old modification time
    assert (src.stat().st_size, src.stat().st_mtime_ns) == (stat.st_size, stat.st_mtime_ns)

    def no_tokenizer_training(*args, **kwargs):
        raise AssertionError("the data was prepared again before the refusal")
    monkeypatch.setattr(store.Tokenizer, "train", no_tokenizer_training)
    with pytest.raises(InputError, match=rf"the data changed since this run started: task.train_src {src} has other "
                                         rf"contents"):
        quiet(fit, files_config(paths, "train.max_steps=4"), run_dir, progress=False)
    assert sorted(data_dir.iterdir()) == folders  # no new prepared folder, no build folder left


def test_prepare_command_then_the_fit_command_it_prints_runs(tmp_path, number_files):
    """The `fit` command that `prepare` printed could not run (it left out the corpus --sets); it is run here
    exactly as printed (from a folder of its own: its run directory is runs/<config name> there)."""
    import shlex

    paths, _ = number_files
    (src, tgt), (vsrc, vtgt) = paths["train"], paths["valid"]
    sets = [f"task.kind=files", f"task.train_src={src}", f"task.train_tgt={tgt}", f"task.valid_src={vsrc}",
            f"task.valid_tgt={vtgt}", *TINY, "train.max_steps=1"]
    args = [arg for item in sets for arg in ("--set", item)]
    env = dict(os.environ, PYTHONPATH=str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", ""))
    config = ROOT / "configs" / "demo.toml"
    prepared = subprocess.run([sys.executable, "-m", "train", "prepare", "--config", str(config),
                               "--data-dir", str(tmp_path / "data"), *args], capture_output=True, text=True,
                              env=env, timeout=300)
    assert prepared.returncode == 0, prepared.stderr
    assert "prepared data:" in prepared.stdout and "400 (0 with an empty side skipped)" in prepared.stdout
    printed = next(line for line in prepared.stdout.splitlines() if "train with" in line).split("train with", 1)[1]
    command = shlex.split(printed)
    assert command[:4] == ["python", "-m", "train", "fit"]
    (tmp_path / "elsewhere").mkdir()
    fitted = subprocess.run([sys.executable, *command[1:], "--no-progress"], capture_output=True, text=True,
                            env=env, timeout=300, cwd=tmp_path / "elsewhere")
    assert fitted.returncode == 0, fitted.stderr
    assert "reusing prepared data" in fitted.stdout and "nothing to encode" in fitted.stdout
    assert "done: step 1" in fitted.stdout
    assert (tmp_path / "elsewhere" / "runs" / "demo" / "ckpt_00000001.safetensors").is_file()
