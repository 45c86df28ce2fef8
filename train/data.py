"""Reading parallel text: plain files, gzip, shared test sets, and a memory-mapped cache.

§5.1 trains on WMT 2014 En-De, about 4.5M sentence pairs. Two readers:
- `read_parallel` loads a small corpus (the built-in task, Multi30k) as Python
  strings, skipping empty pairs and, optionally, pairs that are too long.
- `TokenizedCorpus` is for WMT-size corpora: it tokenizes once, streaming in
  chunks, into memory-mapped int32 `.npy` arrays (no pickle) plus an int64
  offsets index per side, and reuses that cache until an input changes.

Files are UTF-8, one sentence a line; a name ending in `.gz` is read through
gzip. Every problem with the input raises `InputError` naming the file (and the
line, where there is one). Lines are stripped of surrounding whitespace.

Token ids are stored without BOS/EOS; whoever builds model inputs adds them
(and adds 1 to the lengths used for batching).
"""

import gzip
import json
import os
import resource
import sys
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from itertools import zip_longest
from pathlib import Path

import numpy as np

from train.errors import InputError

CACHE_FORMAT = 1  # bump when the cache layout changes, so old caches are rebuilt


def iter_lines(path: str | Path) -> Iterator[tuple[int, str]]:
    """Yield (line_number, stripped_text), line numbers from 1; `.gz` is decompressed.

    Bytes are decoded line by line, so a bad byte is reported with its line.
    """
    path = Path(path)
    if not path.is_file():
        raise InputError(f"{path}: file not found")
    opener = gzip.open if path.name.endswith(".gz") else open
    try:
        with opener(path, "rb") as f:
            for number, raw in enumerate(f, start=1):
                try:
                    text = raw.decode("utf-8")
                except UnicodeDecodeError:
                    raise InputError(f"{path}:{number}: not valid UTF-8") from None
                yield number, text.strip()
    except (gzip.BadGzipFile, EOFError) as err:
        raise InputError(f"{path}: not a readable gzip file ({err})") from None


def iter_parallel(src_path: str | Path, tgt_path: str | Path) -> Iterator[tuple[int, str, str]]:
    """Yield (line_number, source, target) for two files that must have equal line counts."""
    n_src = n_tgt = 0
    for src, tgt in zip_longest(iter_lines(src_path), iter_lines(tgt_path)):
        n_src += src is not None
        n_tgt += tgt is not None
        if src is not None and tgt is not None:
            yield src[0], src[1], tgt[1]
    if n_src == 0 or n_tgt == 0:
        raise InputError(f"{src_path if n_src == 0 else tgt_path}: empty file")
    if n_src != n_tgt:
        raise InputError(f"{src_path} has {n_src} lines but {tgt_path} has {n_tgt}; "
                         "parallel files must have one sentence a line, line for line")


@dataclass(frozen=True)
class ReadStats:
    """What reading kept and dropped (printed by the CLI so nothing is lost silently)."""

    n_lines: int  # lines in each file
    n_empty: int  # pairs skipped because the source or the target line was empty
    n_too_long: int  # pairs dropped because a side had more than max_len tokens
    n_kept: int


def whitespace_count(text: str) -> int:
    return len(text.split())


def read_parallel(src_path: str | Path, tgt_path: str | Path, max_len: int | None = None,
                  count_tokens: Callable[[str], int] = whitespace_count,
                  ) -> tuple[list[tuple[str, str]], ReadStats]:
    """Read a parallel corpus into memory as (source, target) string pairs.

    Pairs with an empty side are skipped; with `max_len`, pairs where either
    side has more than `max_len` tokens (as counted by `count_tokens`, e.g.
    `lambda s: len(tokenizer.encode(s))`) are dropped. Both are counted.
    """
    pairs, n_lines, n_empty, n_too_long = [], 0, 0, 0
    for n_lines, src, tgt in iter_parallel(src_path, tgt_path):
        if not src or not tgt:
            n_empty += 1
        elif max_len is not None and max(count_tokens(src), count_tokens(tgt)) > max_len:
            n_too_long += 1
        else:
            pairs.append((src, tgt))
    return pairs, ReadStats(n_lines, n_empty, n_too_long, len(pairs))


# ---------------------------------------------------------------- shared data
def shared_data_dir() -> Path | None:
    """`<repo>/../shared/data` if it exists (it does not in a fresh clone), else None."""
    path = (Path(__file__).resolve().parents[1] / ".." / "shared" / "data").resolve()
    return path if path.is_dir() else None


