"""Each fused Function against its composed twin (functions/composed.py): values and gradients."""
import numpy as np
import pytest

import minitensor as mt
from minitensor.functions import CrossEntropy, LayerNorm


def pair(array, backend):
    """Two independent float64 leaves with the same values."""
    return tuple(mt.tensor(array.copy(), requires_grad=True, dtype="float64", backend=backend) for _ in range(2))


def check_same(fused_fn, composed_fn, arrays, backend, seed=0):
    fused_in = [mt.tensor(a, requires_grad=True, dtype="float64", backend=backend) for a in arrays]
    composed_in = [mt.tensor(a, requires_grad=True, dtype="float64", backend=backend) for a in arrays]
    out_f, out_c = fused_fn(*fused_in), composed_fn(*composed_in)
    mt.assert_close(out_f, out_c, "forward")
    r = np.random.default_rng(seed).standard_normal(out_f.shape)
    (out_f * r).sum().backward()
    (out_c * r).sum().backward()
    for i, (a, b) in enumerate(zip(fused_in, composed_in)):
        mt.assert_close(a.grad, b.grad, f"grad of input {i}")


def test_softmax_matches_composed(backend, rng):
    x = rng.standard_normal((2, 3, 4, 6)) * 3
    mask = rng.random((2, 1, 4, 6)) > 0.6
    mask[0, 0, 1] = True                                       # one fully blocked row
    check_same(lambda a: a.softmax(scale=0.5, mask=mask),
               lambda a: mt.softmax_composed(a, scale=0.5, mask=mask), [x], backend)
    out = mt.tensor(x, backend=backend).softmax(mask=mask).numpy()
    assert np.all(out[np.broadcast_to(mask, out.shape)] == 0)  # blocked keys get exactly zero
    assert np.all(out[0, :, 1] == 0) and np.isfinite(out).all()  # fully blocked row: zeros, not NaN


def test_log_softmax_matches_composed(backend, rng):
    check_same(lambda a: a.log_softmax(), mt.log_softmax_composed, [rng.standard_normal((4, 9)) * 10], backend)


def test_layer_norm_matches_composed(backend, rng):
    arrays = [rng.standard_normal((3, 5, 8)) * 2 + 1, rng.standard_normal(8), rng.standard_normal(8)]
    check_same(lambda x, g, b: LayerNorm.apply(x, g, b, eps=1e-6),
               lambda x, g, b: mt.layer_norm_composed(x, g, b, 1e-6), arrays, backend)


@pytest.mark.parametrize("ignore_index", [0, None])
def test_cross_entropy_matches_composed(backend, rng, ignore_index):
    logits = rng.standard_normal((6, 10)) * 3
    targets = np.array([3, 0, 9, 1, 0, 5])
    tgt = mt.get_backend(backend).asarray(targets)
    check_same(lambda z: CrossEntropy.apply(z, targets=tgt, smoothing=0.1, ignore_index=ignore_index)[0],
               lambda z: mt.cross_entropy_composed(z, tgt, 0.1, ignore_index), [logits], backend)


@pytest.mark.parametrize("rows_per_block", [2, 256])
@pytest.mark.parametrize("weights", ["mean", "per row"])
def test_linear_cross_entropy_matches_projection_then_loss(backend, rng, monkeypatch, rows_per_block, weights):
    """LinearCrossEntropy(x, E) against CrossEntropy(x Eᵀ) (§3.4, §5.4): loss, NLL and both gradients, in
    blocks smaller than the rows (the blocks' dE adds up) and in one; the loss weighted as a mean over the
    scored rows (dE scaled once) and row by row (the blocks run again with scaled rows); padding rows ignored."""
    from minitensor.functions import LinearCrossEntropy
    monkeypatch.setattr(LinearCrossEntropy, "ROWS", rows_per_block)
    x, e = rng.standard_normal((7, 5)), rng.standard_normal((11, 5))
    targets = mt.get_backend(backend).asarray(np.array([3, 0, 10, 1, 0, 5, 2]))
    scored = np.array([3, 0, 10, 1, 0, 5, 2]) != 0
    r = np.where(scored, 0.25, 0.0) if weights == "mean" else rng.standard_normal(7)
    results = []
    for fused in (True, False):
        xt, et = (mt.tensor(a, requires_grad=True, dtype="float64", backend=backend) for a in (x, e))
        if fused:
            loss, nll = LinearCrossEntropy.apply(xt, et, targets=targets, smoothing=0.1, ignore_index=0)
        else:
            loss, nll = CrossEntropy.apply(xt @ et.T, targets=targets, smoothing=0.1, ignore_index=0)
        (loss * mt.tensor(r, dtype="float64", backend=backend)).sum().backward()
        results.append((loss, mt.get_backend(backend).to_numpy(nll), xt.grad, et.grad))
    (loss_f, nll_f, dx_f, de_f), (loss_c, nll_c, dx_c, de_c) = results
    mt.assert_close(loss_f, loss_c, "loss")
    np.testing.assert_allclose(nll_f, nll_c, rtol=1e-12)
    mt.assert_close(dx_f, dx_c, "dx")
    mt.assert_close(de_f, de_c, "dE")


