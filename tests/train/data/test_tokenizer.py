"""The shared sentencepiece tokenizer: round trip, fixed special ids, hash, small-corpus clamp."""

import gzip
import hashlib
import os
import shutil
import subprocess
import sys
import warnings
from pathlib import Path

import pytest

from train.data.builtin_task import make_number_task
from train.data.tokenizer import Tokenizer
from train.errors import InputError


@pytest.fixture(scope="module")
def task():
    return make_number_task(seed=0, n_train=3000, n_valid=50, n_test=200)


@pytest.fixture(scope="module")
def tokenizer(task, tmp_path_factory):
    texts = [s for pair in task["train"] for s in pair]  # both sides: one shared vocabulary
    return Tokenizer.train(texts, tmp_path_factory.mktemp("spm") / "shared", vocab_size=300)


def test_round_trip_on_test_sentences(tokenizer, task):
    sentences = [s for pair in task["test"] for s in pair]
    assert any("ß" in s for s in sentences) and any("Ä" in s or "ü" in s for s in sentences)
    for sentence in sentences:
        ids = tokenizer.encode(sentence)
        assert tokenizer.decode(ids) == sentence
        assert tokenizer.unk_id not in ids, sentence
    assert tokenizer.encode_batch(sentences[:5]) == [tokenizer.encode(s) for s in sentences[:5]]


def test_special_ids_are_fixed(tokenizer):
    assert (tokenizer.pad_id, tokenizer.unk_id, tokenizer.bos_id, tokenizer.eos_id) == (0, 1, 2, 3)
    sp = tokenizer.processor
    assert [sp.id_to_piece(i) for i in range(4)] == ["<pad>", "<unk>", "<s>", "</s>"]
    assert tokenizer.vocab_size == 300
    ids = tokenizer.encode("drei rote Äpfel liegen auf dem Tisch")
    assert not {0, 2, 3} & set(ids)  # encode adds no specials; the training loop does


def test_decode_stops_at_eos_and_drops_pad_and_bos(tokenizer):
    ids = tokenizer.encode("zwölf Gläser stehen im Schrank")
    other = tokenizer.encode("ein Ei")
    assert tokenizer.decode([2] + ids + [3] + other + [0, 0]) == "zwölf Gläser stehen im Schrank"
    assert tokenizer.decode([0, 2] + ids[:1] + [0] + ids[1:]) == "zwölf Gläser stehen im Schrank"
    assert tokenizer.decode([3] + ids) == ""


def test_model_hash_is_sha256_of_file_and_stable(tokenizer, tmp_path):
    expected = hashlib.sha256(tokenizer.model_path.read_bytes()).hexdigest()
    assert tokenizer.model_hash == expected
    copy = shutil.copy(tokenizer.model_path, tmp_path / "copy.model")
    assert Tokenizer.load(copy).model_hash == expected


def test_training_is_deterministic_and_hash_tracks_content(task, tmp_path):
    texts = [s for pair in task["train"][:1000] for s in pair]
    a = Tokenizer.train(texts, tmp_path / "a", vocab_size=200)
    b = Tokenizer.train(texts, tmp_path / "b", vocab_size=200)
    c = Tokenizer.train(texts[:600], tmp_path / "c", vocab_size=200)
    assert a.model_hash == b.model_hash
    assert a.model_hash != c.model_hash


TRAIN_IN_A_NEW_PROCESS = """
import sys, warnings
from pathlib import Path
from train.data.tokenizer import Tokenizer
warnings.simplefilter("ignore")
Tokenizer.train([Path(sys.argv[1]), Path(sys.argv[2])], sys.argv[3], vocab_size=150, sample_size=700)
"""


def test_sampled_training_gives_the_same_model_in_every_process(task, tmp_path):
    """sentencepiece's own sampling (input_sentence_size + shuffle) differs from process to process; our
    sample is drawn by a seeded generator, so two processes write byte-identical models."""
    en, de = tmp_path / "train.en", tmp_path / "train.de"
    en.write_text("".join(e + "\n" for e, _ in task["train"][:1500]), encoding="utf-8")
    de.write_text("".join(d + "\n" for _, d in task["train"][:1500]), encoding="utf-8")  # 3000 lines > 700
    root = Path(__file__).resolve().parents[3]
    env = dict(os.environ, PYTHONPATH=str(root) + os.pathsep + os.environ.get("PYTHONPATH", ""))
    for name in ("a", "b"):
        done = subprocess.run([sys.executable, "-c", TRAIN_IN_A_NEW_PROCESS, str(en), str(de), str(tmp_path / name)],
                              capture_output=True, text=True, env=env, timeout=300)
        assert done.returncode == 0, done.stderr
    assert (tmp_path / "a.model").read_bytes() == (tmp_path / "b.model").read_bytes()
    full = Tokenizer.train([en, de], tmp_path / "full", vocab_size=150, sample_size=3000)
    assert full.model_hash != Tokenizer(tmp_path / "a.model").model_hash  # the sample was a real subset


