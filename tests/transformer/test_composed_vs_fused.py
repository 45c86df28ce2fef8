"""config.impl = "composed" and "fused" are the same model: training both ways gives the same run.

The composed path is the paper's equations op by op (attention.py, layers.py, loss.py); the
fused path runs transformer/fused.py and minitensor's CrossEntropy kernel. Same seed, same
batches, dropout on (residual and attention), float64, a few Adam updates through the real
training step with gradient accumulation: losses and every parameter must agree closely, on
every backend (on the GPU: the CUDA kernels and cuBLAS in float64, run by benchmarks/gpu_lease.sh).
"""
import numpy as np
import pytest

import minitensor as mt

from minitensor.optim import Adam, NoamSchedule
from train.run.step import train_step
from transformer import LabelSmoothingLoss, Transformer, TransformerConfig

from transformer_helpers import random_ids


def batches(rng, V, count=2):
    out = []
    for _ in range(count):
        src = random_ids(rng, 3, 7, V, lengths=[5, 7, 3])
        tgt = random_ids(rng, 3, 6, V, lengths=[6, 4, 5])
        tgt_in = np.concatenate([np.full((3, 1), 2), tgt[:, :-1]], axis=1)
        out.append((src, np.where(tgt_in == 0, 0, tgt_in), tgt))
    return out


SCHEDULE, ADAM_EPS = NoamSchedule(8, warmup=4), 1e-9


def train(impl, norm, backend, steps=4, seed=0, zero_gradients=None):
    """Losses and final parameters of `steps` updates; appends each step's largest |gradient| of every
    key-projection bias (whose exact gradient is 0) to `zero_gradients[name]` when given a dict."""
    config = TransformerConfig(vocab_size=13, N=2, d_model=8, d_ff=16, h=2, p_drop=0.1, attention_dropout=0.1,
                               max_len=32, norm=norm, impl=impl)
    model = Transformer(config, np.random.default_rng(seed), backend=backend, precision="fp64")
    optimizer = Adam(list(model.named_parameters()), lr=SCHEDULE, betas=(0.9, 0.98), eps=ADAM_EPS)
    loss_fn = LabelSmoothingLoss(config.eps_ls, config.pad_id, impl)
    data = np.random.default_rng(7)
    losses = []
    for _ in range(steps):
        stats = train_step(model, batches(data, 13), optimizer, loss_fn)
        assert stats.stepped
        losses.append(float(stats.loss_sum) / stats.tgt_tokens)
        for name, p in model.named_parameters():
            if zero_gradients is not None and name.endswith("w_k.bias"):
                zero_gradients.setdefault(name, []).append(float(np.abs(p.backend.to_numpy(p.grad)).max()))
    return np.array(losses), {name: p.numpy().copy() for name, p in model.named_parameters()}


def roundoff_drift_bound(gradients_a, gradients_b) -> float:
    """How far two runs can move a parameter apart when its exact gradient is 0 and its computed ones are roundoff.

    Adam's update is lr_t · m̂_t / (√v̂_t + ε) with |m̂_t| ≤ max_{s≤t} |g_s| and √v̂_t ≥ 0, so each run moves the
    parameter by at most lr_t · max_{s≤t} |g_s| / ε at update t, whatever the sign: the runs differ by at most
    the sum over t of lr_t (G_a,t + G_b,t) / ε, with G,t the largest |gradient| of each run up to update t.
    """
    running_a, running_b = np.maximum.accumulate(gradients_a), np.maximum.accumulate(gradients_b)
    rates = np.array([SCHEDULE(t) for t in range(1, len(gradients_a) + 1)])
    return float((rates * (running_a + running_b)).sum() / ADAM_EPS)


