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
- `own_answer(fn, inputs, cotangent)` and `hold_training_path(piece, library, inputs, expected, cotangent)`:
  a chapter that builds a piece ends by holding the code that trains it (the library's fused Function on
  the Numba kernels every config trains with, the CUDA kernels on a GPU, the numba.cuda kernels on the
  simulator) to its own version: values and gradients in float64, a message naming the piece and the path.
- `calls_to(*functions)`: count the calls of library functions inside a block, however they were imported,
  so an exercise check can insist that the learner wrote the thing rather than called it.
- `OnePass(values)`: a sequence that can be read once, front to back, so a check can insist on one pass.
"""
from __future__ import annotations

import collections
import contextlib
import importlib
import os
import sys
from pathlib import Path

import matplotlib
import numpy as np

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
    timings that mean nothing. It is switched on as tests/minitensor/kernels does it, NUMBA_ENABLE_CUDASIM=1,
    which numba reads when it loads its config: so before numba.cuda is first imported (numba.cuda
    comes through the library's one compat place, minitensor/kernels/numba_cuda_compat.py).
    """
    import numba.core.config

    from minitensor import available
    from minitensor.kernels.numba_cuda_compat import import_numba_cuda

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


def own_answer(fn, inputs: dict, cotangent) -> dict:
    """The chapter's own answer for hold_training_path: fn(*leaves) on NumPy float64 Parameters, through autograd.

    Returns {"output": fn's output, name: the gradient of Σ output⊙cotangent with respect to input `name`}.
    """
    import minitensor as mt

    leaves = {name: mt.nn.Parameter(a, dtype="float64") for name, a in inputs.items()}
    out = fn(*leaves.values())
    (out * mt.tensor(cotangent, dtype="float64")).sum().backward()
    grads = {name: np.zeros(leaf.shape) if leaf.grad is None else leaf.grad for name, leaf in leaves.items()}
    return {"output": out.numpy(), **grads}


TRAINING_PATHS = {"numpy": "the NumPy reference kernels", "numba": "the Numba kernels (what every config trains with)",
                  "cupy": "the CUDA kernels"}


def hold_training_path(piece: str, library, inputs: dict, expected: dict, cotangent, kernels=None,
                       backends=tuple(TRAINING_PATHS)) -> list[str]:
    """Hold the code that trains `piece` to the chapter's own version: values and gradients, in float64.

    library(*tensors) -> Tensor is the library's op (its fused Function). It runs on each backend of
    `backends`, the inputs as float64 Parameters (leaves, usable as a module's weights): "numpy" runs
    the NumPy reference kernels, "numba" the compiled CPU kernels that every config trains with (both
    must work: a backend that fails to load is an error here, not a skip), "cupy" the CUDA kernels
    (when a GPU is there). `expected` is the chapter's own answer (own_answer, or derived by hand): the
    output, and the gradient of Σ output⊙cotangent for each input it names. `kernels` are forward kernels
    run alone, {name: fn(*arrays) -> array} (the numba.cuda kernels: on the CUDA simulator when there is
    no GPU): their values only. Tolerances are float64's row of minitensor.testing.TOLERANCES.
    Raises AssertionError naming the piece, the path and what differs; returns the paths it held.
    """
    import minitensor as mt

    held = []
    for backend in (b for b in backends if b != "cupy" or mt.available(b)):   # NumPy and Numba always: no silent skip
        mt.get_backend(backend)                                                   # raises, with the reason, if it broke
        path = f"{piece}, the library on {TRAINING_PATHS[backend]}"
        leaves = {name: mt.nn.Parameter(a, backend=backend, dtype="float64") for name, a in inputs.items()}
        out = library(*leaves.values())
        mt.assert_close(out.numpy(), expected["output"], name=f"{path}: output vs the chapter's own")
        (out * mt.tensor(cotangent, backend=backend, dtype="float64")).sum().backward()
        for name, leaf in leaves.items():
            if name in expected:
                grad = np.zeros(leaf.shape) if leaf.grad is None else leaf.backend.to_numpy(leaf.grad)
                mt.assert_close(grad, expected[name], name=f"{path}: gradient of {name} vs the chapter's own")
        held.append(backend)
    for name, kernel in (kernels or {}).items():
        got = kernel(*(np.asarray(a, dtype=np.float64) for a in inputs.values()))
        mt.assert_close(got, expected["output"], name=f"{piece}, {name}: output vs the chapter's own")
        held.append(name)
    print(f"{piece}: the library agrees with this chapter on " + ", ".join(held))
    return held


@contextlib.contextmanager
def calls_to(*functions):
    """Count the calls of `functions` (Python functions or builtins) made inside the block.

        with calls_to(library_function) as calls:
            learners_answer(...)
        assert not calls, "write it yourself"

    The count goes by the function's code (or, for a builtin, the object itself), not by its name, so an
    alias or a `from ... import` is counted too. The Counter maps each called function's name to its count.
    """
    codes = {f.__code__: f.__qualname__ for f in functions if hasattr(f, "__code__")}
    builtins = {id(f): f.__qualname__ for f in functions if not hasattr(f, "__code__")}
    calls = collections.Counter()

    def profile(frame, event, arg):
        if event == "call" and frame.f_code in codes:
            calls[codes[frame.f_code]] += 1
        elif event == "c_call" and id(arg) in builtins:
            calls[builtins[id(arg)]] += 1

    previous = sys.getprofile()
    sys.setprofile(profile)
    try:
        yield calls
    finally:
        sys.setprofile(previous)


class OnePass:
    """The values, readable once from front to back (an iterator, no len(), no indexing, no second pass)."""

    def __init__(self, values):
        self._values, self.passes, self.reads = list(values), 0, 0

    def __iter__(self):
        self.passes += 1
        if self.passes > 1:
            raise AssertionError("the row was read a second time: this must be one pass")
        for value in self._values:
            self.reads += 1
            yield value


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
