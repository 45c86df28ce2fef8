"""What NVRTC makes of the kernels under CuPy, checked without a GPU.

1. The PTX of every kernel, compiled with CuPy's flags (ours, then CuPy's -ftz=true), has no
   conversion that flushes subnormals: under -ftz=true a plain (float)d becomes
   cvt.rn.ftz.f32.f64, so bf16_cast turned a float64 1e-40 into 0 instead of the bf16 bits 0x0001
   (tests/minitensor/kernels/test_bf16_cast_gpu.py on a GPU). common.cuh's to_f32 / to_f64 write the
   conversion in PTX, without .ftz. Skipped where NVRTC does not load (no cupy, no libnvrtc;
   `pip install -e ".[test]"` brings both on Linux).
2. CudaKernels compiles only the instantiation a launch asks for, once: counted through a
   stand-in for cupy.RawModule here, and on a GPU for a real bf16 training step.
"""
import importlib
import inspect
import json
import os
import re
import subprocess
import sys
import types
from pathlib import Path

import pytest

from minitensor.kernels.cupy_launcher import KERNELS_DIR, OPTIONS, CudaKernels, cuda_source
from tests.minitensor.kernels._gpu import WHY as NO_GPU, cp

ROOT = Path(__file__).resolve().parents[3]

OPS = sorted(p.parent.name for p in KERNELS_DIR.glob("*/cuda.cu"))
ARCH = "-arch=compute_90"   # the H100's; PTX needs no GPU to make
CUPY_APPENDS = ("-ftz=true", "--device-as-default-execution-space")   # cupy/cuda/compiler.py, after OPTIONS


def _nvrtc():
    try:
        from cupy.cuda import nvrtc

        nvrtc.getVersion()   # loads libnvrtc
        return nvrtc, ""
    except Exception as exc:  # noqa: BLE001 - ImportError, a missing libnvrtc, ...: the reason is shown
        return None, f"{type(exc).__name__}: {exc}".splitlines()[0]


NVRTC, WHY = _nvrtc()
needs_nvrtc = pytest.mark.skipif(NVRTC is None, reason=f"NVRTC not available ({WHY})")


def _name_expressions(op):
    return importlib.import_module(f"minitensor.kernels.{op}.cupy_launch").CUDA.name_expressions


def one_per_type_list(names):
    """One instantiation per kernel and type list: <float, 4> and <float, 8> convert alike."""
    first = {}
    for name in names:
        first.setdefault(re.sub(r"\b\d+\b", "N", name), name)
    return list(first.values())


def ptx(source: str, names=()) -> str:
    """The PTX NVRTC makes of CUDA source with these instantiations, under CuPy's flags."""
    program = NVRTC.createProgram(source, "kernels.cu", (), ())
    try:
        for name in names:
            NVRTC.addNameExpression(program, name)
        try:
            NVRTC.compileProgram(program, (*OPTIONS, *CUPY_APPENDS, ARCH))
        except NVRTC.NVRTCError:
            pytest.fail(f"NVRTC could not compile it:\n{NVRTC.getProgramLog(program)}")
        text = NVRTC.getPTX(program)
    finally:
        NVRTC.destroyProgram(program)
    return text.decode() if isinstance(text, bytes) else text


def flushing_conversions(text):
    """cvt instructions with .ftz between two different types (cvt.ftz.sat.f32.f32, a clamp, is no conversion)."""
    found = []
    for match in re.finditer(r"\bcvt((?:\.\w+)+)", text):
        parts = match.group(1).split(".")[1:]
        if "ftz" in parts and parts[-1] != parts[-2]:
            found.append(match.group(0))
    return found


@needs_nvrtc
def test_cupy_still_appends_ftz_after_our_options():
    """The premise of the PTX test: if CuPy stops appending -ftz=true, CUPY_APPENDS must follow."""
    from cupy.cuda import compiler

    assert "'-ftz=true'" in inspect.getsource(compiler)


