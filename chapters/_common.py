"""What every chapter shares: its two switches, figures, one CPU thread, and "a check must be able to fail".

    from _common import CHECK_SOLUTIONS, FAST, fails, load_solutions, show

- `FAST` / `CHECK_SOLUTIONS`: the command-line flags `--fast` (smaller sizes, as in CI)
  and `--check-solutions` (also test chapters/solutions/NN_*.py). In a notebook, put
  `import sys; sys.argv.append("--fast")` in a first cell to get the fast sizes.
- `show(fig, name)`: save the figure as chapters/_out/<name>.png and, when the chapter
  runs as a notebook (a Jupyter kernel), display it inline as that PNG.
- `one_cpu_thread()`: NumPy's BLAS and Numba on one thread until the script ends;
  the chapters' matrices are tiny, and extra threads only add overhead (many times over
  on a busy machine). Keep the returned object alive: dropping it restores the threads.
- `fails(check, *wrong)`: True when `check(*wrong)` raises, so a chapter can prove that
  each of its checks rejects a deliberately wrong answer.
- `load_solutions("NN_title")`: the chapter's reference solutions, chapters/solutions/NN_title.py.
- `numba_cuda()`: (numba.cuda, on_gpu): a real GPU when CuPy finds one, else numba's CUDA simulator.
"""
from __future__ import annotations

import contextlib
import importlib
import os
import sys
from pathlib import Path

import matplotlib

matplotlib.use("Agg")                          # files, never a window; notebooks get the PNG itself

FAST = "--fast" in sys.argv
CHECK_SOLUTIONS = "--check-solutions" in sys.argv
CHAPTERS = Path(__file__).resolve().parent
OUT = CHAPTERS / "_out"                        # ignored by git; rewritten on every run


def _in_jupyter() -> bool:
    ipython = sys.modules.get("IPython")
    shell = ipython.get_ipython() if ipython is not None else None
    return shell is not None and hasattr(shell, "kernel")


def show(fig, name: str) -> Path:
    """Save `fig` to chapters/_out/<name>.png, show it inline under Jupyter, and close it."""
    import matplotlib.pyplot as plt

    OUT.mkdir(exist_ok=True)
    path = OUT / f"{name}.png"
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)
    if _in_jupyter():
        from IPython.display import Image, display

        display(Image(filename=str(path)))
    return path


def one_cpu_thread() -> contextlib.ExitStack:
    """Hold one BLAS/Numba thread until the returned stack is closed or the process ends."""
    from train.threads import cpu_threads

    stack = contextlib.ExitStack()
    stack.enter_context(cpu_threads(1))
    return stack


def numba_cuda():
    """(numba.cuda, on_gpu): the real GPU when CuPy can run on one, else numba's CUDA simulator.

    The simulator runs every CUDA thread as a Python thread on the CPU: the same answers, with
    timings that mean nothing. It is switched on as tests/kernels does it, NUMBA_ENABLE_CUDASIM=1,
    which numba reads when it loads its config: so before numba.cuda is first imported (numba.cuda
    comes through the library's one compat place, minitensor/backends/numba_cuda_compat.py).
    """
    import numba.core.config

    from minitensor import available
    from minitensor.backends.numba_cuda_compat import import_numba_cuda

    on_gpu = available("cupy")
    if not on_gpu and "numba.cuda" not in sys.modules:
        os.environ["NUMBA_ENABLE_CUDASIM"] = "1"
        numba.core.config.reload_config()      # numba is loaded already (minitensor imports it)
    if not on_gpu and not numba.core.config.ENABLE_CUDASIM:
        raise RuntimeError("no GPU, and numba.cuda was imported before the simulator could be switched on")
    return import_numba_cuda(), on_gpu


def fails(check, *wrong) -> bool:
    """True when `check(*wrong)` raises: the check rejects the wrong answer."""
    try:
        check(*wrong)
    except (AssertionError, ValueError, TypeError, FloatingPointError, IndexError, KeyError):
        return True
    return False


def load_solutions(name: str):
    """chapters/solutions/<name>.py (name = the chapter's file name without .py), imported as a module."""
    if str(CHAPTERS) not in sys.path:
        sys.path.insert(0, str(CHAPTERS))
    return importlib.import_module(f"solutions.{name}")


def finish(chapter: str, checks: dict) -> None:
    """End a chapter: with --check-solutions, run each exercise's check on its reference solution, then say OK.

    `checks` maps each check function to the names (space-separated) of what it takes from
    chapters/solutions/<chapter>.py.
    """
    if CHECK_SOLUTIONS:
        solutions = load_solutions(chapter)
        for check, names in checks.items():
            check(*(getattr(solutions, name) for name in names.split()))
        print("solutions OK")
    print(f"chapter {chapter[:2]} OK")
