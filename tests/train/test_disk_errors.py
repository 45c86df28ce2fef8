"""A full disk (ENOSPC) or a read-only file system (EROFS) at any write of any command: a one-line error that
names the file and the free space, a non-zero exit, no traceback, every file that was there unchanged (logs
only appended to), and no temporary or partial file left behind.

Each command runs in-process (train.__main__.main) on small fixtures, first once to list the writes it makes
under the fixture folder (an open for writing, an os.open that may create or write, a rename or link onto a
path, a mkdir), then once per write k, with that write and every later one failing (a full disk stays full).
A write made again from the same place in the code (the same call stack: the next figure of `plot`, the next
checkpoint of `fit`) is not scanned again: the first time it is reached stands for it.
"""

import builtins
import errno
import hashlib
import io
import json
import os
import shutil
import traceback
import warnings
from pathlib import Path

import pytest

from train.__main__ import main
from train.data.builtin_task import make_number_task
from transformer.checkpoint import load_checkpoint

from tests.train.data.test_prepare import ROOT, TINY, write

CONFIG = str(ROOT / "configs" / "demo.toml")
_WRITE_FLAGS = os.O_WRONLY | os.O_RDWR | os.O_CREAT | os.O_APPEND | os.O_TRUNC


class FailingDisk:
    """Counts the writes under `root`; from the `fail_at`-th on, each fails with `code` (None: count only).

    As on a real disk: EROFS fails the open, naming the file; ENOSPC lets open() make the file and fails its
    first write() or flush(), naming nothing; a rename, link or mkdir fails naming its path."""

    def __init__(self, root: Path, fail_at: int | None, code: int):
        self.root, self.fail_at, self.code, self.count = str(root), fail_at, code, 0
        self.places: list[tuple] = []  # the call stack of each write, in the project's code

    def distinct(self) -> list[int]:
        """The writes (1-based) made from a place no earlier write was made from."""
        return [k for k, place in enumerate(self.places, start=1) if place not in self.places[:k - 1]]

    def _write(self, path, opening: bool = False) -> bool:
        """Count a write; raise where it fails, or return True where the file opened is to fail its writes."""
        if isinstance(path, int):
            return False
        path = os.path.abspath(os.fsdecode(path))
        if not path.startswith(self.root):
            return False
        self.count += 1
        self.places.append(tuple((f.filename, f.lineno) for f in traceback.extract_stack()
                                 if f.filename.startswith(str(ROOT)) and "/tests/" not in f.filename))
        if self.fail_at is None or self.count < self.fail_at:
            return False
        if opening and self.code == errno.ENOSPC:
            return True
        raise OSError(self.code, os.strerror(self.code), path)

    def patch(self, monkeypatch) -> None:
        real_open, real_os_open = builtins.open, os.open
        real = {name: getattr(os, name) for name in ("replace", "rename", "link", "mkdir")}

        def fake_open(file, mode="r", *args, **kwargs):
            full = any(c in mode for c in "wax+") and self._write(file, opening=True)
            f = real_open(file, mode, *args, **kwargs)
            return _Full(f) if full else f

        def fake_os_open(path, flags, *args, **kwargs):
            if flags & _WRITE_FLAGS:
                self._write(path)
            return real_os_open(path, flags, *args, **kwargs)

        def moved(name):
            def move(src, dst, *args, **kwargs):
                self._write(dst)
                return real[name](src, dst, *args, **kwargs)
            return move

        def fake_mkdir(path, *args, **kwargs):
            self._write(path)
            return real["mkdir"](path, *args, **kwargs)

        monkeypatch.setattr(builtins, "open", fake_open)
        monkeypatch.setattr(io, "open", fake_open)
        monkeypatch.setattr(os, "open", fake_os_open)
        for name in ("replace", "rename", "link"):
            monkeypatch.setattr(os, name, moved(name))
        monkeypatch.setattr(os, "mkdir", fake_mkdir)


class _Full:
    """An open file on a full disk: every write() and flush() fails, naming no file, as write(2) does."""

    def __init__(self, f):
        self._f = f

    def write(self, *data):
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    writelines = flush = write

    def close(self):
        self._f.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self._f.close()

    def __getattr__(self, name):
        return getattr(self._f, name)


# ------------------------------------------------------------------ fixtures: a corpus, its data, a short run
@pytest.fixture(scope="module")
def world(tmp_path_factory):
    """A folder holding a small corpus, its prepared data, a run of 3 steps and inputs for each command."""
    root = tmp_path_factory.mktemp("world")
    task = make_number_task(seed=3, n_train=120, n_valid=6, n_test=6)
    for split, pairs in task.items():
        write(root / f"{split}.en", [e for e, _ in pairs])
        write(root / f"{split}.de", [d for _, d in pairs])
    write(root / "input.txt", [e for e, _ in task["test"]])
    (root / "gold.mrg").write_text("(S (NP (DT the) (NN cat)) (VP (VBD sat)))\n(S (NP (NN one)) (VP (VBZ is)))\n")
    argv = ["fit", "--config", CONFIG, "--run-dir", str(root / "run"), "--data-dir", str(root / "prepared"),
            "--no-progress", *sets(root, "train.max_steps=3", "train.ckpt_every=1", "train.valid_every=1")]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        assert main(argv) == 0
    return root


