"""A prepared folder on disk: built privately and renamed into place whole, and checked before each use.

A folder is built as `<name>.tmp-<host>-<pid>` and renamed into place when complete
(`building`), so a reader never sees half of one and two processes cannot mix their files;
a build killed half-way is deleted by the next one once its process is gone
(`remove_stale_builds`). Its manifest.json lists every other file's size and sha256 (and each
array's length, `contents`); `damage` says what no longer matches (a file missing, cut short
or overwritten: an interrupted copy to another machine), and a damaged folder is replaced by
a new build, never used. Used by train/data/store.py.
"""

import contextlib
import json
import os
import re
import shutil
import socket
from collections.abc import Callable
from pathlib import Path

import numpy as np

from train.data.files import sha256_of
from train.errors import naming

def pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # alive, another user's
        return True
    return True


# The only names _tmp_folder makes: a prepared corpus's key (or a damaged one moved aside) or a generated
# task's name, then host and pid.
_BUILD_NAME = re.compile(r"(?:[0-9a-f]{16}(?:-damaged)?|builtin|ptb)\.tmp-(?P<host>.+)-(?P<pid>\d+)")


def remove_stale_builds(data_dir: Path) -> None:
    """Delete the build folders killed processes left (`<key>.tmp-<host>-<pid>`, `builtin.tmp-...`, `ptb.tmp-...`)
    of this host, once their process is gone. data_dir may be a folder of the user's: anything else in it,
    a file or a folder whose name merely looks like a temporary, is the user's and stays."""
    for tmp in Path(data_dir).glob("*.tmp-*"):
        build = _BUILD_NAME.fullmatch(tmp.name)
        if (build and build["host"] == socket.gethostname() and tmp.is_dir() and not tmp.is_symlink()
                and not pid_alive(int(build["pid"]))):
            shutil.rmtree(tmp, ignore_errors=True)


def tmp_folder(data_dir: Path, name: str) -> Path:
    """A new, private data_dir/<name>.tmp-<host>-<pid> folder to build in (a name remove_stale_builds knows)."""
    tmp = data_dir / f"{name}.tmp-{socket.gethostname()}-{os.getpid()}"
    assert _BUILD_NAME.fullmatch(tmp.name), f"{tmp.name}: not a build folder's name"
    shutil.rmtree(tmp, ignore_errors=True)
    with naming(data_dir / name):
        tmp.mkdir(parents=True)
    return tmp


def publish(tmp: Path, folder: Path, damage: Callable[[Path], str | None] = lambda folder: None) -> None:
    """Rename a complete build into place (atomic); if another process got there first, keep theirs, unless
    `damage(folder)` finds it damaged: then it is moved aside and deleted, and the build takes its place."""
    try:
        os.rename(tmp, folder)
    except OSError:
        if not folder.is_dir():
            raise
        if damage(folder) is None:
            return
        aside = tmp_folder(folder.parent, f"{folder.name}-damaged")
        os.rename(folder, aside)  # onto the empty folder just made
        os.rename(tmp, folder)
        shutil.rmtree(aside, ignore_errors=True)


@contextlib.contextmanager
def building(folder: Path):
    """Yield a private temporary folder; on success it becomes `folder` (replacing a damaged one)."""
    tmp = tmp_folder(folder.parent, folder.name)
    try:
        with naming(folder):  # a full disk's write() names no file
            yield tmp
            publish(tmp, folder, damage)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


# ------------------------------------------------------------------ checking a folder
MANIFEST = "manifest.json"


def contents(folder: Path) -> dict[str, dict]:
    """{file name: {"size", "sha256"}, with "length" for an array} of every file in a built folder but its manifest."""
    out = {}
    for path in sorted(folder.iterdir()):
        if path.name != MANIFEST:
            out[path.name] = {"size": path.stat().st_size, "sha256": sha256_of(path)}
            if path.suffix == ".npy":
                out[path.name]["length"] = len(np.load(path, mmap_mode="r", allow_pickle=False))
    return out


def damage(folder: Path) -> str | None:
    """Why a prepared folder cannot be used as it is (a file missing, cut short, changed), or None when every
    file has the size, sha256 and length its manifest recorded."""
    try:
        manifest = json.loads((folder / MANIFEST).read_text(encoding="utf-8"))
        recorded = manifest["contents"]
    except FileNotFoundError:
        return f"no {MANIFEST} (an interrupted build or copy)"
    except (OSError, ValueError, KeyError, TypeError):
        return f"{MANIFEST} is not one this version of the tool wrote"
    for name, want in sorted(recorded.items()):
        path = folder / name
        if not path.is_file():
            return f"{name} is missing"
        if path.stat().st_size != want["size"]:
            return f"{name} has {path.stat().st_size} bytes, not the {want['size']} it was written with"
        if "length" in want:
            try:
                length = len(np.load(path, mmap_mode="r", allow_pickle=False))
            except (OSError, ValueError) as err:
                return f"{name} is not a readable array ({err})"
            if length != want["length"]:
                return f"{name} holds {length} values, not {want['length']}"
        if sha256_of(path) != want["sha256"]:
            return f"{name} has other contents than it was written with (sha256)"
    return None