def test_linear_cross_entropy_gradcheck(backend, rng):
    from minitensor.functions import LinearCrossEntropy
    targets = mt.get_backend(backend).asarray(np.array([2, 0, 4]))
    x, e = (mt.tensor(rng.standard_normal(s), requires_grad=True, dtype="float64", backend=backend)
            for s in ((3, 4), (6, 4)))
    assert mt.gradcheck(lambda a, b: LinearCrossEntropy.apply(a, b, targets=targets, smoothing=0.2,
                                                              ignore_index=0)[0], x, e)


def test_cross_entropy_closed_form_and_nll(backend):
    """V = 4, pad = 0, ε = 0.3: q = [0, 0.7, 0.15, 0.15] for gold token 1."""
    logits = np.log(np.array([[0.1, 0.4, 0.2, 0.3]]))          # softmax(logits) = these probabilities
    z = mt.tensor(logits, dtype="float64", backend=backend)
    loss, nll = CrossEntropy.apply(z, targets=z.backend.asarray(np.array([1])), smoothing=0.3, ignore_index=0)
    expected = -(0.7 * np.log(0.4) + 0.15 * np.log(0.2) + 0.15 * np.log(0.3))
    assert loss.numpy()[0] == pytest.approx(expected, rel=1e-12)
    assert float(mt.get_backend(backend).to_numpy(nll)[0]) == pytest.approx(-np.log(0.4), rel=1e-12)


@pytest.mark.parametrize("with_bias", [True, False])
def test_linear_matches_composed(backend, rng, with_bias):
    from minitensor.functions import Linear
    arrays = [rng.standard_normal((2, 3, 4)), rng.standard_normal((4, 5))] + ([rng.standard_normal(5)] if with_bias else [])
    composed = (lambda x, w, b: x @ w + b) if with_bias else (lambda x, w: x @ w)
    check_same(Linear.apply, composed, arrays, backend)


@pytest.mark.parametrize("time_major", [False, True])
@pytest.mark.parametrize("with_bias", [False, True])
@pytest.mark.parametrize("p", [0.0, 0.3])
def test_dropout_add_layer_norm_matches_composed(backend, rng, p, with_bias, time_major):
    """transformer.fused.DropoutAddLayerNorm against LayerNorm(x + Dropout(s + b)) op by op (§3.1, §5.4); its
    output read twice, as the next sub-layer and the residual stream read it, so its backward gets two
    gradients to add (sums_grad_out); time-major: the mask of the (B, T, D) transpose."""
    from minitensor.functions import Dropout
    from transformer.fused import DropoutAddLayerNorm
    arrays = [rng.standard_normal((3, 5, 8)), rng.standard_normal((3, 5, 8)) * 2,
              rng.standard_normal(8), rng.standard_normal(8)] + ([rng.standard_normal(8)] if with_bias else [])
    dropout = (lambda s: s) if p == 0 else (lambda s: Dropout.apply(s, p=p, seed=7, time_major=time_major))
    twice = mt.tensor(rng.standard_normal((3, 5, 8)), dtype="float64", backend=backend)

    def fused(x, s, g, b, *bias):
        y = DropoutAddLayerNorm.apply(x, s, g, b, *bias, eps=1e-6, p=p, seed=7, time_major=time_major)
        return y * twice + y

    def composed(x, s, g, b, *bias):
        y = LayerNorm.apply(x + dropout(s + bias[0] if bias else s), g, b, eps=1e-6)
        return y * twice + y

    check_same(fused, composed, arrays, backend)


@pytest.mark.parametrize("p", [0.0, 0.25])
def test_attention_matches_equation_1_composed(backend, rng, p):
    """The fused multi-head op against split_heads -> Eq. (1) op by op -> merge_heads, d_k ≠ d_v, masked."""
    from minitensor.functions import Dropout
    from transformer.attention import merge_heads, scaled_dot_product_attention, split_heads
    from transformer.fused import Attention
    H, seed = 3, 11
    q, k, v = rng.standard_normal((2, 4, H * 5)), rng.standard_normal((2, 6, H * 5)), rng.standard_normal((2, 6, H * 2))
    mask = rng.random((2, 1, 4, 6)) > 0.7
    mask[1, 0, 2] = True                                       # one query with nothing to attend to
    mask = mt.get_backend(backend).asarray(mask)
    drop = None if p == 0 else (lambda w: Dropout.apply(w, p=p, seed=seed))

    def composed(q, k, v):
        out, _ = scaled_dot_product_attention(split_heads(q, H), split_heads(k, H), split_heads(v, H), mask, drop)
        return merge_heads(out)

    check_same(lambda q, k, v: Attention.apply(q, k, v, heads=H, mask=mask, p=p, seed=seed)[0],
               composed, [q, k, v], backend)
    _, weights = Attention.apply(*(mt.tensor(a, backend=backend) for a in (q, k, v)), heads=H, mask=mask)
    _, weights_composed = scaled_dot_product_attention(*(split_heads(mt.tensor(a, backend=backend), H) for a in (q, k, v)),
                                                       mask)
    mt.assert_close(weights, weights_composed.numpy(), "attention weights")