def sets(root: Path, *extra: str) -> list[str]:
    items = ["task.kind=files", *[f"task.{split}_{side}={root}/{split}.{lang}" for split in ("train", "valid")
                                  for side, lang in (("src", "en"), ("tgt", "de"))], *TINY, *extra]
    return [arg for item in items for arg in ("--set", item)]


def commands(root: Path) -> dict[str, list[str]]:
    ckpt = str(root / "run" / "ckpt_00000003.safetensors")
    return {
        "prepare": ["prepare", "--config", CONFIG, "--data-dir", str(root / "prepared-new"), "--no-progress",
                    *sets(root)],
        "fit": ["fit", "--config", CONFIG, "--run-dir", str(root / "run-new"), "--data-dir", str(root / "prepared"),
                "--no-progress", *sets(root, "train.max_steps=2", "train.ckpt_every=2", "train.valid_every=1")],
        "average": ["average", str(root / "run"), "--last", "2"],
        "translate": ["translate", "--ckpt", ckpt, "--input", str(root / "input.txt"), "--output",
                      str(root / "translated.txt"), "--beam", "1", "--threads", "1"],
        "evaluate": ["evaluate", "--ckpt", ckpt, "--src", str(root / "test.en"), "--ref", str(root / "test.de"),
                     "--out", str(root / "evaluated.txt"), "--beam", "1", "--threads", "1"],
        "tune-decoding": ["tune-decoding", "--ckpt", ckpt, "--src", str(root / "test.en"), "--ref",
                          str(root / "test.de"), "--beams", "2", "--alphas", "0.6", "--threads", "1"],
        "export": ["export", "--format", "ctranslate2", "--ckpt", ckpt, "--out", str(root / "ct2")],
        "plot": ["plot", str(root / "run")],
        "export-tensorboard": ["export-tensorboard", str(root / "run")],
        "parse-eval": ["parse-eval", "--ckpt", ckpt, "--gold", str(root / "gold.mrg"), "--out",
                       str(root / "parsed.txt"), "--beam", "1", "--threads", "1"],
        "scale": ["scale", "--step-ms", "100", "--link", "pcie5", "--batch", "2"],
    }


NEEDS = {"export": "ctranslate2", "export-tensorboard": "tensorboardX"}
LOGS = ("manifest.jsonl", "metrics.jsonl")  # only ever appended to


def snapshot(root: Path) -> dict[str, bytes]:
    return {p.relative_to(root).as_posix(): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()}


def check_unharmed(root: Path, before: dict[str, bytes]) -> None:
    """Files that were there: the same bytes (a log: the same bytes first). New ones: complete, no temporaries."""
    for name, data in before.items():
        path = root / name
        assert path.is_file(), f"{name} was deleted"
        now = path.read_bytes()
        if name.endswith(LOGS):
            assert now[:len(data)] == data, f"{name}: its earlier lines changed"
        else:
            assert hashlib.sha256(now).digest() == hashlib.sha256(data).digest(), f"{name} changed"
    for path in sorted(root.rglob("*")):
        name = path.relative_to(root).as_posix()
        assert ".tmp" not in path.name, f"{name}: a temporary left behind"
        if name in before or not path.is_file():
            continue
        if path.suffix == ".safetensors":
            load_checkpoint(path, verify=True)  # a partial file under a final name does not load
        elif path.suffix == ".json":
            json.loads(path.read_text())


def run(argv: list[str], capsys) -> tuple[int, str]:
    capsys.readouterr()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        code = main(argv)
    return code, capsys.readouterr().err


@pytest.mark.parametrize("command", list(commands(Path("/"))))
def test_every_write_of_every_command_fails_cleanly_on_a_full_or_read_only_disk(world, tmp_path, command,
                                                                                 monkeypatch, capsys):
    if command in NEEDS:
        pytest.importorskip(NEEDS[command])
    root = tmp_path / "w"

    def fresh() -> dict[str, bytes]:
        shutil.rmtree(root, ignore_errors=True)
        shutil.copytree(world, root, symlinks=True)
        return snapshot(root)

    fresh()
    counter = FailingDisk(root, None, 0)
    with monkeypatch.context() as patched:
        counter.patch(patched)
        code, err = run(commands(root)[command], capsys)
    assert code == 0, err
    for code_ in (errno.ENOSPC, errno.EROFS):
        for k in counter.distinct():
            before = fresh()
            with monkeypatch.context() as patched:
                FailingDisk(root, k, code_).patch(patched)
                code, err = run(commands(root)[command], capsys)
            where = f"{command}, {errno.errorcode[code_]} at write {k} of {counter.count}: {counter.places[k - 1][-1]}"
            lines = [line for line in err.splitlines() if line.strip() and not line.startswith("warning: ")]
            assert code != 0 and "Traceback" not in err, f"{where}:\n{err}"
            assert len(lines) == 1 and lines[0].startswith("error: ") and "free" in lines[0], f"{where}:\n{err}"
            assert str(root) in lines[0], f"{where}: the file is not named:\n{err}"
            check_unharmed(root, before)
