"""The checkers themselves must be able to fail."""
import numpy as np
import pytest

import minitensor as mt
from minitensor.autograd import Function
from minitensor.testing import GradcheckError


class SoftmaxWithZeroBackward(Function):
    """A wrong backward that `out.sum()`-style checks would miss (Σ softmax is constant)."""

    @staticmethod
    def forward(ctx, x):
        e = np.exp(x - x.max(-1, keepdims=True))
        return e / e.sum(-1, keepdims=True)

    @staticmethod
    def backward(ctx, grad_out):
        return np.zeros_like(grad_out)


class SquareWithWrongBackward(Function):
    @staticmethod
    def forward(ctx, x):
        ctx.save_for_backward(x)
        return x * x

    @staticmethod
    def backward(ctx, grad_out):
        (x,) = ctx.saved
        return grad_out * x          # should be 2x


def test_gradcheck_catches_zero_softmax_backward():
    x = mt.tensor(np.random.default_rng(0).standard_normal((2, 4)), requires_grad=True, dtype="float64")
    with pytest.raises(GradcheckError, match=r"input 0 \(shape \(2, 4\)\)"):
        mt.gradcheck(SoftmaxWithZeroBackward.apply, x)


def test_gradcheck_reports_worst_element():
    x = mt.tensor(np.array([1.0, 2.0, 3.0]), requires_grad=True, dtype="float64")
    with pytest.raises(GradcheckError, match=r"worst at index \(2,\): analytic (\S+) vs numeric") as info:
        mt.gradcheck(SquareWithWrongBackward.apply, x)
    analytic, numeric = (float(s) for s in
                         __import__("re").search(r"analytic (\S+) vs numeric (\S+)", str(info.value)).groups())
    assert numeric == pytest.approx(2 * analytic, rel=1e-6)   # the backward forgot the factor 2


def test_gradcheck_refuses_float32():
    with pytest.raises(ValueError, match="float64"):
        mt.gradcheck(lambda a: a * 2, mt.tensor([1.0], requires_grad=True))


def test_assert_close_message_names_worst_index():
    with pytest.raises(AssertionError, match=r"logits: not close.*index \(1, 0\)"):
        mt.assert_close(np.array([[1.0, 2.0], [3.5, 4.0]], np.float32), np.array([[1.0, 2.0], [3.0, 4.0]]), "logits")
    mt.assert_close(np.array([np.inf, 1.0]), np.array([np.inf, 1.0]))
    with pytest.raises(AssertionError):
        mt.assert_close(np.array([np.nan]), np.array([1.0]))
    mt.assert_close(np.array([5.0, 1.0]), np.array([0.0, 1.0]), skip=np.array([True, False]))
