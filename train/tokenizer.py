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
"""

import hashlib
import io
import warnings
from collections.abc import Iterable, Iterator, Sequence
from pathlib import Path

import sentencepiece as spm

from train.data import iter_lines, write_atomic
from train.errors import InputError

PAD_ID, UNK_ID, BOS_ID, EOS_ID = 0, 1, 2, 3


def _sentences(texts_or_paths: Iterable[str | Path]) -> Iterator[str]:
    """Path objects are files (`.gz` allowed), plain strings are sentences."""
    for item in texts_or_paths:
        if isinstance(item, Path):
            for _, line in iter_lines(item):
                if line:
                    yield line
        elif item:
            yield item


class Tokenizer:
    """A trained sentencepiece model with our fixed special ids."""

    def __init__(self, model_path: str | Path):
        self.model_path = Path(model_path)
        if not self.model_path.is_file():
            raise InputError(f"{self.model_path}: tokenizer model not found")
        self.processor = spm.SentencePieceProcessor(model_file=str(self.model_path))
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
              character_coverage: float = 1.0, seed: int = 0) -> "Tokenizer":
        """Train one model on source and target text together.

        `texts_or_paths`: sentences (str) and/or files (pathlib.Path, one
        sentence a line; pass both sides of the corpus). Writes `<model_prefix>.model`
        and a readable `<model_prefix>.vocab`. At most `sample_size`
        sentences, drawn at random, are used, so WMT-size corpora stay cheap.
        On a corpus too small for `vocab_size` the vocabulary is smaller; a
        warning says so and `clamped_from` keeps the requested size.
        """
        if model_type not in ("bpe", "unigram", "word"):
            raise InputError(f"tokenizer model_type must be 'bpe', 'unigram' or 'word', got {model_type!r}")
        if vocab_size < 8:
            raise InputError(f"vocab_size must be at least 8 (4 special ids), got {vocab_size}")
        prefix = Path(model_prefix)
        prefix.parent.mkdir(parents=True, exist_ok=True)
        # sentencepiece has no per-call seed; this seeds its sampler (the only randomness).
        spm.set_random_generator_seed(seed)
        model = io.BytesIO()  # not model_prefix: the file would record its own path, and the
        try:                  # same text and settings would give a different model_hash
            spm.SentencePieceTrainer.train(
                sentence_iterator=_sentences(texts_or_paths), model_writer=model,
                vocab_size=vocab_size, model_type=model_type,
                character_coverage=character_coverage,
                input_sentence_size=sample_size, shuffle_input_sentence=True,  # random sample
                hard_vocab_limit=False,  # small corpora: fewer pieces instead of an error
                pad_id=PAD_ID, unk_id=UNK_ID, bos_id=BOS_ID, eos_id=EOS_ID,
                minloglevel=2)  # only errors on the console
        except RuntimeError as err:
            message = str(err).splitlines()[0] if str(err) else "unknown error"
            raise InputError(f"tokenizer training failed: {message}") from None
        model_path = prefix.with_name(prefix.name + ".model")
        write_atomic(model_path, model.getvalue())  # a kill mid-write must not leave a model to reuse
        tokenizer = cls(model_path)
        sp = tokenizer.processor  # a readable `<prefix>.vocab` beside it: piece<TAB>score
        vocab = "".join(f"{sp.id_to_piece(i)}\t{sp.get_score(i)}\n"
                        for i in range(sp.get_piece_size()))
        prefix.with_name(prefix.name + ".vocab").write_text(vocab, encoding="utf-8")
        if tokenizer.vocab_size < vocab_size:
            tokenizer.clamped_from = vocab_size
            warnings.warn(f"the training text only supports {tokenizer.vocab_size} subword pieces; "
                          f"vocab_size lowered from {vocab_size}", stacklevel=2)
        return tokenizer

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
