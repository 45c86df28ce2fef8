"""A run's metrics as TensorBoard scalars, through tensorboardX: live during `fit --tensorboard`, or exported after.

    python -m train fit --config ... --tensorboard          # RUN_DIR/tensorboard/, written as training goes
    python -m train export-tensorboard RUN_DIR              # metrics.jsonl -> RUN_DIR/tensorboard-export/
    tensorboard --logdir RUN_DIR

tensorboardX is an optional extra (`pip install -e ".[tb]"`); TensorBoard itself is only
needed to look. Every number in a metrics record (train/run/metrics.py) becomes a scalar
tagged `<kind>/<field>`, e.g. `train/loss`, `valid/bleu`, at the record's step and time.
A resumed run redoes the steps after its checkpoint: the live log starts a new session
with `purge_step` = checkpoint step + 1, so TensorBoard hides the points of the steps that
were redone, as the plots do (train.run.metrics.read_metrics).
"""

from pathlib import Path

from train.errors import InputError, naming
from train.run.manifest import Manifest
from train.run.run_names import output_in_run
from train.run.metrics import METRICS_FILE, read_metrics

LIVE_DIR = "tensorboard"
EXPORT_DIR = "tensorboard-export"
EXPORT_SUFFIX = ".export"
_SKIPPED_FIELDS = ("step", "time")


def scalars_of(record: dict) -> dict[str, float]:
    """{"<kind>/<field>": value} for every number of a metrics record (booleans and step/time left out)."""
    return {f"{record['kind']}/{key}": float(value) for key, value in record.items()
            if key not in _SKIPPED_FIELDS and isinstance(value, (int, float)) and not isinstance(value, bool)}


def summary_writer_class():
    """tensorboardX's SummaryWriter, or a one-line InputError saying how to install it."""
    try:
        from tensorboardX import SummaryWriter
    except ImportError:
        raise InputError('TensorBoard logs need tensorboardX: pip install -e ".[tb]" (or pip install tensorboardX)') \
            from None
    return SummaryWriter


def _event_folder(path: str | Path) -> Path:
    """`path`, unless a file (the user's) lies there: an InputError, before anything is written or replaced."""
    path = Path(path)
    if path.exists() and not path.is_dir():
        raise InputError(f"{path}: a file, where the event files' folder goes; nothing was changed; move it away")
    return path


class TensorBoardLog:
    """Metrics records written as TensorBoard scalars into one folder (one event file per session).

    The file is events.out.tfevents.<seconds>.<host><suffix>: give each session its own suffix,
    or two sessions started in the same second share (and overwrite) one file. With a run's
    `manifest` (train/run/manifest.py), the file is listed there as one of the run's.
    """

    def __init__(self, logdir: str | Path, purge_step: int | None = None, suffix: str = "", manifest=None):
        logdir = _event_folder(logdir)
        before = set(logdir.glob("events.out.tfevents.*"))
        with naming(logdir):
            self.writer = summary_writer_class()(logdir=str(logdir), purge_step=purge_step, filename_suffix=suffix)
        self.manifest, self.files = manifest, sorted(set(logdir.glob("events.out.tfevents.*")) - before)
        self._record()

    def _record(self) -> None:
        for path in self.files if self.manifest is not None else ():
            self.manifest.record(path.relative_to(self.manifest.run_dir).as_posix(), append=True)

    def write(self, record: dict) -> int:
        """Add the record's scalars; returns how many."""
        scalars = scalars_of(record)
        with naming(self.writer.logdir):
            for tag, value in scalars.items():
                self.writer.add_scalar(tag, value, int(record["step"]), walltime=record.get("time"))
        return len(scalars)

    def close(self) -> None:
        with naming(self.writer.logdir):
            self.writer.close()
        self._record()


def export_run(run_dir: str | Path, out_dir: str | Path | None = None) -> tuple[Path, int]:
    """Write a run's metrics.jsonl as one event file in out_dir (default RUN_DIR/tensorboard-export).

    Returns (the folder, the number of scalars). In the run directory, the run's earlier export is
    replaced (the files its manifest lists, no other); another `out_dir` must be new or empty.
    """
    run_dir = Path(run_dir)
    metrics = run_dir / METRICS_FILE
    if not metrics.is_file():
        raise InputError(f"{run_dir}: no metrics.jsonl here; is it a run directory?")
    summary_writer_class()  # the extra is there before anything is replaced
    manifest = None
    if out_dir is None:
        out, manifest = _event_folder(run_dir / EXPORT_DIR), Manifest.load(run_dir)
        for name in manifest.listed():  # ours, and made again from metrics.jsonl
            if name.startswith(EXPORT_DIR + "/"):
                manifest.remove(name)
    else:
        out = Path(out_dir)
        output_in_run(out, "export-tensorboard")
        if out.exists() and (not out.is_dir() or any(out.iterdir())):
            raise InputError(f"{out}: exists and is not an empty folder; choose a new or empty --out "
                             f"(nothing in it is replaced)")
    log, count = TensorBoardLog(out, suffix=EXPORT_SUFFIX, manifest=manifest), 0
    for record in read_metrics(metrics):
        if record.get("kind") != "resume":
            count += log.write(record)
    log.close()
    return out, count
