"""A tokenized parallel corpus in memory-mapped arrays, encoded by several processes (§5.1).

§5.1 trains on WMT 2014 En-De, about 4.5M sentence pairs: too many to hold as
Python lists. `TokenizedCorpus.build` streams the two files once, in chunks of
pairs; each chunk is encoded (by a pool of worker processes for a large corpus,
in this process for a small one) and appended, in order, to raw id streams that
become `.npy` arrays (no pickle) at the end. Memory stays at a few chunks of text
and ids whatever the corpus size.

Layout of a corpus folder:
    {src,tgt}_ids.npy      every sentence's ids back to back: uint16 when the
                           vocabulary has at most 65536 pieces, else int32
    {src,tgt}_offsets.npy  int64, n+1 entries: sentence i is ids[offsets[i]:offsets[i+1]]
    meta.json              format, read stats, dtype; written last (the folder is complete)

Token ids are stored without BOS/EOS; whoever builds model inputs adds them (and
adds 1 to the lengths used for batching). Pairs with an empty side are skipped
(counted in `stats.n_empty`).
"""

import collections
import itertools
import json
import os
import threading
import time
from concurrent.futures import ProcessPoolExecutor
from concurrent.futures.process import BrokenProcessPool
from multiprocessing import get_context
from pathlib import Path

import numpy as np
from tqdm import tqdm

from train.data.files import ReadStats, iter_parallel, write_atomic
from train.data.progress import progress_bar
from train.errors import InputError
from train.threads import usable_cores

CORPUS_FORMAT = 2  # 2: ids as uint16 when the vocabulary fits
POOL_MIN_BYTES = 64 << 20  # below this much text, starting worker processes costs more than it saves


def ids_dtype(vocab_size: int) -> np.dtype:
    """uint16 holds ids 0..65535: half the disk and page cache of int32 for every real vocabulary (§5.1: 37000)."""
    return np.dtype(np.uint16) if vocab_size <= 1 << 16 else np.dtype(np.int32)


def default_workers(text_bytes: int) -> int:
    """Encoding processes for a corpus of this size: one per usable core (at most 16), or 1 (no pool) when small."""
    return 1 if text_bytes < POOL_MIN_BYTES else max(1, min(usable_cores(), 16))


def encode_pairs(encode_batch, src: list[str], tgt: list[str], dtype) -> tuple[np.ndarray, ...]:
    """(src ids, src lengths, tgt ids, tgt lengths) of a chunk: flat ids in `dtype`, int64 lengths."""
    out = []
    for texts in (src, tgt):
        ids = encode_batch(texts)
        lengths = np.fromiter(map(len, ids), np.int64, len(ids))
        out += [np.fromiter(itertools.chain.from_iterable(ids), dtype, int(lengths.sum())), lengths]
    return tuple(out)


def _encode_in_worker(model_path: str, src: list[str], tgt: list[str], dtype: str) -> tuple[np.ndarray, ...]:
    """One chunk in a worker process; the tokenizer is loaded per chunk (milliseconds), so workers hold no state."""
    from train.data.tokenizer import Tokenizer

    return encode_pairs(Tokenizer(model_path).encode_batch, src, tgt, np.dtype(dtype))


def _exit_with_parent(parent: int) -> None:
    """Worker initializer: end this worker when the process that started it is gone (even after kill -9)."""
    def watch():
        while os.getppid() == parent:
            time.sleep(1.0)
        os._exit(1)

    threading.Thread(target=watch, daemon=True).start()


def _chunks(src_path: Path, tgt_path: Path, chunk_pairs: int, counts: dict, bar: tqdm, digests):
    """Lists of non-empty (source, target) texts, `chunk_pairs` at a time; counts lines and empty pairs."""
    src, tgt = [], []
    for counts["lines"], s, t in iter_parallel(src_path, tgt_path, digests):
        bar.update()
        if not s or not t:
            counts["empty"] += 1
            continue
        src.append(s)
        tgt.append(t)
        if len(src) >= chunk_pairs:
            yield src, tgt
            src, tgt = [], []
    if src:
        yield src, tgt


def _encoded_chunks(chunks, tokenizer, dtype, workers: int):
    """Encoded chunks in input order; with workers > 1 at most 2 per worker are in flight."""
    if workers <= 1:
        for src, tgt in chunks:
            yield encode_pairs(tokenizer.encode_batch, src, tgt, dtype)
        return
    model_path = getattr(tokenizer, "model_path", None)
    if model_path is None:
        raise ValueError("encoding with workers > 1 needs a tokenizer loaded from a file (model_path)")
    pool = ProcessPoolExecutor(workers, mp_context=get_context("spawn"), initializer=_exit_with_parent,
                               initargs=(os.getpid(),))
    try:
        pending = collections.deque()
        for src, tgt in chunks:
            pending.append(pool.submit(_encode_in_worker, str(model_path), src, tgt, dtype.str))
            if len(pending) >= 2 * workers:
                yield pending.popleft().result()
        while pending:
            yield pending.popleft().result()
    except BrokenProcessPool:  # a worker was killed (the OOM killer, say): its chunk is lost
        raise InputError(f"an encoding worker process died (killed, perhaps for lack of memory); nothing was "
                         f"stored; run again, with fewer workers (--workers N) if memory is short") from None
    finally:
        pool.shutdown(wait=True, cancel_futures=True)  # on an error or Ctrl-C: drop what has not started


