"""Every kernels/*/cuda.cu compiles with nvcc for sm_90 (no GPU needed), with every template
instantiation its cupy_launch.py asks NVRTC for. The compile checks skip when nvcc is not on PATH.

CuPy compiles a template only for the name expressions listed in cupy_launch.CUDA, so a kernel
that breaks for one dtype or one VPT would otherwise show up only on a GPU machine. Per file:
  - as written, the standalone check from its header (-I<kernels dir> finds common.cuh);
  - the source CuPy compiles (cupy_launcher.cuda_source, common.cuh pasted in) plus a table
    holding the address of each name expression, which makes nvcc instantiate and compile it.
All files are compiled once, in parallel, by a module fixture; each op then reports its own result.
"""
import importlib
import os
import shutil
import subprocess
from concurrent.futures import ThreadPoolExecutor

import pytest

from minitensor.kernels.cupy_launcher import COMMON_HEADER, KERNELS_DIR, cuda_source

NVCC = shutil.which("nvcc")
OPS = sorted(p.parent.name for p in KERNELS_DIR.glob("*/cuda.cu"))
needs_nvcc = pytest.mark.skipif(NVCC is None, reason="nvcc not on PATH")


def _name_expressions(op):
    return importlib.import_module(f"minitensor.kernels.{op}.cupy_launch").CUDA.name_expressions


def _instantiating_source(op):
    """What CuPy compiles for op, plus the address of each instantiation it fetches by name."""
    names = _name_expressions(op)
    if not names:  # extern "C" kernels only: compiled as they are
        return cuda_source(op)
    table = "".join(f"    (void*)&{name},\n" for name in names)
    return f"{cuda_source(op)}\n// what cupy_launch.py asks for\nvoid* instantiations[] = {{\n{table}}};\n"


def _nvcc(source, *flags):
    """(return code, command and compiler output) of compiling one file to an object."""
    cmd = [NVCC, "-std=c++17", "-arch=sm_90", *flags, "-c", str(source), "-o", os.devnull]
    result = subprocess.run(cmd, capture_output=True, text=True)
    return result.returncode, " ".join(cmd) + "\n" + result.stdout + result.stderr


@pytest.fixture(scope="module")
def compile_results(tmp_path_factory):
    """op -> [(what was compiled, return code, log)] for every cuda.cu, nvcc runs in parallel."""
    tmp = tmp_path_factory.mktemp("nvcc")
    jobs = []
    for op in OPS:
        generated = tmp / f"{op}_instantiated.cu"
        generated.write_text(_instantiating_source(op))
        jobs.append((op, "as written", KERNELS_DIR / op / "cuda.cu", [f"-I{KERNELS_DIR}"]))
        jobs.append((op, "with every instantiation", generated, []))
    with ThreadPoolExecutor(max_workers=min(8, os.cpu_count() or 1)) as pool:
        outcomes = pool.map(lambda job: _nvcc(job[2], *job[3]), jobs)
        results = {op: [] for op in OPS}
        for (op, what, _, _), (code, log) in zip(jobs, outcomes):
            results[op].append((what, code, log))
    return results


@needs_nvcc
@pytest.mark.parametrize("op", OPS)
def test_cuda_file_compiles_with_every_instantiation(op, compile_results):
    for what, code, log in compile_results[op]:
        assert code == 0, f"{op}/cuda.cu {what} does not compile:\n{log}"


def test_name_expressions_name_the_ops_own_kernels_once():
    for op in OPS:
        names = _name_expressions(op)
        assert all(name.startswith(f"{op}_v") for name in names), f"{op}: {names}"
        assert len(set(names)) == len(names), f"{op}: a name expression is listed twice"


@pytest.mark.parametrize("op", OPS)
def test_cuda_source_pastes_the_header_and_keeps_line_numbers(op):
    """After the #line mark, line n of the pasted source is line n of cuda.cu (NVRTC errors point right)."""
    original = (KERNELS_DIR / op / "cuda.cu").read_text().splitlines()
    pasted = cuda_source(op)
    lines = pasted.splitlines()
    assert f'#include "{COMMON_HEADER}"' not in lines
    assert (KERNELS_DIR / COMMON_HEADER).read_text() in pasted
    mark = next(i for i, line in enumerate(lines) if line.startswith("#line") and f"{op}/cuda.cu" in line)
    first = int(lines[mark].split()[1])  # the line number of the line after the mark
    assert lines[mark + 1:] == original[first - 1:]
