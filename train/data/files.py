"""Reading parallel text: plain files, gzip, shared test sets.

§5.1 trains on WMT 2014 En-De, about 4.5M sentence pairs. `iter_parallel`
streams a corpus pair by pair (train/data/corpus.py tokenizes WMT-size corpora
that way); `read_parallel` loads a small one (dev and test sets, Multi30k) as
Python strings, skipping empty pairs and, optionally, pairs that are too long.

Files are UTF-8, one sentence a line; a name ending in `.gz` is read through
gzip. Every problem with the input raises `InputError` naming the file (and the
line, where there is one). Lines are stripped of surrounding whitespace.
`output_writer` writes output as it comes, to stdout or a new file (never over one unless forced; the file's
name appears only once it is complete); `write_new` writes a new file whole, never over one made meanwhile.

"""

import contextlib
import gzip
import hashlib
import io
import os
import resource
import sys
import tempfile
import warnings
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from itertools import zip_longest
from pathlib import Path

from train.errors import InputError, disk_error, naming


def no_file(path: Path) -> InputError:
    """The error for a file to read that is not there (or is a folder)."""
    return InputError(f"{path}: {'a folder, not a file' if path.is_dir() else 'file not found'}")


class _Hashing(io.RawIOBase):
    """A file read through this adds every byte to `digest` (the bytes on disk: compressed ones for `.gz`)."""

    def __init__(self, f, digest):
        self.f, self.digest = f, digest

    def readable(self) -> bool:
        return True

    def readinto(self, buffer) -> int:
        n = self.f.readinto(buffer)
        self.digest.update(memoryview(buffer)[:n])
        return n


def iter_lines(path: str | Path, digest=None) -> Iterator[tuple[int, str]]:
    """Yield (line_number, stripped_text), line numbers from 1; `.gz` is decompressed.

    Bytes are decoded line by line, so a bad byte is reported with its line. With `digest` (a hashlib
    object), every byte of the file read goes into it too, so what was read can be checked against
    a hash taken before (train/data/store.py: the text encoded is the text the key names).
    """
    path = Path(path)
    if not path.is_file():
        raise no_file(path)
    try:
        with open(path, "rb") as raw:
            f = raw if digest is None else io.BufferedReader(_Hashing(raw, digest), 1 << 20)
            with gzip.GzipFile(fileobj=f) if path.name.endswith(".gz") else contextlib.nullcontext(f) as lines:
                for number, data in enumerate(lines, start=1):
                    try:
                        text = data.decode("utf-8")
                    except UnicodeDecodeError:
                        raise InputError(f"{path}:{number}: not valid UTF-8") from None
                    yield number, text.strip()
            while digest is not None and f.read(1 << 20):  # bytes past the last gzip member: hashed too
                pass
    except (gzip.BadGzipFile, EOFError) as err:
        raise InputError(f"{path}: not a readable gzip file ({err})") from None


def count_lines(path: str | Path, block: int = 1 << 24) -> int:
    """How many lines `iter_lines` would yield (a last line without a newline counts), read in blocks."""
    path = Path(path)
    if not path.is_file():
        raise no_file(path)
    opener = gzip.open if path.name.endswith(".gz") else open
    n, last = 0, b"\n"
    try:
        with opener(path, "rb") as f:
            while data := f.read(block):
                n += data.count(b"\n")
                last = data[-1:]
    except (gzip.BadGzipFile, EOFError) as err:
        raise InputError(f"{path}: not a readable gzip file ({err})") from None
    return n + (last != b"\n")


def iter_parallel(src_path: str | Path, tgt_path: str | Path, digests=(None, None)) -> Iterator[tuple[int, str, str]]:
    """Yield (line_number, source, target) for two files that must have equal line counts
    (`digests`: each file's bytes go into its hashlib object, as in iter_lines)."""
    n_src = n_tgt = 0
    for src, tgt in zip_longest(iter_lines(src_path, digests[0]), iter_lines(tgt_path, digests[1])):
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
SHARED_DATA = Path(__file__).resolve().parents[3] / "shared" / "data"   # beside the repository, not in it


def shared_data_dir() -> Path | None:
    """`<repo>/../shared/data` if it exists (it does not in a fresh clone), else None."""
    path = SHARED_DATA.resolve()
    return path if path.is_dir() else None


MULTI30K_SPLITS = {"train": "train", "val": "val", "valid": "val",
                   "test": "test_2016_flickr", "test_2016_flickr": "test_2016_flickr"}
