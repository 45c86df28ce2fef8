"""The kernel tests' tolerance table on top of minitensor.testing.assert_close: |got - ref| <= atol + rtol * |ref|."""
import numpy as np

from minitensor import testing
from minitensor.dtypes import BF16
from minitensor.kernels.bf16_cast.reference import float_to_bf16

TOLERANCES = {  # dtype -> (atol, rtol); refs accumulate in float64, kernels in the input dtype
    np.dtype(np.float64): (1e-12, 1e-10),
    np.dtype(np.float32): (1e-6, 1e-5),
}


def tolerance(dtype):
    """(atol, rtol) for an array dtype; integer and bool arrays must match exactly."""
    return TOLERANCES.get(np.dtype(dtype), (0.0, 0.0))


def assert_close(got, ref, name, atol=None, rtol=None):
    """minitensor.testing.assert_close with the kernel tests' tolerances (float64 tighter, integers exact).

    Its message names the worst index, the max abs/rel diff and the first values;
    non-finite reference entries must be matched exactly.
    """
    default_atol, default_rtol = tolerance(np.asarray(ref).dtype)
    testing.assert_close(got, ref, name, atol=default_atol if atol is None else atol,
                         rtol=default_rtol if rtol is None else rtol)


def as_dtype(x, dtype):
    """x (float) in a kernel input dtype: bf16 (uint16 bits, rounded to nearest even) or a float dtype."""
    return float_to_bf16(x) if np.dtype(dtype) == BF16 else np.asarray(x).astype(dtype)