def test_train_from_files_including_gzip(task, tmp_path):
    en = tmp_path / "train.en"
    en.write_text("".join(e + "\n" for e, _ in task["train"]), encoding="utf-8")
    de = tmp_path / "train.de.gz"
    de.write_bytes(gzip.compress("".join(d + "\n" for _, d in task["train"]).encode()))
    from_files = Tokenizer.train([en, de], tmp_path / "files", vocab_size=300)
    texts = [s for pair in task["train"] for s in pair]
    from_texts = Tokenizer.train(texts, tmp_path / "texts", vocab_size=300)
    sentence = task["test"][0][1]
    assert from_files.decode(from_files.encode(sentence)) == sentence
    assert from_files.vocab_size == from_texts.vocab_size == 300


def test_sample_size_limits_training_sentences(task, tmp_path):
    texts = [s for pair in task["train"] for s in pair]
    full = Tokenizer.train(texts, tmp_path / "full", vocab_size=300)
    sampled = Tokenizer.train(texts, tmp_path / "sampled", vocab_size=300, sample_size=500)
    assert sampled.model_hash != full.model_hash  # trained on a different (sampled) text


def test_small_corpus_clamps_vocab_with_warning(tmp_path):
    with pytest.warns(UserWarning, match="vocab_size lowered from 5000"):
        tok = Tokenizer.train(["ein Apfel", "zwei Äpfel", "drei Bücher"] * 5,
                              tmp_path / "tiny", vocab_size=5000)
    assert tok.clamped_from == 5000 and 8 <= tok.vocab_size < 5000
    assert tok.decode(tok.encode("zwei Äpfel")) == "zwei Äpfel"


def test_unigram_option(task, tmp_path):
    texts = [s for pair in task["train"] for s in pair]
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # enough text for 300 pieces: no clamp warning
        tok = Tokenizer.train(texts, tmp_path / "uni", vocab_size=300, model_type="unigram")
    assert tok.processor.id_to_piece(3) == "</s>"
    sentence = task["test"][1][1]
    assert tok.decode(tok.encode(sentence)) == sentence


def test_bad_arguments(tmp_path):
    with pytest.raises(InputError, match="model_type"):
        Tokenizer.train(["a b"], tmp_path / "x", 100, model_type="wordpiece")
    with pytest.raises(InputError, match="not found"):
        Tokenizer.load(tmp_path / "nothing.model")
    with pytest.raises(InputError, match="file not found"):
        Tokenizer.train([Path(tmp_path / "nothing.txt")], tmp_path / "y", 100)


def test_the_tokenizer_phase_shows_its_progress_in_a_log(task, tmp_path):
    """The reported symptom: the merges bar sat at 0% for 33 s, then jumped to 100% (sentencepiece's log redirect
    swallowed it), and a log file got minutes of silence. Run as a batch job would, stderr into a file, with a
    progress line at every update: the merges must show up between 0% and 100%, and no raw sentencepiece log."""
    text = tmp_path / "train.txt"
    text.write_text("".join(f"{en}\n{de}\n" for en, de in task["train"]), encoding="utf-8")
    code = ("import pathlib, sys; import train.data.progress as progress; progress.LOG_EVERY_S = 0.0; "
            "from train.data.tokenizer import Tokenizer; "
            f"Tokenizer.train([pathlib.Path({str(text)!r})], pathlib.Path({str(tmp_path / 'tok')!r}), "
            "vocab_size=1000, progress=True)")
    env = dict(os.environ, PYTHONPATH=str(Path(__file__).resolve().parents[3]))
    with open(tmp_path / "log", "wb") as log:
        done = subprocess.run([sys.executable, "-c", code], stdout=log, stderr=log, env=env, timeout=300)
    lines = (tmp_path / "log").read_text(encoding="utf-8").splitlines()
    assert done.returncode == 0, lines
    merges = [line for line in lines if line.startswith("tokenizer: BPE merges:")]
    percents = [int(line.split(":")[2].split("%")[0]) for line in merges]
    assert any(0 < p < 100 for p in percents) and percents[-1] == 100, lines
    assert percents == sorted(percents), "the bar never goes back"
    assert not any("trainer_interface" in line or "LOG(INFO)" in line for line in lines), "sentencepiece's own log"


def test_a_file_that_is_no_tokenizer_is_one_line(tmp_path):
    """`translate --tokenizer train.en` (a wrong file): one line, not sentencepiece's RuntimeError traceback."""
    wrong = tmp_path / "train.en"
    wrong.write_text("a sentence, not a model\n")
    with pytest.raises(InputError, match=r"train.en: not a sentencepiece tokenizer model"):
        Tokenizer(wrong)