NEWSTEST_YEARS = range(2012, 2018)


def _shared_subdir(name: str) -> Path:
    root = shared_data_dir()
    if root is None or not (root / name).is_dir():
        raise InputError(f"{SHARED_DATA / name}: shared data not found; use your own files instead")
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


def sha256_of(path: Path, size: int | None = None, block: int = 1 << 24) -> str:
    """sha256 of a file's bytes (of its first `size` bytes when given), read in blocks."""
    digest, left = hashlib.sha256(), size
    with open(path, "rb") as f:
        while left is None or left > 0:
            data = f.read(block if left is None else min(block, left))
            if not data:
                break
            digest.update(data)
            left = None if left is None else left - len(data)
    return digest.hexdigest()


def write_atomic(path: str | Path, data: bytes) -> None:
    """Write `data` to `path` so that a reader (or a rerun after a kill) sees the old file or the whole new one.

    The bytes go to a temporary file beside `path`, which is then renamed onto it.
    """
    path = Path(path)
    tmp = path.with_name(f"{path.name}.tmp-{os.getpid()}")
    try:
        with naming(path):
            tmp.write_bytes(data)
            os.replace(tmp, path)
    finally:
        tmp.unlink(missing_ok=True)


def write_new(path: str | Path, data: bytes) -> None:
    """Write `data` to `path`, a file that must not exist, whole or not at all: FileExistsError where one is there,
    however late it appeared (the check and the write are one step: a complete private temporary is hard-linked
    to `path`, which fails where `path` exists; where the file system has no hard links, an exclusive create)."""
    path = Path(path)
    with naming(path):
        fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
        try:
            with os.fdopen(fd, "wb") as f:
                f.write(data)
            _link_new(tmp, path)
        finally:
            os.unlink(tmp)


def _link_new(tmp: str | Path, path: Path) -> None:
    """Give the complete file `tmp` the name `path` too, where no file is: FileExistsError where one is, however
    late it appeared (a hard link; where the file system has none, FAT or some network ones, an exclusive create)."""
    try:
        os.link(tmp, path)
    except FileExistsError:
        raise
    except OSError:
        with open(tmp, "rb") as src, open(path, "xb") as dst:
            dst.write(src.read())


@contextlib.contextmanager
def output_writer(path: Path | None, force: bool):
    """A write(text) function for stdout or a new file (an existing one only with `force`), flushed as it goes.
    A file's lines go to `NAME.tmp-<pid>` beside it, which takes the name only once all are written: a
    run stopped half-way leaves no short file that looks complete, and a forced one keeps the old file till then
    (after Ctrl-C the temporary stays, named in a warning: the lines done are not lost)."""
    if path is None:
        def write(text: str) -> None:
            sys.stdout.write(text)
            sys.stdout.flush()
        yield write
        return
    target = Path(os.path.realpath(path))  # a link: write its target, as opening it would
    if target.is_dir():
        raise InputError(f"{path}: a folder, not a file; choose a file to write")
    if target.exists() and not force:
        raise InputError(f"{path}: exists; pass --force to overwrite it or choose another output file")
    partial = target.with_name(f"{target.name}.tmp-{os.getpid()}")  # a run cleans up a dead one's (settle)
    with naming(target):  # a full disk's write() names no file
        try:
            out = open(partial, "x", encoding="utf-8")
        except OSError as err:
            if disk_error(err):
                raise
            raise InputError(f"{path}: cannot write ({err.strerror or err})") from None
        keep = False  # the lines, where a file took the name meanwhile or Ctrl-C stopped them
        try:
            with out:
                def write(text: str) -> None:
                    out.write(text)
                    out.flush()
                try:
                    yield write
                except KeyboardInterrupt:  # stdin translated until Ctrl-C, say: the lines so far, under their name
                    keep = out.tell() > 0
                    if keep:
                        warnings.warn(f"{path}: not written (interrupted); the lines done are in {partial}")
                    raise
            if force:
                os.replace(partial, target)
            else:
                try:
                    _link_new(partial, target)  # fails where a file appeared meanwhile: never over one
                except FileExistsError:
                    keep = True
                    raise InputError(f"{path}: appeared while writing it; nothing was overwritten, the output is in "
                                     f"{partial}") from None
        finally:
            if not keep and partial.exists():
                os.unlink(partial)