@pytest.mark.parametrize("norm", ["post", "pre"])
def test_composed_and_fused_train_the_same(backend, norm):
    zero_c, zero_f = {}, {}
    losses_c, params_c = train("composed", norm, backend, zero_gradients=zero_c)
    losses_f, params_f = train("fused", norm, backend, zero_gradients=zero_f)
    assert np.all(np.diff(losses_c) != 0), "the losses must move, or the test compares nothing"
    np.testing.assert_allclose(losses_f, losses_c, rtol=1e-12, atol=0)
    for name, value in params_c.items():
        if name.endswith("w_k.bias"):
            # The key projection's bias has a gradient of exactly 0: it adds q·b_K to a whole row of scores,
            # and softmax does not change when a row is shifted (§3.2.1). Its computed gradient is each path's
            # own roundoff (~1e-17), which Adam divides by √v̂ + ε (ε = 1e-9, §5.3): the two runs may drift
            # apart by up to roundoff_drift_bound, derived from the gradients they computed.
            bound = roundoff_drift_bound(zero_c[name], zero_f[name])
            # roundoff of sums of n ≤ 10³ terms of size ≤ 1 is below n·u = 10³ · 2⁻⁵³ ≈ 1e-13 (testing.py)
            assert max(zero_c[name] + zero_f[name]) < 1e-13, f"{name}: its gradient must be roundoff, not real"
            assert np.abs(params_f[name] - value).max() <= bound, f"{name}: drifted past {bound:.2e}"
        else:
            np.testing.assert_allclose(params_f[name], value, rtol=1e-9, atol=1e-12, err_msg=name)


def test_the_comparison_can_fail():
    """Another seed (other weights, other dropout masks) gives another run: the tolerances above are tight."""
    losses_a, params_a = train("composed", "post", "numpy", steps=2)
    losses_b, params_b = train("fused", "post", "numpy", steps=2, seed=1)
    assert np.abs(losses_a - losses_b).max() > 1e-6
    assert max(np.abs(params_a[k] - params_b[k]).max() for k in params_a) > 1e-3


def test_loss_without_logits_is_the_loss_of_the_logits(backend, monkeypatch):
    """Transformer.loss (a fused model on a CPU: LinearCrossEntropy over the time-major rows, in blocks of 4
    of the 18 rows) against loss_fn(model(src, tgt_in), tgt_out): loss, NLL and every parameter's gradient,
    padded targets included; and the loss alone under no_grad."""
    from minitensor.functions import LinearCrossEntropy
    monkeypatch.setattr(LinearCrossEntropy, "ROWS", 4)
    config = TransformerConfig(vocab_size=13, N=1, d_model=8, d_ff=16, h=2, p_drop=0.0, max_len=32, impl="fused")
    model = Transformer(config, np.random.default_rng(0), backend=backend, precision="fp64")
    loss_fn = LabelSmoothingLoss(config.eps_ls, config.pad_id, "fused")
    src, tgt_in, tgt_out = batches(np.random.default_rng(1), 13, count=1)[0]
    results = []
    for out in (lambda: model.loss(src, tgt_in, tgt_out, loss_fn), lambda: loss_fn(model(src, tgt_in), tgt_out)):
        for p in model.parameters():
            p.grad = None
        result = out()
        result.loss.backward()
        results.append((float(result.loss.numpy()), float(result.nll_sum), result.n_tokens,
                        {name: p.backend.to_numpy(p.grad).copy() for name, p in model.named_parameters()}))
    (loss_a, nll_a, n_a, grads_a), (loss_b, nll_b, n_b, grads_b) = results
    assert n_a == n_b == 15 and loss_a == pytest.approx(loss_b, rel=1e-12) and nll_a == pytest.approx(nll_b, rel=1e-12)
    with mt.no_grad():                                                 # validation: the loss, no gradient products
        assert float(model.loss(src, tgt_in, tgt_out, loss_fn).loss.numpy()) == pytest.approx(loss_b, rel=1e-12)
    for name in grads_b:
        np.testing.assert_allclose(grads_a[name], grads_b[name], rtol=1e-9, atol=1e-12, err_msg=name)
