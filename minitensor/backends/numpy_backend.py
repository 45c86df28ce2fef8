"""The reference backend: NumPy arrays and the plain NumPy kernels (`kernels/*/reference.py`)."""
from __future__ import annotations

from .base import Backend, kernels_from


@kernels_from("reference")
class NumpyBackend(Backend):
    name = "numpy"
    device = "cpu"
