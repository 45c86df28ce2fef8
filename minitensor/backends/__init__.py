"""Backend registry: `get_backend("numpy" | "numba" | "cupy" | "cpu" | "cuda")`.

The default is "numpy", the readable reference. "cpu" means the fast CPU
backend (Numba) when it imports, else NumPy; "cuda" means CuPy. Each backend
is imported only when asked for, and `available(name)` / `why_unavailable(name)`
say whether one works here. `counting.CountingBackend()` (not registered: made per use)
runs on NumPy and counts what a step would launch on a GPU.
"""
from __future__ import annotations

import importlib

from .base import Backend

_MODULES = {
    "numpy": ("minitensor.backends.numpy_backend", "NumpyBackend"),
    "numba": ("minitensor.backends.numba_cpu", "NumbaBackend"),
    "cupy": ("minitensor.backends.cupy_cuda", "CupyBackend"),
}
_ALIASES = {"cuda": "cupy", "gpu": "cupy"}
_instances: dict[str, Backend] = {}   # one instance per backend, so identity means "same backend"
_errors: dict[str, str] = {}


def _load(name: str) -> Backend | None:
    if name in _instances:
        return _instances[name]
    if name in _errors:
        return None
    module_name, class_name = _MODULES[name]
    try:
        backend = getattr(importlib.import_module(module_name), class_name)()
        if backend.device == "cuda":
            backend.xp.zeros(1).sum()  # touch the device: importing cupy succeeds without a GPU
    except Exception as exc:  # noqa: BLE001 - any failure means "not available", with its reason kept
        _errors[name] = f"{type(exc).__name__}: {exc}".splitlines()[0]
        return None
    _instances[name] = backend
    return backend


def resolve_name(name: str) -> str:
    name = _ALIASES.get(name, name)
    if name == "cpu":
        return "numba" if _load("numba") is not None else "numpy"
    if name not in _MODULES:
        raise ValueError(f"unknown backend {name!r}; choose one of "
                         f"{sorted(_MODULES) + ['cpu', 'cuda']}")
    return name


def get_backend(name: str | Backend = "numpy") -> Backend:
    if isinstance(name, Backend):
        return name
    resolved = resolve_name(name)
    backend = _load(resolved)
    if backend is None:
        raise RuntimeError(f"backend {resolved!r} is not available: {_errors[resolved]}")
    return backend


def available(name: str) -> bool:
    try:
        return _load(resolve_name(name)) is not None
    except ValueError:
        return False


def why_unavailable(name: str) -> str | None:
    resolved = resolve_name(name)
    return None if _load(resolved) is not None else _errors[resolved]


__all__ = ["Backend", "get_backend", "available", "why_unavailable", "resolve_name"]
