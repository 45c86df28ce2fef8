"""The run directory: what makes a folder a run, what `--force` may delete, and one writer at a time.

A run directory holds the files this tool writes there (`is_ours` lists them by name):
config.json, prepared.json, metrics.jsonl, the tokenizer copy, checkpoints, best and
averaged weights, test.hyp, plots/, tensorboard/, tensorboard-export/, run.lock. `fit` accepts a folder that
does not exist, is empty, holds a run (our config.json) or only our files. Any other
folder is refused, with or without `--force`: it is somebody's folder, not a run, and
nothing in it is touched. `--force` starts a run over by deleting exactly our files;
a notes file or a folder of the user's in a run directory stays.

One writer per run: `RunLock` holds an exclusive lock (flock) on run_dir/run.lock while
a process trains, and writes its pid, host and start time into the file for the
one-line error a second process gets. The operating system drops the lock when its
process ends, however it ends (kill -9 included), so a lock left by a dead process is
taken over by the next run without anyone deleting anything. The file itself stays (a
lock file that is deleted can be locked twice), emptied when its holder is done.
"""

import datetime
import errno
import fcntl
import json
import os
import re
import socket
import warnings
from pathlib import Path

from train import config as config_lib
from train.config import RunConfig
from train.data.files import write_atomic
from train.errors import InputError
from transformer.checkpoint import list_checkpoints

LOCK_FILE = "run.lock"
CONFIG_FILE = "config.json"
# Every file this tool writes in a run directory, by its path relative to the run directory.
_OURS = re.compile(
    r"(config\.json|prepared\.json|metrics\.jsonl|tokenizer\.(model|vocab)|test\.hyp|run\.lock|best\.safetensors"
    r"|averaged_last\d+\.safetensors|ckpt_\d{8}(\.optimizer)?\.safetensors"
    r"|plots/(loss|perplexity|lr|bleu|tokens_per_s|attention|norms)\.png"
    r"|tensorboard/events\.out\.tfevents\.\d+\.[^/]+|tensorboard-export/events\.out\.tfevents\.\d+\.[^/]+\.export)"
    r"(\.tmp-\d+)?")  # the temporary of an atomic write (train.data.files.write_atomic, checkpoints)
_OUR_FOLDERS = ("plots", "tensorboard", "tensorboard-export")


def is_ours(relative: str) -> bool:
    """True for a path (relative to the run directory, '/'-separated) that this tool writes."""
    return _OURS.fullmatch(relative) is not None


def _entries(run_dir: Path):
    """Relative paths of the run directory's files, looking into our own sub-folders only."""
    for entry in sorted(run_dir.iterdir()):
        if entry.name in _OUR_FOLDERS and entry.is_dir() and not entry.is_symlink():
            yield from (f"{entry.name}/{child.name}" + ("/" if child.is_dir() else "") for child in entry.iterdir())
        else:
            yield entry.name + ("/" if entry.is_dir() and not entry.is_symlink() else "")


