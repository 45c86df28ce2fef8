"""Everything a run needs before the first step: files, tokenizer, token ids, batches (§5.1).

`prepare(config, run_dir)` resolves the task's files (generating the built-in
task into `run_dir/data`), trains the shared BPE tokenizer on the training
text or reuses `run_dir/tokenizer.model`, tokenizes the training corpus into a
memory-mapped cache (`run_dir/cache/train`), reads the validation and test
pairs, and cuts the training pairs into token-budget batches.

Model inputs (§3.1: "the output embeddings are offset by one position"):
source = ids + [EOS]; target input = [BOS] + ids; target output = ids + [EOS].
So each side costs len(ids) + 1 positions, and that is what batching counts.

Shapes: B pairs in a batch, S source length, T target length.
"""

from dataclasses import dataclass
from pathlib import Path

import numpy as np

from train import ptb, tasks
from train.batching import make_batches, pad_batch
from train.config import RunConfig, TaskConfig
from train.data import TokenizedCorpus, iter_parallel, multi30k_paths, read_parallel, shared_data_dir
from train.errors import InputError
from train.tokenizer import BOS_ID, EOS_ID, PAD_ID, Tokenizer

TOKENIZER_FILE = "tokenizer.model"


@dataclass
class Split:
    """Validation or test pairs held in memory: the text (for BLEU) and the ids."""

    src_path: Path
    tgt_path: Path
    src_text: list[str]
    tgt_text: list[str]
    src_ids: list[list[int]]
    tgt_ids: list[list[int]]


@dataclass
class Prepared:
    tokenizer: Tokenizer
    train: TokenizedCorpus
    train_index: np.ndarray  # corpus indices of the pairs kept for training (within max_len)
    batches: list[np.ndarray]  # each: corpus indices of one batch
    valid: Split
    test: Split | None
    paths: dict[str, tuple[Path, Path] | None]


def _shared_path(value: str, key: str) -> Path:
    root = shared_data_dir()
    if root is None:
        raise InputError(f"task.{key} = {value!r}: the shared data folder (<repo>/../shared/data) "
                         f"is not here; point task.{key} at your own file")
    return root / value.removeprefix("shared:")


def _task_path(value: str, key: str) -> Path:
    """A path from the config: `shared:...` is under ../shared/data, anything else is the user's."""
    return _shared_path(value, key) if value.startswith("shared:") else Path(value).expanduser()


def resolve_paths(task: TaskConfig, run_dir: Path) -> dict[str, tuple[Path, Path] | None]:
    """{"train": (src, tgt), "valid": (src, tgt), "test": (src, tgt) or None} for the task."""
    if task.kind == "builtin":
        data_dir = run_dir / "data"
        if not (data_dir / "test.de").is_file():  # generation is deterministic: reuse what is there
            tasks.write_task(data_dir, seed=task.seed, n_train=task.n_train, n_valid=task.n_valid,
                             n_test=task.n_test)
        return {split: (data_dir / f"{split}.en", data_dir / f"{split}.de") for split in tasks.SPLITS}
    if task.kind == "ptb":  # §6.3 parsing: treebank files -> (words, linearised tree) files in run_dir/data
        ranges = {split: getattr(task, f"treebank_{split}") for split in ptb.SPLITS}
        return ptb.write_splits(_task_path(task.treebank, "treebank"), ranges, run_dir / "data")
    if task.kind == "multi30k":
        return {"train": multi30k_paths("train"), "valid": multi30k_paths("val"),
                "test": multi30k_paths("test")}
    paths: dict[str, tuple[Path, Path] | None] = {}
    for split in ("train", "valid", "test"):
        pair = []
        for side in ("src", "tgt"):
            key, value = f"{split}_{side}", getattr(task, f"{split}_{side}")
            if not value:
                pair = None
                break
            pair.append(_task_path(value, key))
        if pair is None and split != "test":
            raise InputError(f"task.{split}_src and task.{split}_tgt must be set for task.kind = 'files' "
                             f"(edit the config or pass --set task.{split}_src=PATH)")
        paths[split] = tuple(pair) if pair else None
    return paths


