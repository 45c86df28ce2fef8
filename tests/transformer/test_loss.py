"""transformer/loss.py: label-smoothed cross-entropy (§5.4) against its closed form."""
import math

import numpy as np
import pytest

import minitensor as mt
from transformer.loss import LabelSmoothingLoss, closed_form_smoothed_loss


def test_hand_computed_example():
    # V = 4 with pad = 0; logits give p = (1, 1, 2, 1)/5; gold 2; eps 0.1 -> q = (0, 0.05, 0.9, 0.05).
    logits = np.log(np.array([[[1.0, 1.0, 2.0, 1.0], [3.0, 1.0, 1.0, 1.0]]]))   # (1, 2, 4); 2nd row is padding
    targets = np.array([[2, 0]])
    expected = 0.9 * math.log(5 / 2) + 0.1 * math.log(5)    # -(0.9 log 2/5 + 0.05 log 1/5 + 0.05 log 1/5)
    out = LabelSmoothingLoss(0.1, pad_id=0)(mt.tensor(logits, dtype=np.float64, backend="numpy"), targets)
    assert out.n_tokens == 1
    assert out.loss.item() == pytest.approx(expected, rel=1e-12)
    assert float(out.nll_sum) == pytest.approx(math.log(5 / 2), rel=1e-12)
    loss, nll, n = closed_form_smoothed_loss(logits, targets, 0.1, 0)
    assert (loss, nll, n) == (pytest.approx(expected, rel=1e-12), pytest.approx(math.log(2.5), rel=1e-12), 1)


@pytest.mark.parametrize("eps_ls", [0.0, 0.1, 0.3])
def test_matches_closed_form_on_random_batches(backend, eps_ls):
    rng = np.random.default_rng(0)
    logits = rng.standard_normal((3, 5, 9)) * 3
    targets = rng.integers(0, 9, (3, 5))
    targets[0, 3:] = 0
    out = LabelSmoothingLoss(eps_ls, pad_id=0)(mt.tensor(logits, backend=backend), targets)
    loss, nll, n = closed_form_smoothed_loss(logits, targets, eps_ls, 0)
    assert out.n_tokens == n == int((targets != 0).sum())
    assert out.loss.item() == pytest.approx(loss, rel=1e-5)
    assert float(out.nll_sum) == pytest.approx(nll, rel=1e-5)
    if eps_ls == 0.0:
        assert loss * n == pytest.approx(nll, rel=1e-12), "without smoothing the loss is the NLL"


def test_gradient_is_p_minus_q_over_tokens():
    rng = np.random.default_rng(1)
    logits = mt.tensor(rng.standard_normal((2, 3, 6)), requires_grad=True, dtype=np.float64, backend="numpy")
    targets = np.array([[1, 4, 0], [5, 0, 0]])
    LabelSmoothingLoss(0.1, pad_id=0)(logits, targets).loss.backward()
    p = np.exp(logits.numpy()) / np.exp(logits.numpy()).sum(-1, keepdims=True)
    q = np.full((2, 3, 6), 0.1 / 4)
    q[..., 0] = 0
    np.put_along_axis(q, targets[..., None], 0.9, axis=-1)
    expected = (p - q) / 3
    expected[targets == 0] = 0
    mt.assert_close(logits.grad, expected, "dlogits")
    assert mt.gradcheck(lambda x: LabelSmoothingLoss(0.1, 0)(x, targets).loss, logits)


def test_float16_logits_give_a_float32_loss():
    rng = np.random.default_rng(2)
    logits = rng.standard_normal((2, 3, 7))
    targets = rng.integers(1, 7, (2, 3))
    out = LabelSmoothingLoss(0.1, 0)(mt.tensor(logits, dtype=np.float16, backend="numpy"), targets)
    assert out.loss.dtype == np.float32
    assert out.loss.item() == pytest.approx(closed_form_smoothed_loss(logits, targets, 0.1, 0)[0], rel=2e-3)


def test_all_padding_gives_zero_not_nan():
    out = LabelSmoothingLoss(0.1, 0)(mt.tensor(np.zeros((1, 2, 5))), np.zeros((1, 2), dtype=int))
    assert out.n_tokens == 0 and out.loss.item() == 0.0


def test_shape_mismatch_is_an_error():
    with pytest.raises(ValueError, match="do not match"):
        LabelSmoothingLoss(0.1, 0)(mt.tensor(np.zeros((1, 2, 5))), np.zeros((2, 1), dtype=int))
