"""NumbaBackend's dropout draws: uniform gives NumpyBackend's numbers (its own conversion of PCG64's words);
each set is kept for one more request (a backward regenerating its forward's mask): the same numbers, drawn
once for a forward and its backward, read-only, and no more than KEPT_DRAWS_BYTES kept."""
import numpy as np
import pytest

from minitensor.backends import numba_cpu
from minitensor.backends.numpy_backend import NumpyBackend


@pytest.fixture
def counted(monkeypatch):
    """A NumbaBackend and the list of the uniform calls it makes."""
    backend, calls = numba_cpu.NumbaBackend(), []

    def uniform(seed, shape, dtype):
        calls.append((seed, shape))
        return NumpyBackend.uniform(backend, seed, shape, dtype)
    monkeypatch.setattr(backend, "uniform", uniform)
    return backend, calls


@pytest.mark.parametrize("time_major", [False, True])
def test_a_backward_gets_its_forwards_draws_without_drawing_again(counted, time_major):
    backend, calls = counted
    want = NumpyBackend().draws(3, (4, 5, 8), time_major)
    forward = backend.draws(3, (4, 5, 8), time_major)
    backward = backend.draws(3, (4, 5, 8), time_major)
    assert len(calls) == 1 and backward is forward
    np.testing.assert_array_equal(forward, want)
    with pytest.raises(ValueError, match="read-only"):
        forward[0, 0, 0] = 2.0
    np.testing.assert_array_equal(backend.draws(3, (4, 5, 8), time_major), want)  # used twice: drawn again
    assert len(calls) == 2
    np.testing.assert_array_equal(backend.draws(3, (4, 5, 8), not time_major), NumpyBackend().draws(
        3, (4, 5, 8), not time_major))                                                 # the layout is in the key


def test_kept_draws_stay_under_the_byte_limit(counted, monkeypatch):
    backend, calls = counted
    monkeypatch.setattr(numba_cpu, "KEPT_DRAWS_BYTES", 3 * 40 * 4)
    for seed in range(5):                                  # forwards without backwards: the oldest go first
        backend.draws(seed, (5, 8))
    assert sum(u.nbytes for u in backend._kept_draws.values()) <= 3 * 40 * 4
    np.testing.assert_array_equal(backend.draws(0, (5, 8)), NumpyBackend().draws(0, (5, 8)))
    backend.draws(4, (5, 8))
    assert len(calls) == 6                                 # seed 0 drawn again, seed 4 still kept


@pytest.mark.parametrize("seed", [0, 7, 2**63 + 5])
@pytest.mark.parametrize("shape", [(1,), (3,), (7, 5), (0, 4), (4, 5, 8), (2, 3, 1001)])
def test_uniform_gives_the_numpy_backends_numbers(seed, shape):
    """NumbaBackend.uniform converts PCG64's words itself: the very numbers of default_rng(seed).random(float32)."""
    got = numba_cpu.NumbaBackend().uniform(seed, shape, "float32")
    assert got.shape == shape and got.dtype == np.float32
    np.testing.assert_array_equal(got, NumpyBackend().uniform(seed, shape, "float32"))
    np.testing.assert_array_equal(numba_cpu.NumbaBackend().uniform(seed, shape, "float64"),
                                  NumpyBackend().uniform(seed, shape, "float64"))
