"""The suite runs on one CPU thread (tests/conftest.py); this holds the Numba kernels' parallel loops
to it: four float64 updates of the fused model (the path that trains) on 2 threads give the numbers of 1."""
import numba
import numpy as np
import pytest

from test_composed_vs_fused import train
from train.threads import cpu_threads


@pytest.mark.skipif(numba.config.NUMBA_NUM_THREADS < 2, reason="Numba may use only one thread here")
@pytest.mark.parametrize("norm", ["post", "pre"])
def test_two_threads_train_as_one(norm):
    with cpu_threads(1):
        assert numba.get_num_threads() == 1
        losses_1, params_1 = train("fused", norm, "numba")
    with cpu_threads(2):
        assert numba.get_num_threads() == 2, "the comparison needs the second thread"
        losses_2, params_2 = train("fused", norm, "numba")
    np.testing.assert_allclose(losses_2, losses_1, rtol=1e-13, atol=0)
    for name, value in params_1.items():
        if not name.endswith("w_k.bias"):  # its exact gradient is 0: roundoff/ε (test_composed_vs_fused.py)
            np.testing.assert_allclose(params_2[name], value, rtol=1e-10, atol=1e-13, err_msg=name)
