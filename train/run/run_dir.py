"""The run directory: what makes a folder a run (its manifest), what `--force` may delete, and one writer at a time.

A run is what its manifest says (train/run/manifest.py): `manifest.jsonl` lists every file a
command of this tool wrote in the folder, with its sha256, and only those files are ever
averaged, pruned, overwritten or deleted. `fit` accepts a folder that does not exist, is empty,
or holds a manifest. A folder with files but no manifest is not a run, whatever the files are
called (`config.json`, `tokenizer.model`, ...): it is refused, with or without `--force`, its
files named, nothing in it touched. `--force` starts a run over by deleting the files the
manifest lists under this tool's own names (train/run/run_names.py) whose bytes are still the
ones recorded, saying which, then writes a new manifest; a user's outputs stay.

A run is its record, not its files: the manifest's identity line holds its config, data key,
tokenizer hash and `--init-from` file (path and sha256). Deleting its checkpoints or moving its
config.json out never makes it a new run: another config, model size or start is refused, naming
both, and config.json is written again from the record. A start is checked whole first
(`plan_start`, then the data, the tokenizer and the shapes in train/run/loop.py): only then does
the run directory change (`commit_start`), so a failed start writes nothing.

Runs made before manifests existed are adopted once, by the first `fit` that opens them,
when the proof is there: config.json is a run config of this tool, the folder holds at least
one checkpoint ckpt_<8 digits>.safetensors, and every checkpoint and optimizer file of that
name loads, passes its sha256 checks and names its own step (and the run's tokenizer, when
tokenizer.model is there). Then every file with a name this tool writes is listed; a file of
any other name (`ckpt_30.safetensors`, `notes.txt`) stays the user's. Otherwise the folder is
refused like any other, with the reason.

One writer per run: `RunLock` holds an exclusive `flock` on the run directory itself for the
run's life. The kernel drops it when the process ends, however it ends (kill -9 included), so
the next run takes over a dead run's lock; and no file stands for the lock, so deleting one
admits nobody. run.lock only tells the refused process who holds the lock (pid, host, start).
"""

import datetime
import errno
import fcntl
import hashlib
import json
import os
import re
import socket
import warnings
from dataclasses import dataclass, field
from pathlib import Path

from train import config as config_lib
from train.config import RunConfig
from train.errors import InputError, disk_error
from train.run.checkpointing import WEIGHTS, run_checkpoints
from train.run.manifest import MANIFEST_FILE, Manifest, sha256_of
from train.run.run_data import refuse_a_config_with_train_accum
from train.run.run_names import FIT_NAMES, fit_writes, owner_of
from transformer.checkpoint import CheckpointError, load_checkpoint

LOCK_FILE = "run.lock"
CONFIG_FILE = "config.json"
CHECKPOINT = re.compile(r"ckpt_(\d{8})(\.optimizer)?\.safetensors")
# Every name this tool writes in a run directory (what a run made before manifests may hold).
_OURS = re.compile(FIT_NAMES + r"|test\.hyp|averaged_last\d+\.safetensors"
                   r"|plots/(loss|perplexity|lr|bleu|tokens_per_s|attention|norms)\.png"
                   r"|(tensorboard|tensorboard-export)/events\.out\.tfevents\.\d+\.[^/]+")
_OUR_FOLDERS = ("plots", "tensorboard", "tensorboard-export")


def _entries(run_dir: Path):
    """Relative paths of the run directory's files, looking into our own sub-folders only."""
    for entry in sorted(run_dir.iterdir()):
        if entry.name in _OUR_FOLDERS and entry.is_dir() and not entry.is_symlink():
            yield from (f"{entry.name}/{child.name}" + ("/" if child.is_dir() else "") for child in entry.iterdir())
        else:
            yield entry.name + ("/" if entry.is_dir() and not entry.is_symlink() else "")


def _named(names: list[str], limit: int = 4) -> str:
    shown = ", ".join(repr(n) for n in names[:limit])
    return shown + (f" and {len(names) - limit} more" if len(names) > limit else "")


