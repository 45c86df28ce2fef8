"""Mixed precision on the CPU: bf16 (uint16 bits) and fp16 train like fp32, on the NumPy reference.

The GPU runs the same Python with CuPy arrays, so a generic op that would treat bf16 bits as
integers (an add, a cast, a relu, a gradient sum) breaks these runs here too. Each run trains a
few steps of a small Transformer from one seed and is compared with the fp32 run: losses to a
few parts in a thousand, parameters to the size of a few Adam updates.
Shapes: B sentences, S source length, T target length, V vocab.
"""
import numpy as np
import pytest

import minitensor as mt
from minitensor import optim
from minitensor.dtypes import BF16
from train.run.loss_scaler import DynamicLossScaler
from train.run.step import check_ids, train_step
from transformer.config import TransformerConfig
from transformer.loss import LabelSmoothingLoss
from transformer.masks import padding_mask
from transformer.model import Transformer

V = 40


def train(precision, impl="fused", norm="post", steps=3):
    cfg = TransformerConfig(vocab_size=V, N=2, d_model=32, h=4, d_ff=64, impl=impl, norm=norm)
    model = Transformer(cfg, np.random.default_rng(0), backend="numpy", precision=precision)
    opt = optim.Adam(model.named_parameters(), lr=1e-3, half_dtype=model.compute_dtype)
    loss_fn = LabelSmoothingLoss(cfg.eps_ls, cfg.pad_id, impl)
    scaler = DynamicLossScaler() if precision == "fp16" else None
    data = np.random.default_rng(1)
    losses = []
    for _ in range(steps):
        src, tgt = data.integers(4, V, (4, 9)), data.integers(4, V, (4, 8))   # (B, S), (B, T + 1)
        src[0, -3:], tgt[1, -2:] = 0, 0
        stats = train_step(model, [(src, tgt[:, :-1], tgt[:, 1:])], opt, loss_fn, scaler)
        assert stats.stepped
        losses.append(float(stats.loss_sum) / stats.tgt_tokens)
    return np.array(losses), model


@pytest.mark.parametrize("precision", ["bf16", "fp16"])
@pytest.mark.parametrize("impl,norm", [("fused", "post"), ("composed", "post"), ("fused", "pre")])
def test_mixed_precision_trains_like_fp32(precision, impl, norm):
    losses, model = train(precision, impl, norm)
    ref_losses, ref = train("fp32", impl, norm)
    np.testing.assert_allclose(losses, ref_losses, rtol=5e-3)
    for (name, p), (_, q) in zip(model.state_dict().items(), ref.state_dict().items()):
        assert p.dtype == np.float32, f"{name}: masters stay float32"
        np.testing.assert_allclose(p, q, atol=1.5e-2, err_msg=name)     # 3 steps of lr 1e-3, bf16 rounding


def test_bf16_model_gives_bf16_logits_to_the_loss_float32_to_the_search_and_needs_bf16_kernels():
    cfg = TransformerConfig(vocab_size=V, N=1, d_model=16, h=2, d_ff=32, impl="fused")
    model = Transformer(cfg, np.random.default_rng(0), precision="bf16").eval()
    src, tgt = np.array([[5, 6, 7, 0]]), np.array([[2, 8, 9]])
    with mt.no_grad():
        logits = model(src, tgt)                                        # for the loss: bits, no float32 copy
        memory = model.encode(src)
        decoded = model.decode(tgt, memory, padding_mask(src, cfg.pad_id))   # for the search: numbers
    assert logits.dtype == BF16 and np.isfinite(logits.astype(np.float32).numpy()).all()
    assert decoded.dtype == np.float32
    np.testing.assert_array_equal(decoded.numpy(), logits.astype(np.float32).numpy())
    maps = model.attention_maps(src, tgt)
    for name, w in maps.items():
        assert w.dtype == np.float32
        np.testing.assert_allclose(w.sum(-1), 1.0, atol=2e-2, err_msg=name)   # softmax rows, read as numbers
    assert model.encoder.layers[0].self_attn.w_q.weight.dtype == np.float32
    assert model.compute_dtype == BF16
    if mt.available("numba"):
        with pytest.raises(ValueError, match="bf16"):
            Transformer(cfg, np.random.default_rng(0), backend="numba", precision="bf16")


def test_check_ids_names_an_id_outside_the_vocabulary():
    cfg = TransformerConfig(vocab_size=V, N=1, d_model=16, h=2, d_ff=32)
    model = Transformer(cfg, np.random.default_rng(0))
    good = (np.array([[4, 5]]), np.array([[2, 6]]), np.array([[6, 3]]))
    check_ids(model, [good])
    with pytest.raises(IndexError, match=f"target output token id {V} is outside the vocabulary"):
        check_ids(model, [good, (good[0], good[1], np.array([[6, V]]))])


def test_the_loss_on_bf16_logits_is_the_loss_on_their_values():
    """The fused loss reads bf16 bits as numbers (sums in float32) and hands back their gradient in bf16, scaled
    by the incoming gradient in one rounding: the float32 loss of the same values, to bf16's precision."""
    rng = np.random.default_rng(4)
    bits = mt.tensor(rng.standard_normal((2, 3, V)) * 3, dtype=np.float32).astype(BF16).data
    targets = rng.integers(0, V, (2, 3))
    targets[1, 2] = 0
    results = []
    for dtype in (BF16, np.float32):
        logits = mt.tensor(bits, requires_grad=True, dtype=BF16)
        x = logits if dtype == BF16 else logits.astype(np.float32)
        out = LabelSmoothingLoss(0.1, 0, impl="fused")(x, targets)
        (out.loss * 3.0).backward()
        results.append((float(out.loss.numpy()), float(out.nll_sum), logits.grad))
    (loss, nll, grad), (loss32, nll32, grad32) = results
    assert grad.dtype == BF16
    assert loss == pytest.approx(loss32, rel=1e-6) and nll == pytest.approx(nll32, rel=1e-6)
    np.testing.assert_allclose(mt.tensor(grad, dtype=BF16).astype(np.float32).numpy(),
                               mt.tensor(grad32, dtype=BF16).astype(np.float32).numpy(), rtol=2 ** -7, atol=1e-6)
