"""One shared subword vocabulary for source and target, via sentencepiece (§5.1).

§5.1: "Sentences were encoded using byte-pair encoding, which has a shared
source-target vocabulary of about 37000 tokens" (En-De), and for En-Fr "split
tokens into a 32000 word-piece vocabulary". `model_type="bpe"` (the default)
is the first; `model_type="unigram"` is the word-piece-like option. A shared
vocabulary is what lets §3.4 tie the two embedding matrices and the pre-softmax
weights.

Special ids are fixed for every model we train: pad=0, unk=1, bos=2, eos=3.
`model_hash` (sha256 of the model file) goes into checkpoints and caches so a
model is never paired with the wrong tokenizer.

Training is deterministic: the same text and settings give a byte-identical model
file, in any process. sentencepiece's own sampling (`input_sentence_size` with
`shuffle_input_sentence`) differs from one process to the next, so when the text
has more than `sample_size` sentences we draw the sample ourselves, with a seeded
NumPy generator, and feed exactly that sample.
"""

import contextlib
import hashlib
import io
import os
import re
import sys
import threading
import warnings
from collections.abc import Iterable, Iterator, Sequence
from pathlib import Path

import numpy as np
import sentencepiece as spm
from tqdm import tqdm

from train.data.files import count_lines, iter_lines, write_atomic
from train.data.progress import progress_bar
from train.errors import InputError

PAD_ID, UNK_ID, BOS_ID, EOS_ID = 0, 1, 2, 3
_MERGES_IN_LOG = re.compile(rb"merges=(\d+)")  # sentencepiece's BPE log line, every 100 merges


def _lines(item: str | Path, digests: dict) -> Iterator[str]:
    """Path objects are files (`.gz` allowed; their bytes go into digests[path] when given), plain strings are
    one sentence."""
    if isinstance(item, Path):
        for _, line in iter_lines(item, digests.get(item)):
            yield line
    else:
        yield item


def _sample(items: list[str | Path], sample_size: int, seed: int, digests: dict) -> tuple[Iterator[str], int]:
    """(the non-empty sentences to train on, how many lines they were drawn from): every line when
    there are at most `sample_size`, else `sample_size` lines chosen by a generator seeded with `seed`."""
    total = sum(count_lines(item) if isinstance(item, Path) else 1 for item in items)
    keep = None
    if total > sample_size:
        keep = np.zeros(total, dtype=bool)
        keep[np.random.default_rng(seed).choice(total, sample_size, replace=False)] = True

    def sentences() -> Iterator[str]:
        index = 0
        for item in items:
            for line in _lines(item, digests):
                if line and (keep is None or keep[index]):
                    yield line
                index += 1
    return sentences(), total


@contextlib.contextmanager
def _progress_from_log(bar: tqdm):
    """While sentencepiece trains, read its log from stderr (fd 2) and move `bar` with the count it reports.

    The C++ library logs to fd 2 directly; a pipe takes its place for the duration, and a
    thread turns its "merges=N" lines into bar positions (BPE; unigram training only shows time).
    The bar itself must write to a copy of fd 2 made before (`_stderr_copy`), or it would be
    swallowed by the pipe too (a bar that sat at 0% and jumped to 100%).
    """
    sys.stderr.flush()
    saved = os.dup(2)
    read_end, write_end = os.pipe()
    os.dup2(write_end, 2)
    os.close(write_end)

    def pump():
        with os.fdopen(read_end, "rb") as log:
            for line in log:
                if (found := _MERGES_IN_LOG.search(line)) and bar.total:
                    bar.update(max(min(int(found.group(1)), bar.total) - bar.n, 0))  # only forward

    reader = threading.Thread(target=pump, daemon=True)
    reader.start()
    try:
        yield
    finally:
        os.dup2(saved, 2)  # closes the pipe's last write end: the reader sees the end and stops
        os.close(saved)
        reader.join()


@contextlib.contextmanager
def _stderr_copy():
    """stderr as a text file on a copy of fd 2: what the bar writes to while fd 2 feeds the log pipe."""
    sys.stderr.flush()
    with os.fdopen(os.dup(2), "w", encoding="utf-8", errors="replace", buffering=1) as copy:
        yield copy


def _counted(sentences: Iterator[str], bar: tqdm, vocab_size: int, model_type: str) -> Iterator[str]:
    """The sentences, moving `bar`; once they run out, the bar turns to the training phase."""
    for sentence in sentences:
        bar.update()
        yield sentence
    bar.unit = " pieces"
    bar.set_description("tokenizer: BPE merges" if model_type == "bpe" else "tokenizer: unigram EM", refresh=False)
    bar.reset(total=vocab_size if model_type == "bpe" else None)