MULTI30K_SPLITS = {"train": "train", "val": "val", "valid": "val",
                   "test": "test_2016_flickr", "test_2016_flickr": "test_2016_flickr"}
NEWSTEST_YEARS = range(2012, 2018)


def _shared_subdir(name: str) -> Path:
    root = shared_data_dir()
    if root is None or not (root / name).is_dir():
        where = Path(__file__).resolve().parents[1].parent / "shared" / "data" / name
        raise InputError(f"{where}: shared data not found; use your own files instead")
    return root / name


def multi30k_paths(split: str) -> tuple[Path, Path]:
    """(English, German) gzip files of Multi30k task 1: split train, val or test_2016_flickr
    (valid/test accepted as aliases). 29,000 / 1,014 / 1,000 pairs."""
    if split not in MULTI30K_SPLITS:
        raise InputError(f"unknown Multi30k split {split!r}; choose from {sorted(MULTI30K_SPLITS)}")
    folder, name = _shared_subdir("multi30k"), MULTI30K_SPLITS[split]
    return folder / f"{name}.en.gz", folder / f"{name}.de.gz"


def newstest_paths(year: int) -> tuple[Path, Path]:
    """(English, German) WMT newstest files.

    newstest2013 is the paper's dev set (§6.2), newstest2014 its test set (§6.1).
    """
    if year not in NEWSTEST_YEARS:
        first, last = NEWSTEST_YEARS.start, NEWSTEST_YEARS.stop - 1
        raise InputError(f"no newstest{year}; available: {first}-{last}")
    folder = _shared_subdir("wmt_newstest")
    return folder / f"newstest{year}.en", folder / f"newstest{year}.de"


def peak_rss_bytes() -> int:
    """Peak resident memory of this process so far, in bytes."""
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return peak if sys.platform == "darwin" else peak * 1024  # Linux reports KiB


def write_atomic(path: str | Path, data: bytes) -> None:
    """Write `data` to `path` so that a reader (or a rerun after a kill) sees the old file or the whole new one.

    The bytes go to a temporary file beside `path`, which is then renamed onto it.
    """
    path = Path(path)
    tmp = path.with_name(f"{path.name}.tmp-{os.getpid()}")
    try:
        tmp.write_bytes(data)
        os.replace(tmp, path)
    finally:
        tmp.unlink(missing_ok=True)


# ------------------------------------------------------- memory-mapped corpus
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


def _file_fingerprint(path: Path) -> dict:
    stat = path.stat()
    return {"path": str(path.resolve()), "size": stat.st_size, "mtime_ns": stat.st_mtime_ns}