def is_run(run_dir: Path) -> bool:
    """A run directory: its config.json is a run config this tool wrote."""
    try:
        saved = json.loads((run_dir / CONFIG_FILE).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return False
    return isinstance(saved, dict) and {"task", "tokenizer", "model", "train"} <= saved.keys()


def open_run_dir(run_dir: Path) -> None:
    """Create the run directory, or check that an existing one is a run (or holds only our files) and writable."""
    if run_dir.is_dir() and not is_run(run_dir):
        foreign = next((name for name in _entries(run_dir) if not is_ours(name)), None)
        if foreign is not None:
            raise InputError(f"{run_dir}: not a run directory (it holds {foreign!r}, which this tool did not "
                             f"write) and nothing in it is changed; choose a new or empty --run-dir")
    try:
        run_dir.mkdir(parents=True, exist_ok=True)
    except OSError as err:  # a file in the way, a read-only or full file system
        raise InputError(f"{run_dir}: cannot create the run directory ({err.strerror or err})") from None
    if not os.access(run_dir, os.W_OK | os.X_OK):  # root passes this check: the writes below then decide
        raise InputError(f"{run_dir}: run directory is not writable; choose another --run-dir")


def remove_run_files(run_dir: Path) -> None:
    """Delete the files this tool wrote (not run.lock, which the caller holds); nothing else."""
    for name in list(_entries(run_dir)):
        if is_ours(name) and name != LOCK_FILE and not name.endswith("/"):
            (run_dir / name).unlink(missing_ok=True)
    for folder in _OUR_FOLDERS:
        if (run_dir / folder).is_dir() and not any((run_dir / folder).iterdir()):
            (run_dir / folder).rmdir()


def start_run(run_config: RunConfig, run_dir: Path, force: bool) -> bool:
    """Check the config against the run's and write it; returns True when resuming an existing run.

    An existing run must have the same config (keys in config.RESUMABLE_KEYS may differ);
    anything else is an InputError unless `force`, which deletes this tool's files first.
    A run that never reached its first checkpoint holds nothing worth keeping, so a new
    config simply starts it over. Call with the RunLock held.
    """
    saved = run_dir / CONFIG_FILE
    if force:
        remove_run_files(run_dir)
    resuming = saved.is_file()
    if resuming:
        old = json.loads(saved.read_text(encoding="utf-8"))
        changed = [k for k in config_lib.diff(old, run_config.to_dict()) if k not in config_lib.RESUMABLE_KEYS]
        if changed and not list_checkpoints(run_dir):
            remove_run_files(run_dir)
            resuming = False
        elif changed:
            shown = ", ".join(f"{k} ({_lookup(old, k)!r} -> {_lookup(run_config.to_dict(), k)!r})"
                              for k in changed[:3])
            raise InputError(f"{saved}: this run was started with a different config: {shown}; "
                             f"resume with the same settings, use another --run-dir, or --force to start over")
    # Only keys in RESUMABLE_KEYS can differ here (e.g. a larger train.max_steps): record them.
    if not resuming or json.loads(saved.read_text(encoding="utf-8")) != run_config.to_dict():
        try:
            write_atomic(saved, (config_lib.to_json(run_config) + "\n").encode("utf-8"))
        except OSError as err:
            raise InputError(f"{run_dir}: cannot write to the run directory ({err.strerror or err})") from None
    return resuming


def _lookup(data: dict, dotted: str):
    for part in dotted.split("."):
        data = data.get(part) if isinstance(data, dict) else None
    return data


class RunLock:
    """`with RunLock(run_dir):` one process at a time trains in run_dir (see the module docstring)."""

    def __init__(self, run_dir: Path):
        self.path = Path(run_dir) / LOCK_FILE
        self.file = None

    def __enter__(self) -> "RunLock":
        try:
            self.file = os.fdopen(os.open(self.path, os.O_RDWR | os.O_CREAT, 0o644), "r+", encoding="utf-8")
        except OSError as err:
            raise InputError(f"{self.path}: cannot create the lock file ({err.strerror or err})") from None
        try:
            fcntl.flock(self.file, fcntl.LOCK_EX | fcntl.LOCK_NB)  # atomic; the kernel drops it when we die
        except BlockingIOError:
            holder = self.holder()
            self.file.close()
            raise InputError(f"{self.path.parent}: another process is training in this run directory ({holder}); "
                             f"wait for it to finish, stop it, or use another --run-dir") from None
        except OSError as err:
            if err.errno not in (errno.ENOLCK, errno.EOPNOTSUPP, errno.ENOSYS, errno.EINVAL):
                raise
            warnings.warn(f"{self.path}: this file system has no locks ({err.strerror}); make sure only one "
                          f"process trains in {self.path.parent}", stacklevel=2)
        since = datetime.datetime.now().isoformat(timespec="seconds")
        self._write(json.dumps({"pid": os.getpid(), "host": socket.gethostname(), "since": since}) + "\n")
        return self

    def holder(self) -> str:
        """Who holds the lock, in words, from the file's contents."""
        try:
            info = json.loads(self.path.read_text(encoding="utf-8"))
            return f"pid {info['pid']} on host {info['host']}, since {info['since']}; see {self.path.name}"
        except (OSError, ValueError, KeyError, TypeError):
            return f"see {self.path.name}"

    def _write(self, text: str) -> None:
        self.file.seek(0)
        self.file.truncate()
        self.file.write(text)
        self.file.flush()

    def __exit__(self, *exc) -> None:
        self._write("")  # still held: nobody reads a half-empty file as a holder
        self.file.close()  # releases the lock