class Tokenizer:
    """A trained sentencepiece model with our fixed special ids."""

    def __init__(self, model_path: str | Path):
        self.model_path = Path(model_path)
        if not self.model_path.is_file():
            raise InputError(f"{self.model_path}: tokenizer model not found")
        try:
            self.processor = spm.SentencePieceProcessor(model_file=str(self.model_path))
        except (RuntimeError, OSError) as err:  # sentencepiece: "could not parse ModelProto"
            raise InputError(f"{self.model_path}: not a sentencepiece tokenizer model ({err})") from None
        self.model_hash = hashlib.sha256(self.model_path.read_bytes()).hexdigest()
        self.clamped_from: int | None = None  # requested vocab size, when train() had to lower it
        specials = (self.processor.pad_id(), self.processor.unk_id(),
                    self.processor.bos_id(), self.processor.eos_id())
        if specials != (PAD_ID, UNK_ID, BOS_ID, EOS_ID):
            raise InputError(f"{self.model_path}: special ids (pad, unk, bos, eos) are {specials}, "
                             f"expected {(PAD_ID, UNK_ID, BOS_ID, EOS_ID)}; retrain the tokenizer")

    @classmethod
    def load(cls, path: str | Path) -> "Tokenizer":
        return cls(path)

    @classmethod
    def train(cls, texts_or_paths: Iterable[str | Path], model_prefix: str | Path,
              vocab_size: int, model_type: str = "bpe", sample_size: int = 2_000_000,
              character_coverage: float = 1.0, seed: int = 0, progress: bool = False,
              digests: dict | None = None) -> "Tokenizer":
        """Train one model on source and target text together.

        `texts_or_paths`: sentences (str) and/or files (pathlib.Path, one
        sentence a line; pass both sides of the corpus). Writes `<model_prefix>.model`
        and a readable `<model_prefix>.vocab`. At most `sample_size` lines,
        drawn with a generator seeded by `seed`, are used, so WMT-size corpora stay
        cheap and the model is the same in every run. On a corpus too small for
        `vocab_size` the vocabulary is smaller; a warning says so and
        `clamped_from` keeps the requested size. `progress` shows bars (reading the
        sample, then the merges or pruning) on stderr: drawn on a terminal, as lines in a log.
        `digests`: {path: hashlib object} receiving each file's bytes as the sample is read (files.iter_lines).
        """
        if model_type not in ("bpe", "unigram", "word"):
            raise InputError(f"tokenizer model_type must be 'bpe', 'unigram' or 'word', got {model_type!r}")
        if vocab_size < 8:
            raise InputError(f"vocab_size must be at least 8 (4 special ids), got {vocab_size}")
        prefix = Path(model_prefix)
        prefix.parent.mkdir(parents=True, exist_ok=True)
        sentences, total = _sample(list(texts_or_paths), sample_size, seed, digests or {})
        spm.set_random_generator_seed(seed)  # nothing should draw from it; seeded all the same
        model = io.BytesIO()  # not model_prefix: the file would record its own path, and the
        try:                  # same text and settings would give a different model_hash
            with contextlib.ExitStack() as stack:
                bar = progress_bar(progress, file=stack.enter_context(_stderr_copy()) if progress else None,
                                   total=min(total, sample_size), unit=" lines", desc="tokenizer: reading sample")
                stack.callback(bar.close)
                with _progress_from_log(bar) if progress else contextlib.nullcontext():
                    spm.SentencePieceTrainer.train(
                        sentence_iterator=_counted(sentences, bar, vocab_size, model_type), model_writer=model,
                        vocab_size=vocab_size, model_type=model_type,
                        character_coverage=character_coverage,
                        input_sentence_size=0, shuffle_input_sentence=False,  # the sample is ours (see above)
                        hard_vocab_limit=False,  # small corpora: fewer pieces instead of an error
                        pad_id=PAD_ID, unk_id=UNK_ID, bos_id=BOS_ID, eos_id=EOS_ID,
                        minloglevel=0 if progress else 2)  # the log feeds the bar; else only errors
                bar.update((bar.total or bar.n) - bar.n)  # done, once the log is read (it counts merges only)
        except RuntimeError as err:
            message = str(err).splitlines()[0] if str(err) else "unknown error"
            raise InputError(f"tokenizer training failed: {message}") from None
        model_path = prefix.with_name(prefix.name + ".model")
        write_atomic(model_path, model.getvalue())  # a kill mid-write must not leave a model to reuse
        tokenizer = cls(model_path)
        tokenizer.write_vocab(prefix.with_name(prefix.name + ".vocab"))
        if tokenizer.vocab_size < vocab_size:
            tokenizer.clamped_from = vocab_size
            warnings.warn(f"the training text only supports {tokenizer.vocab_size} subword pieces; "
                          f"vocab_size lowered from {vocab_size}", stacklevel=2)
        return tokenizer

    def write_vocab(self, path: str | Path) -> None:
        """The readable vocabulary beside the model: piece<TAB>score, one a line, by id."""
        sp = self.processor
        Path(path).write_text("".join(f"{sp.id_to_piece(i)}\t{sp.get_score(i)}\n" for i in range(sp.get_piece_size())),
                              encoding="utf-8")

    @property
    def vocab_size(self) -> int:
        return self.processor.get_piece_size()

    pad_id, unk_id, bos_id, eos_id = PAD_ID, UNK_ID, BOS_ID, EOS_ID

    def encode(self, text: str) -> list[int]:
        """Subword ids of one sentence, without BOS/EOS."""
        return self.processor.encode(text, out_type=int)

    def encode_batch(self, texts: Sequence[str]) -> list[list[int]]:
        """Subword ids of many sentences, without BOS/EOS."""
        return self.processor.encode(list(texts), out_type=int)

    def decode(self, ids: Iterable[int]) -> str:
        """Text of an id sequence: stops at the first EOS, drops PAD and BOS."""
        kept = []
        for i in ids:
            i = int(i)
            if i == EOS_ID:
                break
            if i not in (PAD_ID, BOS_ID):
                kept.append(i)
        return self.processor.decode(kept)

    def pieces(self, text: str) -> list[str]:
        """The subword strings of a sentence, for showing what the model sees."""
        return self.processor.encode(text, out_type=str)
