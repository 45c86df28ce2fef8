"""`python -m train doctor`: what this machine can run, and why not when it cannot.

Reports versions (Python, NumPy, Numba, CuPy, CUDA driver and runtime), the
devices CuPy sees, and which minitensor backends work here. Nothing is
installed or changed; every probe is guarded so the report itself never fails.
"""

import importlib
import platform
import sys

import minitensor as mt
from minitensor.backends import resolve_name
from train.threads import usable_cores


def _version(module_name: str) -> str:
    try:
        return getattr(importlib.import_module(module_name), "__version__", "installed (no version)")
    except Exception as err:  # noqa: BLE001 - report any import failure as text
        return f"not available ({type(err).__name__}: {str(err).splitlines()[0] if str(err) else ''})"


def _cuda_lines() -> list[str]:
    """CUDA driver/runtime versions and devices, via CuPy when it imports."""
    try:
        import cupy
    except Exception as err:  # noqa: BLE001
        return [f"CUDA        not probed (CuPy does not import: {type(err).__name__})"]
    lines = []
    try:
        runtime = cupy.cuda.runtime
        lines.append(f"CUDA driver {_cuda_version(runtime.driverGetVersion())}")
        lines.append(f"CUDA runtime {_cuda_version(runtime.runtimeGetVersion())}")
        for index in range(runtime.getDeviceCount()):
            props = runtime.getDeviceProperties(index)
            name = props["name"].decode() if isinstance(props["name"], bytes) else props["name"]
            memory = props["totalGlobalMem"] / 2**30
            lines.append(f"GPU {index}       {name}, {memory:.1f} GiB, "
                         f"compute capability {props['major']}.{props['minor']}")
    except Exception as err:  # noqa: BLE001
        lines.append(f"CUDA        error: {type(err).__name__}: {str(err).splitlines()[0] if str(err) else ''}")
    return lines


def _cuda_version(code: int) -> str:
    return f"{code // 1000}.{code % 1000 // 10}" if code else "none"


def _backend_lines() -> list[str]:
    lines = []
    for name in ("numpy", "numba", "cupy", "cpu", "cuda"):
        resolved = resolve_name(name)
        if mt.available(name):
            alias = f" (= {resolved})" if resolved != name else ""
            lines.append(f"  {name:<6} ok{alias}")
        else:
            lines.append(f"  {name:<6} unavailable: {mt.why_unavailable(name)}")
    return lines


def report() -> str:
    """The whole report as text."""
    cores = usable_cores()
    lines = [
        f"Python      {sys.version.split()[0]} ({platform.python_implementation()}) on {platform.platform()}",
        f"CPU cores   {cores} usable",
        f"NumPy       {_version('numpy')}",
        f"Numba       {_version('numba')}",
        f"CuPy        {_version('cupy')}",
        f"sentencepiece {_version('sentencepiece')}",
        f"sacrebleu   {_version('sacrebleu')}",
        f"matplotlib  {_version('matplotlib')}",
    ]
    lines += _cuda_lines()
    lines.append("minitensor backends:")
    lines += _backend_lines()
    return "\n".join(lines)