def test_linear_relu_matches_composed(backend, rng):
    """§3.3's inner layer max(0, xW₁ + b₁) as one Function; entries near 0 kept off the ReLU's kink."""
    from minitensor.functions import LinearReLU
    x, w, b = rng.standard_normal((2, 3, 4)), rng.standard_normal((4, 6)), rng.standard_normal(6)
    pre = x @ w + b
    b = b + np.where(np.abs(pre) < 0.05, 0.2, 0.0).max(axis=(0, 1))           # no pre-activation at 0
    check_same(lambda x, w, b: LinearReLU.apply(x, w, b), lambda x, w, b: (x @ w + b).relu(), [x, w, b], backend)


@pytest.mark.parametrize("with_bias", [True, False])
def test_stacked_linear_matches_composed(backend, rng, with_bias):
    """Q, K, V of one input as one product, against three Linears stacked, separate weights and one flat buffer."""
    from minitensor.functions import StackedLinear
    n = 3
    arrays = [rng.standard_normal((2, 3, 4))] + [rng.standard_normal((4, 5)) for _ in range(n)] \
        + ([rng.standard_normal(5) for _ in range(n)] if with_bias else [])

    def composed(x, *params):
        ws, bs = params[:n], params[n:]
        return mt.stack([x @ w + b for w, b in zip(ws, bs)] if bs else [x @ w for w in ws])

    check_same(StackedLinear.apply, composed, arrays, backend)


@pytest.mark.parametrize("stacked", [False, True])
def test_frozen_bias_gets_no_gradient_and_costs_no_column_sum(backend, rng, monkeypatch, stacked):
    """A bias with requires_grad False (frozen): backward skips its column sum (bias_backward) and leaves
    its .grad None, while x and W get the gradients of the unfrozen product; frozen weights too."""
    from minitensor.functions import Linear, StackedLinear
    n = 3 if stacked else 1
    arrays = [rng.standard_normal((2, 3, 4))] + [rng.standard_normal((4, 5)) for _ in range(n)] \
        + [rng.standard_normal(5) for _ in range(n)]
    function = StackedLinear if stacked else Linear
    sums = []
    target = mt.get_backend(backend)
    column_sums = target.bias_backward
    monkeypatch.setattr(target, "bias_backward", lambda *args: sums.append(1) or column_sums(*args))
    frozen = [mt.tensor(a, requires_grad=i <= n, dtype="float64", backend=backend) for i, a in enumerate(arrays)]
    trained = [mt.tensor(a, requires_grad=True, dtype="float64", backend=backend) for a in arrays]
    r = rng.standard_normal(function.apply(*trained).shape)
    (function.apply(*frozen) * r).sum().backward()
    assert sums == [] and all(b.grad is None for b in frozen[1 + n:])
    (function.apply(*trained) * r).sum().backward()
    assert len(sums) == 1
    for i in range(1 + n):
        mt.assert_close(frozen[i].grad, trained[i].grad, f"grad of input {i}")
    only_x = [mt.tensor(a, requires_grad=i == 0, dtype="float64", backend=backend) for i, a in enumerate(arrays)]
    (function.apply(*only_x) * r).sum().backward()                   # every parameter frozen
    mt.assert_close(only_x[0].grad, trained[0].grad, "grad of x with every parameter frozen")


def test_stacked_weights_are_read_in_place_when_equally_spaced(rng):
    """Backend.stacked: views of one buffer, equally spaced (the optimizer's flat buffer), stack without a copy."""
    from minitensor.backends.counting import CountingBackend
    backend = CountingBackend()
    flat = backend.xp.asarray(rng.standard_normal(3 * 25))
    views = [flat[i * 25:i * 25 + 20].reshape(4, 5) for i in range(3)]   # weight, then a bias's 5 numbers
    backend.counts.clear()
    stacked = backend.stacked(views)
    assert backend.counts.launches == 0 and np.shares_memory(stacked, flat)
    np.testing.assert_array_equal(stacked, np.stack([np.asarray(v) for v in views]))
    apart = [backend.xp.asarray(v.view(np.ndarray).copy()) for v in views]
    assert not np.shares_memory(backend.stacked(apart), flat) and backend.counts.launches > 0
