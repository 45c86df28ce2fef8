"""User-facing errors of the training pipeline.

`InputError` is for problems with what the user gave us (a missing file, a
non-UTF-8 line, a batch size too small for a sentence). The CLI prints
`error: <message>` and exits with status 2, without a traceback, so every
message must be one line that says what is wrong and where, e.g.
`data/train.de:17: not valid UTF-8`.

A write the disk refuses (full, over quota, read-only, not permitted) is said the same way, by
`disk_error`: the file and the free space on its file system.
"""

import contextlib
import errno
import os
import re
import shutil
from pathlib import Path

DISK_ERRNOS = frozenset({errno.ENOSPC, errno.EDQUOT, errno.EROFS, errno.EACCES})


class InputError(Exception):
    """A problem with the user's input, reported as one line (`path:line: what`)."""


@contextlib.contextmanager
def naming(path):
    """An OSError inside names `path` when it names no file (a write() or close() into a full disk names none)."""
    try:
        yield
    except OSError as err:
        if err.filename is None:
            err.filename = str(path)
        raise


def disk_error(err: OSError) -> str | None:
    """One line for a write the disk refused (`DISK_ERRNOS`): the file (a rename's target, not its temporary),
    why, and the space left there; None for any other OSError."""
    if err.errno not in DISK_ERRNOS:
        return None
    path = err.filename2 or err.filename
    if path is None:
        return f"{err.strerror} ({_free(Path.cwd())} free in the working directory, {Path.cwd()})"
    path = Path(re.sub(r"\.tmp-\d+$", "", os.fsdecode(path)))  # a writer's temporary: the file it was to become
    return f"{path}: {err.strerror} ({_free(path)} free on its file system)"


def _free(path: Path) -> str:
    """Free space on the file system of `path` (or of the nearest folder above it that exists)."""
    for folder in (path, *path.absolute().parents):
        try:
            free = shutil.disk_usage(folder).free
        except OSError:
            continue
        for unit, size in (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
            if free >= size:
                return f"{free / size:.1f} {unit}"
        return f"{free} bytes"
    return "unknown space"