def load_or_train_tokenizer(config: RunConfig, run_dir: Path, train_paths: tuple[Path, Path],
                            log=print) -> Tokenizer:
    """run_dir/tokenizer.model if it exists, else a new one trained on both training sides (§5.1)."""
    path = run_dir / TOKENIZER_FILE
    if path.is_file():
        return Tokenizer(path)
    for _ in iter_parallel(*train_paths):  # line counts and UTF-8 first: fail before minutes of training
        pass
    cfg = config.tokenizer
    log(f"training a shared {cfg.model_type} tokenizer ({cfg.vocab_size} pieces) on {train_paths[0].name} "
        f"+ {train_paths[1].name}")
    return Tokenizer.train([Path(train_paths[0]), Path(train_paths[1])], run_dir / "tokenizer",
                           vocab_size=cfg.vocab_size, model_type=cfg.model_type,
                           sample_size=cfg.sample_size, seed=config.train.seed)


def read_split(paths: tuple[Path, Path], tokenizer: Tokenizer, limit: int, log=print) -> Split:
    """All pairs of a dev/test split; ids longer than the model's positions are cut to `limit`
    (the text, which BLEU scores, is kept whole), and the cut is reported."""
    pairs, _ = read_parallel(*paths)
    src_text, tgt_text = [p[0] for p in pairs], [p[1] for p in pairs]
    src_ids, tgt_ids = tokenizer.encode_batch(src_text), tokenizer.encode_batch(tgt_text)
    cut = sum(len(s) > limit or len(t) > limit for s, t in zip(src_ids, tgt_ids))
    if cut:
        log(f"{paths[0]}: {cut} pairs longer than {limit} tokens are cut to fit the model's positions")
    return Split(paths[0], paths[1], src_text, tgt_text,
                 [s[:limit] for s in src_ids], [t[:limit] for t in tgt_ids])


def prepare(config: RunConfig, run_dir: Path, log=print) -> Prepared:
    run_dir = Path(run_dir)
    _remove_partial_files(run_dir)
    paths = resolve_paths(config.task, run_dir)
    tokenizer = load_or_train_tokenizer(config, run_dir, paths["train"], log)
    corpus = TokenizedCorpus.build(*paths["train"], tokenizer, run_dir / "cache" / "train")
    limit = min(config.task.max_len, config.model.max_len - 1)  # one position for BOS/EOS
    index = corpus.indices_within(limit)
    if len(index) == 0:
        raise InputError(f"{paths['train'][0]}: no training pair has both sides within "
                         f"task.max_len = {limit} tokens")
    dropped = len(corpus) - len(index)
    log(f"training pairs: {len(index)} kept, {dropped} longer than {limit} tokens dropped, "
        f"{corpus.stats.n_empty} empty skipped")
    positions = make_batches(corpus.src_lengths[index] + 1, corpus.tgt_lengths[index] + 1,
                             config.train.max_tokens, seed=config.train.seed)
    batches = [index[b] for b in positions]
    valid = read_split(paths["valid"], tokenizer, limit, log)
    test = read_split(paths["test"], tokenizer, limit, log) if paths.get("test") else None
    return Prepared(tokenizer, corpus, index, batches, valid, test, paths)


def _remove_partial_files(run_dir: Path) -> None:
    """Delete what a killed preparation left half written: temporaries of atomic writes (*.tmp-<pid>)
    and raw id streams of an unfinished corpus cache (cache/*/*.raw). None of them is ever read."""
    for pattern in ("*.tmp-*", "data/*.tmp-*", "cache/*/*.tmp-*", "cache/*/*.raw"):
        for stale in run_dir.glob(pattern):
            stale.unlink(missing_ok=True)


def make_model_inputs(src_ids, tgt_ids) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(src (B,S), tgt_in (B,T), tgt_out (B,T)) int64 arrays, padded with PAD_ID."""
    src = pad_batch([np.append(s, EOS_ID) for s in src_ids], PAD_ID)  # (B, S)
    tgt_in = pad_batch([np.concatenate(([BOS_ID], t)) for t in tgt_ids], PAD_ID)  # (B, T)
    tgt_out = pad_batch([np.append(t, EOS_ID) for t in tgt_ids], PAD_ID)  # (B, T)
    return src, tgt_in, tgt_out


def corpus_batch(corpus: TokenizedCorpus, indices: np.ndarray):
    """Model inputs for a batch of corpus indices."""
    pairs = [corpus.pair(int(i)) for i in indices]
    return make_model_inputs([p[0] for p in pairs], [p[1] for p in pairs])


def split_batches(split: Split, max_tokens: int) -> list[np.ndarray]:
    """Token-budget batches over a validation/test split (fixed order: seed 0)."""
    src_len = np.array([len(s) + 1 for s in split.src_ids])
    tgt_len = np.array([len(t) + 1 for t in split.tgt_ids])
    longest = int(max(src_len.max(), tgt_len.max())) if len(src_len) else 1
    return make_batches(src_len, tgt_len, max(max_tokens, longest), seed=0)
