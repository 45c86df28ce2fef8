"""cross_entropy_forward: every Numba version vs the reference; the reference vs a hand-computed
3-row example and vs finite differences of the loss.

Shapes: N rows, V classes.
"""
import numpy as np
import pytest

from minitensor.kernels.cross_entropy_forward import numba_cpu
from minitensor.kernels.cross_entropy_forward.reference import cross_entropy_forward_ref
from tests.minitensor.kernels._close import assert_close

CASES = [(1, 3), (7, 5), (33, 17), (5, 1000)]  # (N, V)


@pytest.mark.parametrize("version", sorted(numba_cpu.VERSIONS))
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("n,v", CASES)
@pytest.mark.parametrize("ignore_index", [0, 2, None])
@pytest.mark.parametrize("smoothing", [0.0, 0.1])
def test_cross_entropy_forward_matches_reference(monkeypatch, version, dtype, n, v, ignore_index, smoothing):
    monkeypatch.setattr(numba_cpu, "DEFAULT", version)
    rng = np.random.default_rng(0)
    logits = (rng.standard_normal((n, v)) * 3).astype(dtype)
    targets = rng.integers(0, v, size=n)
    if ignore_index is not None and n > 1:
        targets[::3] = ignore_index  # ignored rows, including the first
    got = numba_cpu.cross_entropy_forward(logits, targets, smoothing, ignore_index)
    ref = cross_entropy_forward_ref(logits, targets, smoothing, ignore_index)
    for name, a, b in zip(("loss", "nll", "dlogits"), got, ref):
        assert a.dtype == b.dtype and a.shape == b.shape, name
        assert_close(a, b, f"cross_entropy_forward v{version} {name}")
    if ignore_index is not None:
        is_ignored = targets == ignore_index
        assert (got[0][is_ignored] == 0).all() and (got[2][is_ignored] == 0).all()


@pytest.mark.parametrize("version", sorted(numba_cpu.VERSIONS))
def test_cross_entropy_forward_large_logits(monkeypatch, version):
    monkeypatch.setattr(numba_cpu, "DEFAULT", version)
    logits = np.array([[500.0, -500.0, 0.0, 499.0], [-90.0, -100.0, -95.0, -99.0]], np.float32)
    targets = np.array([3, 0])
    got = numba_cpu.cross_entropy_forward(logits, targets, 0.1, None)
    ref = cross_entropy_forward_ref(logits, targets, 0.1, None)
    for name, a, b in zip(("loss", "nll", "dlogits"), got, ref):
        assert_close(a, b, f"cross_entropy_forward v{version} {name} extremes", rtol=1e-4)


def test_cross_entropy_reference_hand_computed():
    """3 rows, V = 4, ignore_index 0, smoothing 0.1: q = 0.9 target, 0 ignored, 0.05 on the 2 others."""
    logits = np.array([[0.0, 1.0, 2.0, 3.0], [1.0, 1.0, 1.0, 1.0], [2.0, 0.0, 0.0, 5.0]])
    targets = np.array([2, 0, 1])  # the middle row is ignored
    loss, nll, dlogits = cross_entropy_forward_ref(logits, targets, 0.1, 0)
    logp0 = logits[0] - np.log(np.exp(logits[0]).sum())
    logp2 = logits[2] - np.log(np.exp(logits[2]).sum())
    assert_close(nll, np.array([-logp0[2], 0.0, -logp2[1]]), "nll")
    expected0 = -(0.9 * logp0[2] + 0.05 * logp0[1] + 0.05 * logp0[3])
    expected2 = -(0.9 * logp2[1] + 0.05 * logp2[2] + 0.05 * logp2[3])
    assert_close(loss, np.array([expected0, 0.0, expected2]), "loss")
    q0 = np.array([0.0, 0.05, 0.9, 0.05])
    assert_close(dlogits[0], np.exp(logp0) - q0, "dlogits row 0")
    assert (dlogits[1] == 0).all()


@pytest.mark.parametrize("ignore_index", [1, None])
def test_cross_entropy_reference_dlogits_match_finite_differences(ignore_index):
    """dlogits = d loss / d logits, row by row, by central differences in float64."""
    rng = np.random.default_rng(4)
    logits = rng.standard_normal((3, 6))
    targets = np.array([0, 4, 5])
    h = 1e-6
    _, _, dlogits = cross_entropy_forward_ref(logits, targets, 0.1, ignore_index)
    numeric = np.zeros_like(logits)
    for idx in np.ndindex(logits.shape):
        step = np.zeros_like(logits)
        step[idx] = h
        plus = cross_entropy_forward_ref(logits + step, targets, 0.1, ignore_index)[0].sum()
        minus = cross_entropy_forward_ref(logits - step, targets, 0.1, ignore_index)[0].sum()
        numeric[idx] = (plus - minus) / (2 * h)
    assert_close(dlogits, numeric, "dlogits vs fd", atol=1e-8, rtol=1e-6)


@pytest.mark.parametrize("kernel", [cross_entropy_forward_ref, numba_cpu.cross_entropy_forward], ids=["ref", "numba"])
@pytest.mark.parametrize("bad", [-1, 7])
def test_cross_entropy_forward_refuses_targets_outside_the_classes(kernel, bad):
    """A target outside [0, V) is an IndexError on the CPU (the GPU kernels make its row NaN)."""
    logits = np.zeros((3, 7), np.float32)
    with pytest.raises(IndexError, match="outside the 7 classes"):
        kernel(logits, np.array([1, bad, 2]), 0.1, 0)
    with pytest.raises(IndexError):
        kernel(logits, np.array([1, bad, 2]), 0.1, None)
    loss, _, _ = kernel(logits, np.array([1, 0, 2]), 0.1, 0)          # the ignored class itself is fine
    assert loss[1] == 0