class TokenizedCorpus:
    """Token ids of a parallel corpus in memory-mapped `.npy` files, one pair per index.

    Layout in `cache_dir`: `{src,tgt}_ids.npy` (int32, all sentences back to
    back), `{src,tgt}_offsets.npy` (int64, n+1 entries: sentence i is
    ids[offsets[i]:offsets[i+1]]), and `meta.json` (input files with sizes and
    mtimes, the tokenizer's model hash, the read stats). Written last, the meta
    marks the cache complete; any mismatch rebuilds it.
    """

    def __init__(self, cache_dir: str | Path):
        self.cache_dir = Path(cache_dir)
        self.meta = json.loads((self.cache_dir / "meta.json").read_text(encoding="utf-8"))
        self.stats = ReadStats(**self.meta["stats"])
        self.reused = False  # set by build(): True when an existing cache was valid
        self.src_ids, self.src_offsets = self._load("src_ids"), self._load("src_offsets")
        self.tgt_ids, self.tgt_offsets = self._load("tgt_ids"), self._load("tgt_offsets")
        self.src_lengths = np.diff(self.src_offsets).astype(np.int32)  # (n,)
        self.tgt_lengths = np.diff(self.tgt_offsets).astype(np.int32)  # (n,)

    def _load(self, name: str) -> np.ndarray:
        return np.load(self.cache_dir / f"{name}.npy", mmap_mode="r", allow_pickle=False)

    def __len__(self) -> int:
        return len(self.src_lengths)

    def pair(self, i: int) -> tuple[np.ndarray, np.ndarray]:
        """(source ids, target ids) of pair i, as read-only int32 views into the memmaps."""
        s0, s1 = self.src_offsets[i], self.src_offsets[i + 1]
        t0, t1 = self.tgt_offsets[i], self.tgt_offsets[i + 1]
        return self.src_ids[s0:s1], self.tgt_ids[t0:t1]

    def indices_within(self, max_len: int) -> np.ndarray:
        """Indices of pairs whose sides both have at most `max_len` tokens (int64)."""
        return np.flatnonzero((self.src_lengths <= max_len) & (self.tgt_lengths <= max_len))

    @staticmethod
    def expected_meta(src_path: Path, tgt_path: Path, tokenizer) -> dict:
        return {"format": CACHE_FORMAT, "src": _file_fingerprint(src_path),
                "tgt": _file_fingerprint(tgt_path), "tokenizer_hash": tokenizer.model_hash}

    @classmethod
    def build(cls, src_path: str | Path, tgt_path: str | Path, tokenizer, cache_dir: str | Path,
              chunk_lines: int = 10_000) -> "TokenizedCorpus":
        """Tokenize the pair of files into `cache_dir`, or reuse a cache made from the same inputs.

        `tokenizer` needs `encode_batch(list[str]) -> list[list[int]]` and
        `model_hash`. Empty pairs are skipped (counted in `stats.n_empty`).
        Memory stays at about one chunk of text and ids, whatever the corpus size.
        """
        src_path, tgt_path, cache = Path(src_path), Path(tgt_path), Path(cache_dir)
        for path in (src_path, tgt_path):
            if not path.is_file():
                raise InputError(f"{path}: file not found")
        expected = cls.expected_meta(src_path, tgt_path, tokenizer)
        meta_path = cache / "meta.json"
        if meta_path.is_file():
            try:
                old = json.loads(meta_path.read_text(encoding="utf-8"))
            except (json.JSONDecodeError, UnicodeDecodeError):
                old = None
            if isinstance(old, dict) and {k: old.get(k) for k in expected} == expected:
                corpus = cls(cache)
                corpus.reused = True
                return corpus
            meta_path.unlink()  # stale: invalidate before rewriting the arrays
        cache.mkdir(parents=True, exist_ok=True)
        stats = cls._write_arrays(src_path, tgt_path, tokenizer, cache, chunk_lines)
        meta = dict(expected, stats=stats.__dict__)
        write_atomic(meta_path, json.dumps(meta, indent=1).encode("utf-8"))  # last: marks the cache complete
        return cls(cache)

    @staticmethod
    def _write_arrays(src_path: Path, tgt_path: Path, tokenizer, cache: Path,
                      chunk_lines: int) -> ReadStats:
        writers = {name: _ArrayWriter(cache / f"{name}.npy", dtype)
                   for name, dtype in (("src_ids", np.int32), ("tgt_ids", np.int32),
                                       ("src_offsets", np.int64), ("tgt_offsets", np.int64))}
        ends = {"src": 0, "tgt": 0}  # running end offset of each side
        for side in ends:
            writers[f"{side}_offsets"].append(np.zeros(1, np.int64))
        n_lines = n_empty = 0

        def flush(chunk: dict[str, list[str]]) -> None:
            for side, texts in chunk.items():
                ids = tokenizer.encode_batch(texts)
                lengths = np.fromiter((len(x) for x in ids), np.int64, len(ids))
                flat = np.fromiter((t for x in ids for t in x), np.int32, int(lengths.sum()))
                writers[f"{side}_ids"].append(flat)
                writers[f"{side}_offsets"].append(ends[side] + np.cumsum(lengths))
                ends[side] += int(lengths.sum())
                texts.clear()

        chunk: dict[str, list[str]] = {"src": [], "tgt": []}
        try:
            for n_lines, src, tgt in iter_parallel(src_path, tgt_path):
                if not src or not tgt:
                    n_empty += 1
                    continue
                chunk["src"].append(src)
                chunk["tgt"].append(tgt)
                if len(chunk["src"]) >= chunk_lines:
                    flush(chunk)
            flush(chunk)
        except BaseException:
            for writer in writers.values():  # leave no temporary files behind
                writer.abandon()
            raise
        for writer in writers.values():
            writer.finish()
        n_kept = n_lines - n_empty
        return ReadStats(n_lines=n_lines, n_empty=n_empty, n_too_long=0, n_kept=n_kept)
