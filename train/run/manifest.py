"""The run's manifest: which files in a run directory this tool wrote, each with the sha256 of its bytes.

A run directory is what its manifest says. `manifest.jsonl`, written by this tool alone,
opens with the run's id and then lists, a line each, every file a command wrote there.
Only a file that is listed and whose bytes still hash to what was recorded is ever averaged,
pruned, overwritten or deleted; anything else in the folder is the user's, whatever its
name (a safety copy `ckpt_30.safetensors`, a `notes.txt`, a `config.json` of their own).

    {"run_id": "9f2c...", "format": 1, "created": "2026-...", "host": "node7"}     the first line
    {"file": "ckpt_00000020.safetensors", "writing": true}        appended before the file is created
    {"file": "ckpt_00000020.safetensors", "sha256": "...", "size": 123}    once it is complete
    {"file": "metrics.jsonl", "sha256": "...", "size": 4567, "append": true}
        a log we append to: its first `size` bytes hash to `sha256`, and what follows is ours too
    {"file": "ckpt_00000015.safetensors", "removed": true}
    {"identity": {"config": {...}, "config_sha256": "...", "data_key": "...", "tokenizer_sha256": "...",
                  "init_from": {"path": "...", "sha256": "..."} or null}}

The last line about a file says what it is. The last identity line says what the run is (`fit` writes it
once every check of a start has passed, and again when a setting changes on resume): deleting or moving
files out of the folder never makes the run another one (train/run/run_dir.py).
Lines are only appended, one write each, so `plot` may record its figures while `fit` trains.
A file whose writer was killed between its "writing" line and its hash is settled by the next
run (`settle`): the path was free (or ours) when the line was written and every write here is
atomic (temporary file, then rename), so whatever is there now is ours and complete.
"""

import contextlib
import datetime
import json
import os
import socket
import uuid
from pathlib import Path

from train.data.files import sha256_of, write_atomic
from train.data.prepared_folder import pid_alive
from train.errors import InputError, naming

MANIFEST_FILE = "manifest.jsonl"
FORMAT = 1


def _line(entry: dict) -> bytes:
    return (json.dumps(entry, sort_keys=True) + "\n").encode("utf-8")