class _ArrayWriter:
    """Appends int arrays to a raw file, then turns it into a `.npy` of known length."""

    def __init__(self, path: Path, dtype):
        self.path, self.dtype, self.count = path, np.dtype(dtype), 0
        self.raw_path = path.with_suffix(".raw")
        self.file = open(self.raw_path, "wb")

    def append(self, values: np.ndarray) -> None:
        self.file.write(np.ascontiguousarray(values, dtype=self.dtype).tobytes())
        self.count += len(values)

    def abandon(self) -> None:
        self.file.close()
        self.raw_path.unlink(missing_ok=True)

    def finish(self, chunk: int = 1 << 22) -> None:
        # The .npy header holds the length, known only now; copy in chunks so memory stays flat.
        self.file.close()
        out = np.lib.format.open_memmap(self.path, mode="w+", dtype=self.dtype, shape=(self.count,))
        if self.count:
            raw = np.memmap(self.raw_path, dtype=self.dtype, mode="r", shape=(self.count,))
            for start in range(0, self.count, chunk):
                out[start:start + chunk] = raw[start:start + chunk]
            del raw
        out.flush()
        del out
        self.raw_path.unlink()


class TokenizedCorpus:
    """Token ids of a parallel corpus in memory-mapped `.npy` files, one pair per index."""

    def __init__(self, folder: str | Path):
        self.folder = Path(folder)
        self.meta = json.loads((self.folder / "meta.json").read_text(encoding="utf-8"))
        self.stats = ReadStats(**self.meta["stats"])
        self.src_ids, self.src_offsets = self._load("src_ids"), self._load("src_offsets")
        self.tgt_ids, self.tgt_offsets = self._load("tgt_ids"), self._load("tgt_offsets")
        self.src_lengths = np.diff(self.src_offsets).astype(np.int32)  # (n,)
        self.tgt_lengths = np.diff(self.tgt_offsets).astype(np.int32)  # (n,)

    def _load(self, name: str) -> np.ndarray:
        return np.load(self.folder / f"{name}.npy", mmap_mode="r", allow_pickle=False)

    def __len__(self) -> int:
        return len(self.src_lengths)

    def pair(self, i: int) -> tuple[np.ndarray, np.ndarray]:
        """(source ids, target ids) of pair i, as read-only views into the memmaps."""
        s0, s1 = self.src_offsets[i], self.src_offsets[i + 1]
        t0, t1 = self.tgt_offsets[i], self.tgt_offsets[i + 1]
        return self.src_ids[s0:s1], self.tgt_ids[t0:t1]

    def indices_within(self, max_len: int) -> np.ndarray:
        """Indices of pairs whose sides both have at most `max_len` tokens (int64)."""
        return np.flatnonzero((self.src_lengths <= max_len) & (self.tgt_lengths <= max_len))

    @classmethod
    def build(cls, src_path: str | Path, tgt_path: str | Path, tokenizer, folder: str | Path,
              workers: int = 1, chunk_pairs: int = 20_000, total_lines: int | None = None,
              progress: bool = False, digests=(None, None)) -> "TokenizedCorpus":
        """Tokenize the pair of files into `folder` (created; existing arrays there are replaced).

        `tokenizer` needs `encode_batch(list[str]) -> list[list[int]]` and `vocab_size`
        (and `model_path` for workers > 1). The arrays are identical for any `workers`.
        `total_lines` (if known) gives the progress bar its end. `digests`: hashlib objects that
        receive the bytes of the source and target file as they are read (files.iter_lines).
        """
        src_path, tgt_path, folder = Path(src_path), Path(tgt_path), Path(folder)
        for path in (src_path, tgt_path):
            if not path.is_file():
                raise InputError(f"{path}: file not found")
        folder.mkdir(parents=True, exist_ok=True)
        (folder / "meta.json").unlink(missing_ok=True)  # incomplete from here until written again
        dtype = ids_dtype(tokenizer.vocab_size)
        writers = {name: _ArrayWriter(folder / f"{name}.npy", np.int64 if "offsets" in name else dtype)
                   for name in ("src_ids", "tgt_ids", "src_offsets", "tgt_offsets")}
        ends = {"src": 0, "tgt": 0}  # running end offset of each side
        for side in ends:
            writers[f"{side}_offsets"].append(np.zeros(1, np.int64))
        counts = {"lines": 0, "empty": 0}
        bar = progress_bar(progress, total=total_lines, unit=" pairs", desc="encoding")
        try:
            chunks = _chunks(src_path, tgt_path, chunk_pairs, counts, bar, digests)
            for src_ids, src_len, tgt_ids, tgt_len in _encoded_chunks(chunks, tokenizer, dtype, workers):
                for side, ids, lengths in (("src", src_ids, src_len), ("tgt", tgt_ids, tgt_len)):
                    writers[f"{side}_ids"].append(ids)
                    writers[f"{side}_offsets"].append(ends[side] + np.cumsum(lengths))
                    ends[side] += int(lengths.sum())
        except BaseException:
            for writer in writers.values():  # leave no temporary files behind
                writer.abandon()
            raise
        finally:
            bar.close()
        for writer in writers.values():
            writer.finish()
        stats = ReadStats(n_lines=counts["lines"], n_empty=counts["empty"], n_too_long=0,
                          n_kept=counts["lines"] - counts["empty"])
        meta = {"format": CORPUS_FORMAT, "dtype": dtype.name, "stats": stats.__dict__}
        write_atomic(folder / "meta.json", json.dumps(meta, indent=1).encode("utf-8"))  # last: complete
        return cls(folder)
