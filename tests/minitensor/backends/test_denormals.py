"""flush_denormals: FTZ and DAZ on the calling thread inside the block, the caller's bits back after it."""
import numpy as np
import pytest

from minitensor.backends import denormals
from minitensor.backends.denormals import flush_denormals

pytestmark = pytest.mark.skipif(not denormals.X86, reason="MXCSR is x86's")
DENORMAL = np.float32(1e-39)                       # below float32's smallest normal, 1.18e-38


def test_denormals_are_zero_inside_and_kept_outside():
    assert DENORMAL * np.float32(1.0) == DENORMAL and np.float32(1e-20) * np.float32(1e-20) > 0
    before = denormals.mxcsr()
    with flush_denormals():
        assert denormals.mxcsr() & (denormals.FTZ | denormals.DAZ) == denormals.FTZ | denormals.DAZ
        assert DENORMAL * np.float32(1.0) == 0                                   # DAZ: denormal inputs read as 0
        assert np.float32(1e-20) * np.float32(1e-20) == 0                        # FTZ: denormal results written as 0
        assert np.float32(1e-18) * np.float32(1e-18) > 0                         # normal numbers untouched
    assert denormals.mxcsr() == before
    assert DENORMAL * np.float32(1.0) == DENORMAL


def test_the_callers_bits_come_back_after_an_error_and_when_nested():
    before = denormals.mxcsr()
    with pytest.raises(RuntimeError), flush_denormals():
        with flush_denormals():
            pass
        assert DENORMAL * np.float32(1.0) == 0                                   # the outer block still flushes
        raise RuntimeError
    assert denormals.mxcsr() == before
