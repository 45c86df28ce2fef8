"""One owner per name in a run directory: which command writes each of the names this tool uses there.

`fit` writes, reads back and prunes its own names (config.json, the checkpoints, best.safetensors,
...); `average`, `plot`, `export-tensorboard`, `tune-decoding` and the demo each own theirs. Every
command that writes a file or folder the user names (translate --output, evaluate --out, export
--out, average --out, parse-eval --out, export-tensorboard --out) asks `output_in_run` first: a name
owned by another command is refused, with or without --force and through any symlink, and the error
names the place that is the user's: RUN/outputs/ (nothing of this tool's is written, read or deleted there).
"""

import os
import re
from pathlib import Path

from train.errors import InputError
from train.run.manifest import MANIFEST_FILE, Manifest, run_containing

OUTPUTS_DIR = "outputs"
FIT_NAMES = (r"config\.json|prepared\.json|metrics\.jsonl|tokenizer\.(model|vocab)|run\.lock|best\.safetensors"
        r"|ckpt_\d{8}(\.optimizer)?\.safetensors")
_OWNERS = {  # name (relative, '/'-separated) -> the one command that writes it
    "fit": re.compile(FIT_NAMES + "|" + re.escape(MANIFEST_FILE) + r"|tensorboard(/.*)?"),
    "average": re.compile(r"averaged_last\d+\.safetensors"),
    "plot": re.compile(r"plots(/(loss|perplexity|lr|bleu|tokens_per_s|attention|norms)\.png)?"),
    "export-tensorboard": re.compile(r"tensorboard-export(/.*)?"),
    "demo": re.compile(r"test\.hyp"),
    "tune-decoding": re.compile(r"decoding\.json"),
}
_TEMPORARY = re.compile(r"(.+)\.tmp-\d+")  # an atomic write's temporary: its file's owner's (settle deletes it)


def owner_of(name: str) -> str | None:
    """The command that writes `name` in a run directory; None for a name of the user's choosing."""
    temporary = _TEMPORARY.fullmatch(name)
    name = temporary.group(1) if temporary else name
    return next((command for command, names in _OWNERS.items() if names.fullmatch(name)), None)


def fit_writes(name: str) -> bool:
    """True for a name (relative to a run directory, '/'-separated) that `fit` writes there: config.json,
    metrics.jsonl, the checkpoints and their optimizer files, best.safetensors, ..."""
    return re.fullmatch(FIT_NAMES, name) is not None


def output_in_run(path: str | Path | None, command: str, new: bool = False) -> "tuple[Manifest, str] | None":
    """Before `command` writes the user's `path`: (the run, the name in it) when it lies in a run directory
    (the file a symlink points to counts, and so does the link's own name), else None. A name that another
    command owns is an InputError naming the user's place, RUN/outputs/; with `new`, so is a `path` that exists."""
    if path is None:  # stdout
        return None
    path = Path(path)
    for where in (path, Path(os.path.realpath(path))):
        run = run_containing(where)
        owner = owner_of(run[1]) if run is not None else None
        if owner is not None and owner != command:
            raise InputError(f"{path}: {run[0].run_dir / run[1]} is a file `{owner}` writes in its run directory "
                             f"(never another command's, --force or not); write your own outputs under "
                             f"{run[0].run_dir / OUTPUTS_DIR}/ or outside the run")
    if new and path.exists():
        raise InputError(f"{path}: exists; choose another --out (nothing is overwritten)")
    if run is not None and run[1].startswith(OUTPUTS_DIR + "/"):  # the place the errors name is there to write in
        (run[0].run_dir / OUTPUTS_DIR).mkdir(exist_ok=True)
    return run


__all__ = ["OUTPUTS_DIR", "FIT_NAMES", "owner_of", "fit_writes", "output_in_run"]