@needs_nvrtc
def test_a_plain_cast_flushes_under_cupys_flags_and_the_ptx_helpers_do_not():
    """The check can fail: the plain casts compile to .ftz conversions, common.cuh's to exact ones."""
    source = (KERNELS_DIR / "common.cuh").read_text() + """
extern "C" __global__ void plain(float* y, double* z, const double* x, const float* w) {
    y[0] = (float)x[0]; z[0] = (double)w[0]; }
extern "C" __global__ void exact(float* y, double* z, const double* x, const float* w) {
    y[0] = to_f32(x[0]); z[0] = to_f64(w[0]); }
"""
    text = ptx(source)
    plain, exact = text.split(".entry exact")
    assert sorted(flushing_conversions(plain)) == ["cvt.ftz.f64.f32", "cvt.rn.ftz.f32.f64"]
    assert flushing_conversions(exact) == []
    assert "cvt.rn.f32.f64" in exact and "cvt.f64.f32" in exact


@needs_nvrtc
@pytest.mark.parametrize("op", OPS)
def test_no_kernel_flushes_subnormals_in_a_conversion(op):
    names = one_per_type_list(_name_expressions(op))
    found = flushing_conversions(ptx(cuda_source(op), names))
    assert not found, f"{op}: {sorted(set(found))} under CuPy's -ftz=true: convert with to_f32/to_f64 (common.cuh)"


@pytest.fixture
def recorded_modules(monkeypatch):
    """A stand-in for cupy whose RawModule records what it is asked to compile (no GPU, no NVRTC)."""
    built = []

    class RawModule:
        def __init__(self, code, options, name_expressions=()):
            built.append(tuple(name_expressions))
            self.options = options

        def get_function(self, name):
            return ("kernel", name, self)

    monkeypatch.setitem(sys.modules, "cupy", types.SimpleNamespace(RawModule=RawModule))
    return built


def test_only_the_instantiation_asked_for_is_compiled_once(recorded_modules):
    names = _name_expressions("softmax_forward")
    kernels = CudaKernels("softmax_forward", names)
    first = kernels.function(names[3])
    assert kernels.function(names[3]) is first
    kernels.function(names[0])
    assert recorded_modules == [(names[3],), (names[0],)] == kernels.compiled
    assert first[2].options == OPTIONS
    with pytest.raises(KeyError, match="not among the instantiations"):
        kernels.function("softmax_forward_v1<long double>")


def test_a_file_of_extern_c_kernels_is_compiled_whole_once(recorded_modules):
    kernels = CudaKernels("matmul_forward")
    kernels.function("matmul_forward_v1")
    kernels.function("matmul_forward_v2")
    assert recorded_modules == [()] == kernels.compiled


STEP_AND_COUNT = """
import importlib, json, sys
from tests.test_launch_count import counted_step
counted_step("bf16", "cupy")
print(json.dumps({op: importlib.import_module(f"minitensor.kernels.{op}.cupy_launch").CUDA.compiled
                  for op in sys.argv[1:]}))
"""


@pytest.mark.gpu
@pytest.mark.skipif(cp is None, reason=f"no usable CuPy GPU ({NO_GPU})")
def test_a_bf16_training_step_compiles_only_the_instantiations_it_uses():
    """Two steps of the base structure in a fresh process: each instantiation it launches compiled once."""
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")])))
    done = subprocess.run([sys.executable, "-c", STEP_AND_COUNT, *OPS], cwd=ROOT, env=env, capture_output=True,
                          text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    compiled = json.loads(done.stdout.strip().splitlines()[-1])
    names = [name for op in OPS if _name_expressions(op) for module in compiled[op] for name in module]
    assert all(len(module) == 1 for op in OPS if _name_expressions(op) for module in compiled[op])
    assert len(names) == len(set(names)), "an instantiation was compiled twice"
    every = sum(len(_name_expressions(op)) for op in OPS)
    assert 0 < len(names) <= every // 4, f"a bf16 step compiled {len(names)} of {every}: {compiled}"
