"""Writing a figure: atomically, and inside a run directory as one of the run's files (train/run/manifest.py).

Every PNG a command draws goes through `save_figure` (plots.py's curves and attention maps,
norm_plots.py's norms), so none of them can replace a file of the user's. matplotlib runs with
the Agg backend (files only, no display needed).
"""

import os
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402 - the backend must be chosen first

from train.errors import naming  # noqa: E402
from train.run.run_names import output_in_run  # noqa: E402


def save_figure(fig, path: str | Path) -> Path:
    """Write a figure atomically (temporary file, then rename) and close it; in a run directory, as one
    of the run's files (listed in its manifest; a file of the user's is never replaced)."""
    path = Path(path)
    run = output_in_run(path, "plot")
    with run[0].writing(run[1]) if run is not None else naming(path):  # a full disk's write() names no file
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_name(f"{path.name}.tmp-{os.getpid()}")
        try:
            fig.savefig(tmp, dpi=100, format="png")
            os.replace(tmp, path)
        finally:
            tmp.unlink(missing_ok=True)
            plt.close(fig)
    return path
