"""Meta-tests on minitensor/kernels/: each backend file's header lists exactly its VERSIONS keys,
DEFAULT is one of them, each reference.py defines <op>_ref, and every kernel folder has a mirrored
tests/minitensor/kernels/test_<op>.py and benchmarks/bench_<op>.py.

Files are parsed with ast, never imported, so GPU backends are checked on machines without a GPU.
"""
import ast
import re
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[3]
KERNELS = REPO / "minitensor" / "kernels"
BACKEND_FILES = ("numba_cpu.py", "cupy_launch.py", "numba_cuda.py")
OPS = sorted(p.name for p in KERNELS.iterdir() if p.is_dir() and not p.name.startswith("__"))
BACKENDS = [(op, name) for op in OPS for name in BACKEND_FILES if (KERNELS / op / name).exists()]


def _registry(path):
    """(header version numbers, VERSIONS keys, DEFAULT) read from a backend file's source."""
    tree = ast.parse(path.read_text())
    header = ast.get_docstring(tree) or ""
    listed = [int(n) for n in re.findall(r"^v(\d+):", header, flags=re.MULTILINE)]
    keys, default = None, None
    for node in tree.body:
        if isinstance(node, (ast.Assign, ast.AnnAssign)):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            names = [t.id for t in targets if isinstance(t, ast.Name)]
            if "VERSIONS" in names and isinstance(node.value, ast.Dict):
                keys = [ast.literal_eval(k) for k in node.value.keys]
            if "DEFAULT" in names:
                default = ast.literal_eval(node.value)
    return listed, keys, default


def test_there_are_kernel_folders():
    assert OPS, f"no kernel folders under {KERNELS}"


@pytest.mark.parametrize("op,backend", BACKENDS, ids=[f"{o}/{b}" for o, b in BACKENDS])
def test_header_lists_exactly_the_registered_versions(op, backend):
    listed, keys, default = _registry(KERNELS / op / backend)
    assert keys is not None, f"{op}/{backend}: no literal `VERSIONS = {{...}}` dict"
    assert sorted(listed) == sorted(keys), (
        f"{op}/{backend}: header lists versions {sorted(listed)}, VERSIONS has {sorted(keys)}")
    assert len(listed) == len(set(listed)), f"{op}/{backend}: a version is listed twice"
    assert default in keys, f"{op}/{backend}: DEFAULT = {default} is not in VERSIONS {keys}"


@pytest.mark.parametrize("op", OPS)
def test_reference_defines_the_spec_function(op):
    path = KERNELS / op / "reference.py"
    assert path.exists(), f"kernels/{op}/ has no reference.py"
    names = {n.name for n in ast.parse(path.read_text()).body if isinstance(n, ast.FunctionDef)}
    assert f"{op}_ref" in names, f"kernels/{op}/reference.py does not define {op}_ref"


@pytest.mark.parametrize("op", OPS)
def test_kernel_folder_has_mirrored_test_and_benchmark(op):
    missing = [str(p.relative_to(REPO)) for p in (REPO / "tests" / "minitensor" / "kernels" / f"test_{op}.py",
                                                  REPO / "benchmarks" / f"bench_{op}.py")
               if not p.exists()]
    assert not missing, f"kernels/{op}/ is missing its mirrored files: {missing}"