class Manifest:
    """A run directory's manifest, read from manifest.jsonl; every change is appended to the file at once."""

    def __init__(self, run_dir: Path, header: dict, entries: dict[str, dict], identity: dict | None = None):
        self.run_dir, self.header, self.entries, self.identity = Path(run_dir), header, entries, identity

    @property
    def path(self) -> Path:
        return self.run_dir / MANIFEST_FILE

    @property
    def run_id(self) -> str:
        return self.header["run_id"]

    # ---------------------------------------------------------------- reading and starting one
    @classmethod
    def find(cls, run_dir: str | Path) -> "Manifest | None":
        """The run's manifest, or None when the folder has none (it is not a run, or not yet one)."""
        path = Path(run_dir) / MANIFEST_FILE
        try:
            text = path.read_text(encoding="utf-8")
        except FileNotFoundError:
            return None
        lines = []
        for raw in text.splitlines():
            try:
                lines.append(json.loads(raw))
            except json.JSONDecodeError:  # a line cut short by a kill; the rest still stands
                continue
        if not lines or not isinstance(lines[0], dict) or "run_id" not in lines[0]:
            raise InputError(f"{path}: not a run manifest this tool wrote (no run id on its first line)")
        entries: dict[str, dict] = {}
        identity = None
        for entry in lines[1:]:
            if isinstance(entry, dict) and isinstance(entry.get("file"), str):
                entries[entry["file"]] = entry
            elif isinstance(entry, dict) and isinstance(entry.get("identity"), dict):
                identity = entry["identity"]
        return cls(Path(run_dir), lines[0], entries, identity)

    @classmethod
    def load(cls, run_dir: str | Path) -> "Manifest":
        """The run's manifest; an InputError when the folder has none."""
        manifest = cls.find(run_dir)
        if manifest is None and not Path(run_dir).is_dir():
            raise InputError(f"{run_dir}: no such directory")
        if manifest is None:
            raise InputError(f"{run_dir}: not a run directory of this tool (it has no {MANIFEST_FILE}; a run made "
                             f"before run manifests is adopted by `python -m train fit --resume {run_dir}`)")
        return manifest

    @classmethod
    def create(cls, run_dir: str | Path, **extra) -> "Manifest":
        """A new run: a fresh manifest (replacing an earlier one, whose files the caller has removed)."""
        header = {"run_id": uuid.uuid4().hex, "format": FORMAT, "host": socket.gethostname(),
                  "created": datetime.datetime.now().isoformat(timespec="seconds"), **extra}
        write_atomic(Path(run_dir) / MANIFEST_FILE, _line(header))
        return cls(Path(run_dir), header, {})

    # ---------------------------------------------------------------- what is ours
    def listed(self) -> list[str]:
        """Relative paths of the files the manifest lists (removed ones left out), in name order."""
        return sorted(name for name, entry in self.entries.items() if not entry.get("removed"))

    def owns(self, name: str) -> bool:
        """True when `name` (relative, '/'-separated) is listed and its bytes are still the ones recorded."""
        entry, path = self.entries.get(name), self.run_dir / name
        if entry is None or entry.get("removed") or not path.is_file() or path.is_symlink():
            return False
        if entry.get("writing"):
            return True  # being written now, or settled by the next run
        size = path.stat().st_size
        if size < entry["size"] or (size > entry["size"] and not entry.get("append")):
            return False
        return sha256_of(path, entry["size"] if entry.get("append") else None) == entry["sha256"]

    def foreign(self, name: str) -> bool:
        """True when a file is at `name` and it is not ours: nothing may overwrite or delete it."""
        path = self.run_dir / name
        return (path.exists() or path.is_symlink()) and not self.owns(name)

    def refuse_if_foreign(self, name: str) -> None:
        if self.foreign(name):
            raise InputError(f"{self.run_dir / name}: exists and this tool did not write it (it is not in the run's "
                             f"{MANIFEST_FILE}); nothing was overwritten; move it out of {self.run_dir}")

    # ---------------------------------------------------------------- changing it
    def _write_line(self, entry: dict) -> None:
        with naming(self.path), open(self.path, "ab") as f:  # naming: a full disk's write() names no file
            f.write(_line(entry))  # one write: appends of other processes do not interleave with it

    def _append(self, entry: dict) -> None:
        self._write_line(entry)
        self.entries[entry["file"]] = entry

    def set_identity(self, identity: dict) -> None:
        """Record what the run is (see the module docstring); the last such line stands."""
        self._write_line({"identity": identity})
        self.identity = identity

    def claim(self, name: str, append: bool = False) -> Path:
        """Before writing `name`: refuse a file of the user's there, else note that we are writing it (so a
        kill before `record` leaves it ours: `settle` records what is there)."""
        self.refuse_if_foreign(name)
        self._append({"file": name, "writing": True, **({"append": True} if append else {})})
        return self.run_dir / name

    def record(self, name: str, append: bool = False) -> None:
        """After writing `name`: its size and sha256 (for a log we append to, of what it holds now)."""
        path = self.run_dir / name
        size = path.stat().st_size
        self._append({"file": name, "sha256": sha256_of(path, size), "size": size,
                      **({"append": True} if append else {})})

    @contextlib.contextmanager
    def writing(self, name: str):
        """`with manifest.writing("best.safetensors") as path:` write path (atomically); then it is recorded."""
        path = self.claim(name)
        with naming(path):  # a full disk's write() names no file
            path.parent.mkdir(parents=True, exist_ok=True)
            yield path
        self.record(name)

    def write_bytes(self, name: str, data: bytes) -> Path:
        """Write a small file of ours atomically and record it."""
        with self.writing(name) as path:
            write_atomic(path, data)
        return path

    def remove(self, name: str) -> bool:
        """Delete `name` if it is ours (True); a file that is not ours stays where it is (False)."""
        if not self.owns(name):
            return False
        (self.run_dir / name).unlink()
        self._append({"file": name, "removed": True})
        return True

    def settle(self) -> None:
        """After a kill: record the files whose writes were under way, forget the ones never made, and
        delete the temporaries (`<our file>.tmp-<pid>`) that atomic writes left. Call with the run lock held."""
        with open(self.path, "rb+") as f:  # a line cut short by a kill: end it, so the next line stands alone
            f.seek(0, os.SEEK_END)
            if f.tell() and (f.seek(-1, os.SEEK_END), f.read(1))[1] != b"\n":
                f.write(b"\n")
        for name, entry in list(self.entries.items()):
            if not entry.get("writing"):  # a temporary is ours only beside a write we announced (`claim`)
                continue
            path = self.run_dir / name
            for stale in path.parent.glob(f"{path.name}.tmp-*"):
                pid = stale.name.rpartition(".tmp-")[2]
                if pid.isdigit() and not pid_alive(int(pid)):  # a live writer's (a `plot` now) is left alone
                    stale.unlink(missing_ok=True)
            if path.is_file():
                self.record(name, append=bool(entry.get("append")))
            else:
                self._append({"file": name, "removed": True})


def run_containing(path: str | Path) -> "tuple[Manifest, str] | None":
    """(the run, `path`'s '/'-separated name in it) when `path` lies in a run directory (the nearest folder
    above it with a manifest of this tool's), else None: a command writing there writes one of the run's files.
    A `manifest.jsonl` of another program (no run id on its first line) makes no run directory."""
    path = Path(path)
    parent = path.parent.resolve()
    for folder in (parent, *parent.parents):
        if (folder / MANIFEST_FILE).is_file():
            try:
                return Manifest.find(folder), (parent / path.name).relative_to(folder).as_posix()
            except InputError:  # not ours: look further up
                continue
    return None
