"""Everything a run needs before the first step: prepared data, dev/test pairs, batches (§5.1).

`prepare(config, run_dir, data_dir)` gets the prepared tokenizer and token ids from
train/data/store.py (made once, shared by runs: `python -m train prepare`), copies
the tokenizer into the run directory (where `translate` and `evaluate` look for it),
records in `run_dir/prepared.json` which data the run uses, reads the validation and
test pairs, and cuts the training pairs into token-budget batches.

A run that resumes must find the same data: every input file's sha256 is compared with
the record, and a difference is an InputError that names the file.

Model inputs (§3.1: "the output embeddings are offset by one position"):
source = ids + [EOS]; target input = [BOS] + ids; target output = ids + [EOS].
So each side costs len(ids) + 1 positions, and that is what batching counts.

Shapes: B pairs in a batch, S source length, T target length.
"""

import json
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from train.config import RunConfig
from train.data.batching import make_batches, pad_batch
from train.data.corpus import TokenizedCorpus
from train.data.files import read_parallel, write_atomic
from train.data.store import SPLIT_FILES, PreparedData, prepare_data
from train.data.tokenizer import BOS_ID, EOS_ID, PAD_ID, Tokenizer
from train.errors import InputError

TOKENIZER_FILE = "tokenizer.model"
RECORD_FILE = "prepared.json"


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


def prepare(config: RunConfig, run_dir: Path, batch_tokens: int, data_dir: Path | None = None,
            resuming: bool = False, log=print, progress: bool = False) -> Prepared:
    """Prepared data for the run; with `resuming`, an InputError if it is not the data the run started on.

    The training pairs are cut into batches of `batch_tokens` padded tokens per side, the
    update plan's micro-batch (train/distributed/global_batch.py).
    """
    run_dir = Path(run_dir)
    _remove_partial_files(run_dir)
    data = prepare_data(config, data_dir if data_dir is not None else default_data_dir(run_dir), log=log,
                        progress=progress)
    _record_data(run_dir, data, resuming)
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


def _record_data(run_dir: Path, data: PreparedData, resuming: bool) -> None:
    """Check (resuming) or write run_dir/prepared.json, and keep the run's copy of the tokenizer."""
    record = {"data": str(data.folder), "key": data.key, "tokenizer_sha256": data.tokenizer.model_hash,
              "files": {name: {k: v[k] for k in ("path", "size", "sha256")} for name, v in data.files.items()}}
    path = run_dir / RECORD_FILE
    if resuming and path.is_file():
        old = json.loads(path.read_text(encoding="utf-8"))
        changed = [_describe_change(name, old["files"].get(name), record["files"].get(name)) for name in SPLIT_FILES
                   if _sha256(old["files"].get(name)) != _sha256(record["files"].get(name))]
        if old["tokenizer_sha256"] != record["tokenizer_sha256"] and not changed:
            changed = [f"the tokenizer ({old['tokenizer_sha256'][:12]} -> {record['tokenizer_sha256'][:12]})"]
        if changed:
            raise InputError(f"{run_dir}: the data changed since this run started: {'; '.join(changed[:2])}; "
                             f"resume on the same data, use another --run-dir, or --force to start over")
    for name in (TOKENIZER_FILE, "tokenizer.vocab"):
        source, target = data.folder / name, run_dir / name
        if target.is_file() and target.read_bytes() == source.read_bytes():
            continue
        if resuming and name == TOKENIZER_FILE and target.is_file():  # never replace a run's vocabulary
            raise InputError(f"{target}: differs from the prepared tokenizer {source}; "
                             f"resume on the same data, use another --run-dir, or --force to start over")
        write_atomic(target, source.read_bytes())
    text = json.dumps(record, indent=1).encode("utf-8")
    if not path.is_file() or path.read_bytes() != text:
        write_atomic(path, text)


def _sha256(file: dict | None) -> str | None:
    return None if file is None else file["sha256"]


def _describe_change(name: str, old: dict | None, new: dict | None) -> str:
    key = f"task.{name}"
    if old is None or new is None:
        return f"{key} was {'added' if old is None else 'removed'}"
    where = new["path"] if new["path"] == old["path"] else f"{old['path']} -> {new['path']}"
    return f"{key} {where} has other contents (sha256 {old['sha256'][:12]} -> {new['sha256'][:12]})"


def _remove_partial_files(run_dir: Path) -> None:
    """Delete the temporaries of atomic writes a killed run left in the run directory (*.tmp-<pid>)."""
    for stale in run_dir.glob("*.tmp-*"):
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
