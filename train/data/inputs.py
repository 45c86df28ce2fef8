"""Everything a run needs before the first step: prepared data, dev/test pairs, batches (§5.1).

`prepare(config, data_dir, batch_tokens)` gets the prepared tokenizer and token ids from
train/data/store.py (made once, shared by runs: `python -m train prepare`), reads the
validation and test pairs, and cuts the training pairs into token-budget batches.
What the run directory records of its data is train/run/run_data.py's.

Model inputs (§3.1: "the output embeddings are offset by one position"):
source = ids + [EOS]; target input = [BOS] + ids; target output = ids + [EOS].
So each side costs len(ids) + 1 positions, and that is what batching counts.

Shapes: B pairs in a batch, S source length, T target length.
"""

import dataclasses
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from train.config import RunConfig
from train.data.batching import make_batches, pad_batch
from train.data.corpus import TokenizedCorpus
from train.data.files import read_parallel
from train.data.store import SPLIT_FILES, PreparedData, prepare_data
from train.data.tokenizer import BOS_ID, EOS_ID, PAD_ID, Tokenizer
from train.errors import InputError


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
    data: PreparedData


def default_data_dir(run_dir: Path) -> Path:
    """Prepared data lives beside the run directories (runs/demo -> runs/prepared), so runs share it."""
    return Path(run_dir).resolve().parent / "prepared"


TASK_FILES = (*SPLIT_FILES, "treebank")  # the task's keys that name files


def absolute_task_paths(config: RunConfig) -> RunConfig:
    """`config` with its relative file paths (task.train_src, ..., task.treebank) made absolute against the working
    directory: the run's config.json then names its files from wherever the run is resumed."""
    task = config.task
    absolute = {key: str(Path(value).expanduser().absolute()) for key in TASK_FILES
                if (value := getattr(task, key)) and not value.startswith("shared:") and not Path(value).is_absolute()}
    return dataclasses.replace(config, task=dataclasses.replace(task, **absolute)) if absolute else config


def read_split(paths: tuple[Path, Path], tokenizer: Tokenizer, limit: int, log=print) -> Split:
    """All pairs of a dev/test split; ids longer than the model's positions are cut to `limit`
    (the text, which BLEU scores, is kept whole), and the cut is reported."""
    pairs, stats = read_parallel(*paths)
    if not pairs:  # nothing to validate or test on: said before anyone trains
        raise InputError(f"{paths[0]}: none of its {stats.n_lines} lines pairs with text on both sides (with "
                         f"{paths[1]}); a dev or test set needs at least one sentence pair")
    src_text, tgt_text = [p[0] for p in pairs], [p[1] for p in pairs]
    src_ids, tgt_ids = tokenizer.encode_batch(src_text), tokenizer.encode_batch(tgt_text)
    cut = sum(len(s) > limit or len(t) > limit for s, t in zip(src_ids, tgt_ids))
    if cut:
        log(f"{paths[0]}: {cut} pairs longer than {limit} tokens are cut to fit the model's positions")
    return Split(paths[0], paths[1], src_text, tgt_text,
                 [s[:limit] for s in src_ids], [t[:limit] for t in tgt_ids])


def prepare(config: RunConfig, data_dir: Path, batch_tokens: int, check_files=None, log=print,
            progress: bool = False, tokenizer: Tokenizer | None = None) -> Prepared:
    """Prepared data for a run from `data_dir` (store.prepare_data, which passes `check_files` the hashed
    input files before preparing anything, and encodes with `tokenizer` when given), the dev and test
    pairs, and the training batches.

    The training pairs are cut into batches of `batch_tokens` padded tokens per side, the
    update plan's micro-batch (train/distributed/global_batch.py).
    """
    data = prepare_data(config, data_dir, log=log, progress=progress, check_files=check_files, tokenizer=tokenizer)
    tokenizer, corpus, paths = data.tokenizer, data.corpus, data.paths
    limit = min(config.task.max_len, config.model.max_len - 1)  # one position for BOS/EOS
    index = corpus.indices_within(limit)
    if len(index) == 0:
        raise InputError(f"{paths['train'][0]}: no training pair has both sides within "
                         f"task.max_len = {limit} tokens")
    dropped = len(corpus) - len(index)
    log(f"training pairs: {len(index)} kept, {dropped} longer than {limit} tokens dropped, "
        f"{corpus.stats.n_empty} empty skipped")
    positions = make_batches(corpus.src_lengths[index] + 1, corpus.tgt_lengths[index] + 1,
                             batch_tokens, seed=config.train.seed)
    batches = [index[b] for b in positions]
    valid = read_split(paths["valid"], tokenizer, limit, log)
    test = read_split(paths["test"], tokenizer, limit, log) if paths.get("test") else None
    return Prepared(tokenizer, corpus, index, batches, valid, test, paths, data)


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
