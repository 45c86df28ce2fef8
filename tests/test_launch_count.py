"""Kernel launches and host syncs of a training step, counted without a GPU (backends/counting.py).

The bound: one update (train.run.step.train_step: forward, label-smoothed loss, backward, Adam) of the
Transformer-base structure (N = 6 layers a stack, h = 8 heads, the fused ops the configs train
with) at a tiny width, counted as CuPy would run it. The counts do not depend on the width, so a
change that adds launches or a device->host sync to the base step fails here, in CI.

The bound is the measured count (fp16 600, bf16 597, fp32 592 launches, 1 sync each), which holds
because of: time-major fused stacks (no head split/merge copies), Q, K, V from one product, the
sub-layer connection one kernel each way with the output bias and the gradient add folded in,
bias + ReLU one kernel, bias gradients a column-sum kernel. Lower the bound when a change lowers
the count.
The count model itself is checked op by op against what CuPy does (cupy/_core source).
"""
import numpy as np
import pytest

from minitensor import optim
from minitensor.backends.counting import CountingBackend
from train.experiments.host_time import float32_logit_arrays
from train.run.loss_scaler import DynamicLossScaler
from train.run.step import train_step
from transformer.config import TransformerConfig
from transformer.loss import LabelSmoothingLoss
from transformer.model import Transformer

BOUNDS = {"fp16": 600, "bf16": 600, "fp32": 600}   # launches per step; syncs: 1
BASE_STRUCTURE = dict(N=6, h=8, impl="fused", d_model=16, d_ff=32, vocab_size=40)   # Table 3 base, tiny width


def counted_step(precision, backend=None, config=BASE_STRUCTURE):
    """(counts of the second step, its StepStats, the model) for one fixed batch."""
    backend = backend or CountingBackend()
    cfg = TransformerConfig(**config)
    model = Transformer(cfg, np.random.default_rng(0), backend=backend, precision=precision)
    opt = optim.Adam(model.named_parameters(), lr=optim.NoamSchedule(cfg.d_model, 10),
                     half_dtype=model.compute_dtype)
    loss_fn = LabelSmoothingLoss(cfg.eps_ls, cfg.pad_id, cfg.impl)
    scaler = DynamicLossScaler() if precision == "fp16" else None
    data = np.random.default_rng(1)
    src, tgt = data.integers(4, cfg.vocab_size, (3, 7)), data.integers(4, cfg.vocab_size, (3, 6))
    src[0, -2:], tgt[1, -2:] = 0, 0                                      # some padding
    batch = [(src, tgt[:, :-1], tgt[:, 1:])]
    train_step(model, batch, opt, loss_fn, scaler)                       # first step: the ones cache etc.
    counts = getattr(backend, "counts", None)
    if counts is not None:
        counts.clear()
    stats = train_step(model, batch, opt, loss_fn, scaler)
    return (None if counts is None else counts.snapshot()), stats, model


@pytest.mark.parametrize("precision", sorted(BOUNDS))
def test_base_step_launches_and_syncs_stay_under_the_bound(precision):
    counts, stats, _ = counted_step(precision)
    assert stats.stepped
    assert counts["syncs"] <= 1, f"{precision}: {counts['syncs']} host syncs per step: {counts}"
    assert counts["launches"] <= BOUNDS[precision], (
        f"{precision}: {counts['launches']} launches per step > {BOUNDS[precision]}; by kind: {counts['by_kind']}")
    assert counts["uploads"] <= 4                                        # src, tgt_in, tgt_out (+1 spare)


@pytest.mark.parametrize("precision", ["bf16", "fp16"])
def test_a_mixed_step_makes_no_float32_logits(precision):
    """The loss reads half-precision logits (bf16 bits too) and writes their gradient in their dtype: no array
    of B·T rows of V float32s is made, forward or backward (25,000 × 37,000 × 4 bytes = 3.7 GB at base size)."""
    backend = CountingBackend()
    counted_step(precision, backend)
    rows, vocab = 3 * 5, BASE_STRUCTURE["vocab_size"]                   # counted_step's batch: B = 3, T = 5
    assert float32_logit_arrays(backend.counts.allocations, rows, vocab) == []
    assert float32_logit_arrays([((rows, vocab), np.dtype(np.float32))], rows, vocab)   # the check can fail


def test_counting_backend_computes_what_the_numpy_backend_computes():
    """Counting must not change the numbers: its products are cuBLAS plans run by numpy_gemm (summed in float64,
    rounded once), so fp32 agrees to float32 roundoff and bf16 closely."""
    small = dict(BASE_STRUCTURE, N=2)
    for precision, tol in (("fp32", 1e-5), ("bf16", 1e-2)):
        _, counted, m1 = counted_step(precision, CountingBackend(), small)
        _, plain, m2 = counted_step(precision, "numpy", small)
        assert abs(float(counted.loss_sum) - float(plain.loss_sum)) <= tol * abs(float(plain.loss_sum))
        for (name, a), (_, b) in zip(m1.state_dict().items(), m2.state_dict().items()):
            # w_k.bias: its gradient is exactly 0 (softmax ignores a shift of a row of scores), so each path's
            # roundoff is all there is, and Adam divides it by its own size (tests/transformer/test_composed_vs_fused.py)
            if not name.endswith("w_k.bias"):
                np.testing.assert_allclose(a, b, atol=tol, err_msg=f"{precision} {name}")


def test_the_model_counts_what_cupy_launches():
    b = CountingBackend()
    xp, c = b.xp, b.counts
    x = xp.ones((4, 6), dtype=np.float32)                      # 1: fill
    y = x + 1                                                  # 1 (a Python scalar is a kernel argument)
    x.T.reshape(24)                                            # 1: a transposed array flattened must be copied
    x.reshape(24), x[1:3], x.T, xp.broadcast_to(x[:1], (4, 6))  # views: free
    x.astype(np.float32, copy=False)                           # same dtype: free
    y.sum(), x.max(axis=1)                                     # reductions: 1 each
    y *= 2                                                     # in place: 1
    assert c.launches == 6 and c.syncs == 0, c.snapshot()
    float(y.sum())                                             # 1 launch, 1 sync
    x[x > 0]                                                   # 2 launches (compare, gather), 1 sync
    assert (c.launches, c.syncs) == (9, 2), c.snapshot()
    half = xp.ones((2, 3, 4), dtype=np.float16)
    before = c.launches
    xp.matmul(half, np.swapaxes(half, -1, -2))                 # cupy.matmul: 2 copies to fp32, GEMM, cast back
    assert c.launches - before == 4
    many = [xp.ones(3, dtype=np.float32) for _ in range(9)]
    before, uploads = c.launches, c.uploads
    xp.concatenate(many)                                       # > 8 small same-dtype arrays: one kernel
    xp.concatenate(many[:3])                                   # else one copy each
    assert c.launches - before == 4 and c.uploads - uploads == 1
    xp.asarray(np.arange(5))                                   # an upload, no launch
    assert c.uploads - uploads == 2