def is_run_config(run_dir: Path) -> bool:
    """config.json is a run config this tool wrote (the sections of train.config.RunConfig)."""
    try:
        saved = json.loads((run_dir / CONFIG_FILE).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return False
    return isinstance(saved, dict) and {"task", "tokenizer", "model", "train"} <= saved.keys()


# ------------------------------------------------------------------ a run, or not
def check_run_dir(run_dir: Path) -> list[str] | None:
    """Before the lock: create the folder, or check that it is a run; returns the files to adopt when it
    is a run made before manifests (None otherwise). Anything else is an InputError that changes nothing."""
    if run_dir.is_dir() and not (run_dir / MANIFEST_FILE).is_file():
        names = list(_entries(run_dir))
        if names:
            return _adoptable(run_dir, names)
    try:
        run_dir.mkdir(parents=True, exist_ok=True)
    except OSError as err:  # a file in the way; a read-only or full file system: train/errors.py disk_error
        if disk_error(err):
            raise
        raise InputError(f"{run_dir}: cannot create the run directory ({err.strerror or err})") from None
    if not os.access(run_dir, os.W_OK | os.X_OK):  # root passes this check: the writes below then decide
        raise InputError(f"{run_dir}: run directory is not writable; choose another --run-dir")
    return None


def _adoptable(run_dir: Path, names: list[str]) -> list[str]:
    """The files of a run made before manifests, or an InputError saying why the folder is not a run."""
    ours = [n for n in names if _OURS.fullmatch(n)]
    refusal = (f"{run_dir}: not a run directory (it holds {_named(ours or names)} but no {MANIFEST_FILE}, so "
               f"nothing in it is provably this tool's) and nothing in it is changed; choose a new or empty --run-dir")
    checkpoints = [n for n in ours if CHECKPOINT.fullmatch(n)]
    if not is_run_config(run_dir) or not any(not n.endswith(".optimizer.safetensors") for n in checkpoints):
        raise InputError(refusal)
    tokenizer = run_dir / "tokenizer.model"
    tokenizer_hash = sha256_of(tokenizer) if tokenizer.is_file() else None
    for name in checkpoints:
        step = int(CHECKPOINT.fullmatch(name).group(1))
        try:
            _, metadata = load_checkpoint(run_dir / name, verify=True)
        except (CheckpointError, OSError) as err:
            raise InputError(f"{refusal} (a run made before manifests is adopted only when every checkpoint "
                             f"verifies: {err})") from None
        saved_step = metadata.get("step", metadata.get("progress", {}).get("step"))
        weights_tokenizer = metadata.get("tokenizer_hash", tokenizer_hash)
        if saved_step != step or (tokenizer_hash and weights_tokenizer != tokenizer_hash):
            raise InputError(f"{refusal} ({name} is not a checkpoint of this run: its step or tokenizer differs)")
    return ours


def open_run(run_dir: Path, adopt: list[str] | None) -> Manifest:
    """With the lock held: the run's manifest (settled after a kill, made for a new run, or adopting an
    old run's files), after checking that no file of the user's sits where `fit` writes."""
    manifest = Manifest.find(run_dir)
    if manifest is not None:
        manifest.settle()
    elif adopt:
        manifest = Manifest.create(run_dir, adopted=True)
        for name in adopt:
            manifest.record(name, append=name == "metrics.jsonl" or name.startswith("tensorboard/"))
        print(f"adopted {run_dir}, a run made before run manifests: {len(adopt)} files "
              f"({_named(adopt, 3)}) are now listed in {MANIFEST_FILE}", flush=True)
    else:
        manifest = Manifest.create(run_dir)
    listed = set(manifest.listed())
    blocking = [n for n in _entries(run_dir) if fit_writes(n) and n not in listed]
    if blocking:
        raise InputError(f"{run_dir}: holds {_named(blocking)}, which this tool did not write (not in "
                         f"{MANIFEST_FILE}) and would overwrite; nothing was changed; move them out of the run "
                         f"directory")
    return manifest


def remove_run_files(manifest: Manifest) -> tuple[list[str], list[str]]:
    """Delete the files this tool's commands wrote under their own names (listed, bytes unchanged); returns
    (deleted, kept because their bytes changed). A listed output at a name the user chose (translate
    --output RUN/outputs/x) is the user's and stays. The lock is on the folder, not on run.lock, so that goes too."""
    deleted, kept = [], []
    for name in manifest.listed():
        if owner_of(name) is not None:
            (deleted if manifest.remove(name) else kept).append(name)
    for folder in _OUR_FOLDERS:
        path = manifest.run_dir / folder
        if path.is_dir() and not any(path.iterdir()):
            path.rmdir()
    return deleted, kept


def start_over(manifest: Manifest, say=print) -> Manifest:
    """Delete the run's files, saying which, and begin a new manifest (a new run id); a changed file of ours is
    kept and named; the user's outputs listed in the old manifest stay, listed in the new one."""
    deleted, kept = remove_run_files(manifest)
    if deleted:
        say(f"starting over: deleted {len(deleted)} files of the earlier run: {', '.join(deleted)}")
    if kept:
        say(f"kept {_named(kept)}: changed since this tool wrote it, so it is yours now")
    outputs = [name for name in manifest.listed() if owner_of(name) is None and manifest.owns(name)]
    fresh = Manifest.create(manifest.run_dir)
    for name in outputs:
        fresh.record(name)
    return fresh


# ------------------------------------------------------------------ a start: checked, then written
@dataclass
class StartPlan:
    """What `fit` does to the run directory once every check of its start has passed (`commit_start`)."""

    manifest: Manifest
    resuming: bool  # the run goes on (from its newest checkpoint, when it has reached one)
    changes: dict = field(default_factory=dict)  # {setting: (old, new)}, logged once in metrics.jsonl
    start_over: bool = False  # delete the run's files first: --force, or a run that never reached a checkpoint
    write_config: bool = True  # a new run, changed settings, or config.json written again from the record


def run_config_of(manifest: Manifest) -> dict | None:
    """The run's config: its identity record, else its own config.json, else its newest checkpoint's."""
    if manifest.identity is not None:
        return manifest.identity["config"]
    if manifest.owns(CONFIG_FILE):
        return json.loads((manifest.run_dir / CONFIG_FILE).read_text(encoding="utf-8"))
    checkpoints = run_checkpoints(manifest.run_dir)
    if checkpoints:
        return load_checkpoint(checkpoints[-1], select=lambda name: False)[1].get("run_config")
    return None


def _ever_checkpointed(manifest: Manifest) -> bool:
    """The run completed a checkpoint once: its manifest recorded one whole (a user's `rm` leaves the record; a
    pruned one had a newer one beside it; a write a kill stopped before its hash is no checkpoint)."""
    return any(WEIGHTS.fullmatch(name) and "sha256" in entry for name, entry in manifest.entries.items())


def _other_start(manifest: Manifest, init_from) -> str | None:
    """Why `--init-from` does not match where the run started (None when it does, or is not given)."""
    if init_from is None:
        return None
    identity = manifest.identity or {}
    if "init_from" not in identity:
        return (f"where this run started is not recorded, so --init-from {init_from} cannot be checked against it "
                f"(it resumes from its own checkpoints)")
    if not Path(init_from).is_file():
        raise InputError(f"{init_from}: checkpoint not found (--init-from)")
    started, given = identity["init_from"], sha256_of(init_from)
    if started is None:
        return f"this run started from scratch, not from --init-from {init_from}"
    if started["sha256"] != given:
        return (f"this run started from {started['path']} (sha256 {started['sha256'][:12]}), not from "
                f"--init-from {init_from} (sha256 {given[:12]})")
    return None


def plan_start(run_config: RunConfig, manifest: Manifest, force: bool, init_from=None) -> StartPlan:
    """Check the config and the start against the run's record; writes nothing (see `commit_start`).

    A run is what its manifest records (its identity), whatever files are left: an existing run must have
    the same config, except the keys in config.RESUMABLE_KEYS (returned as changes), and the same
    `--init-from`; anything else is an InputError unless `force`, which starts over. A run that never
    reached its first checkpoint holds nothing worth keeping, so a new config simply starts it over; one
    whose checkpoints are all gone cannot resume, and its final models (best, averaged) stay.
    """
    if force:
        return StartPlan(manifest, resuming=False, start_over=True)
    run_dir, old = manifest.run_dir, run_config_of(manifest)
    trained = _ever_checkpointed(manifest)
    if old is None and trained:
        raise InputError(f"{run_dir}: its config.json is gone and nothing records it (a run from before run "
                         f"records); put config.json back, or --force to start over")
    if old is None:
        return StartPlan(manifest, resuming=False, start_over=bool(manifest.listed()))
    new = run_config.to_dict()
    changed = [k for k in config_lib.diff(old, new) if k not in config_lib.RESUMABLE_KEYS]
    checkpoints = run_checkpoints(run_dir)
    if checkpoints:
        refuse_a_config_with_train_accum(old, run_dir)
    other_start = _other_start(manifest, init_from)
    if not trained and (changed or other_start):
        return StartPlan(manifest, resuming=False, start_over=True)
    if changed:
        shown = ", ".join(f"{k} ({_lookup(old, k)!r} -> {_lookup(new, k)!r})" for k in changed[:3])
        raise InputError(f"{run_dir}: this run was started with a different config: {shown}; resume with the same "
                         f"settings (those that may change: docs/wmt.md, 'Resuming'), use another --run-dir, "
                         f"or --force to start over")
    if other_start:
        raise InputError(f"{run_dir}: {other_start}; leave out --init-from to resume this run, fine-tune in "
                         f"another --run-dir, or --force to start over")
    if trained and not checkpoints:
        finals = [n for n in manifest.listed() if n == "best.safetensors" or n.startswith("averaged_last")]
        kept = f"its final models stay: {', '.join(finals)}" if finals else "it has no final model left"
        raise InputError(f"{run_dir}: this run has no checkpoint left to resume from (its ckpt_* files were "
                         f"deleted); nothing was changed and {kept}; fine-tune from one with --init-from in "
                         f"another --run-dir, or --force to start over")
    changes = {k: (_lookup(old, k), _lookup(new, k)) for k in config_lib.diff(old, new)}
    return StartPlan(manifest, resuming=True, changes=changes,
                     write_config=bool(changes) or not manifest.owns(CONFIG_FILE))


def identity_of(run_config: RunConfig, data_key: str, tokenizer_sha256: str, start: dict) -> dict:
    """The run's identity record: its config, data and tokenizer, and `start` (`start_of`)."""
    text = config_lib.to_json(run_config)
    return {"config": run_config.to_dict(), "config_sha256": hashlib.sha256(text.encode()).hexdigest(),
            "data_key": data_key, "tokenizer_sha256": tokenizer_sha256, **start}


def start_of(manifest: Manifest, resumed: bool, init_from) -> dict:
    """Where the run started, for its identity: {"init_from": {"path", "sha256"} of the --init-from file, or None
    from scratch}; a resumed run keeps its record ({} where none was kept: a run from before run records)."""
    if resumed:
        identity = manifest.identity or {}
        return {"init_from": identity["init_from"]} if "init_from" in identity else {}
    start = None if init_from is None else {"path": str(Path(init_from).resolve()), "sha256": sha256_of(init_from)}
    return {"init_from": start}


def commit_start(plan: StartPlan, run_config: RunConfig, identity: dict, say=print) -> Manifest:
    """Once every check of the start has passed: start over if planned, write config.json, record the identity."""
    manifest = start_over(plan.manifest, say) if plan.start_over else plan.manifest
    if plan.write_config:
        if plan.resuming and not (manifest.run_dir / CONFIG_FILE).exists():
            say(f"{manifest.run_dir / CONFIG_FILE} was missing: written again from the run's record in {MANIFEST_FILE}")
        try:
            manifest.write_bytes(CONFIG_FILE, (config_lib.to_json(run_config) + "\n").encode("utf-8"))
        except OSError as err:
            if disk_error(err):
                raise
            raise InputError(f"{manifest.run_dir}: cannot write to the run directory ({err.strerror or err})") from None
    if manifest.identity != identity:
        manifest.set_identity(identity)
    return manifest


def _lookup(data: dict, dotted: str):
    for part in dotted.split("."):
        data = data.get(part) if isinstance(data, dict) else None
    return data


# ------------------------------------------------------------------ one writer
class RunLock:
    """`with RunLock(run_dir) as lock:` one process at a time trains in run_dir (see the module docstring)."""

    def __init__(self, run_dir: Path):
        self.run_dir = Path(run_dir)
        self.fd = None
        self.manifest = None

    def __enter__(self) -> "RunLock":
        try:
            self.fd = os.open(self.run_dir, os.O_RDONLY | os.O_DIRECTORY)
        except OSError as err:
            raise InputError(f"{self.run_dir}: cannot open the run directory ({err.strerror or err})") from None
        try:
            fcntl.flock(self.fd, fcntl.LOCK_EX | fcntl.LOCK_NB)  # atomic; the kernel drops it when we die
        except BlockingIOError:
            os.close(self.fd)
            raise InputError(f"{self.run_dir}: another process is training in this run directory ({self.holder()}); "
                             f"wait for it to finish, stop it, or use another --run-dir") from None
        except OSError as err:  # NFS cannot flock a directory (EBADF), some file systems lock nothing
            if err.errno not in (errno.ENOLCK, errno.EOPNOTSUPP, errno.ENOSYS, errno.EINVAL, errno.EBADF):
                raise
            warnings.warn(f"{self.run_dir}: this file system cannot lock the run directory ({err.strerror}); make "
                          f"sure only one process trains in it", stacklevel=2)
        return self

    def announce(self, manifest: Manifest) -> None:
        """Write who holds the lock into run.lock, for the message a second process gets."""
        self.manifest = manifest
        since = datetime.datetime.now().isoformat(timespec="seconds")
        info = {"pid": os.getpid(), "host": socket.gethostname(), "since": since, "run_id": manifest.run_id}
        manifest.write_bytes(LOCK_FILE, (json.dumps(info) + "\n").encode("utf-8"))

    def holder(self) -> str:
        """Who holds the lock, in words, from run.lock."""
        try:
            info = json.loads((self.run_dir / LOCK_FILE).read_text(encoding="utf-8"))
            return f"pid {info['pid']} on host {info['host']}, since {info['since']}; see {LOCK_FILE}"
        except FileNotFoundError:
            return f"who, is unknown: {LOCK_FILE} was deleted"
        except (OSError, ValueError, KeyError, TypeError):
            return f"see {LOCK_FILE}"

    def __exit__(self, *exc) -> None:
        try:
            if self.manifest is not None and self.manifest.owns(LOCK_FILE):
                self.manifest.write_bytes(LOCK_FILE, b"")  # nobody reads a finished run as held
        finally:
            os.close(self.fd)  # releases the lock
