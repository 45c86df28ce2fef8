"""minitensor is built in layers, and every import goes down them (function-local imports included).

    dtypes          bf16 and the dtype names
    kernels         one op and direction per folder: NumPy references, Numba and CUDA versions
    backends        the arrays' Backend (NumPy, Numba, CuPy), running the kernels
    autograd, functions, tensor     the graph, the Functions, the Tensor (they refer to each other)
    nn, optim, testing              what is built from Tensors

A kernel that imports a backend (or a backend the Tensor) ties a lower layer to a higher one:
it can no longer be read, tested or replaced on its own.
"""
from pathlib import Path

from import_graph import import_graph

MINITENSOR = Path(__file__).resolve().parents[2] / "minitensor"
LAYERS = [{"dtypes"}, {"kernels"}, {"backends"}, {"autograd", "functions", "tensor"}, {"nn", "optim", "testing"}]


def layer(module: str) -> int:
    """0 the lowest; the package's __init__ (which re-exports everything) above every layer."""
    parts = module.split(".")
    if len(parts) == 1:
        return len(LAYERS)
    return next(i for i, names in enumerate(LAYERS) if parts[1] in names)


def upward_imports(graph: dict[str, set[str]]) -> list[str]:
    return [f"{module} imports {imported}" for module, imports in sorted(graph.items())
            for imported in sorted(imports) if layer(imported) > layer(module)]


def test_the_layers_are_the_modules_on_disk():
    on_disk = {p.stem if p.suffix else p.name for p in MINITENSOR.iterdir()
               if p.suffix == ".py" and p.stem != "__init__" or (p / "__init__.py").exists()}
    assert on_disk == set().union(*LAYERS)


def test_no_module_imports_a_layer_above_it():
    assert upward_imports(import_graph(MINITENSOR)) == []


def test_a_planted_upward_import_is_caught(tmp_path):
    """The check above can fail: a kernel reaching into the backends, inside a function, is reported."""
    package = tmp_path / "minitensor"
    for folder in ("", "kernels", "kernels/softmax_forward", "backends"):
        (package / folder).mkdir(exist_ok=True)
        (package / folder / "__init__.py").write_text("")
    (package / "backends" / "base.py").write_text("from ..kernels.softmax_forward import numba_cpu\n")
    (package / "kernels" / "softmax_forward" / "numba_cpu.py").write_text(
        "def f():\n    from ...backends.base import Backend\n")
    assert upward_imports(import_graph(package)) == [
        "minitensor.kernels.softmax_forward.numba_cpu imports minitensor.backends.base"]

