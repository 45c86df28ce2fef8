"""Optimisers and the schedule against closed forms and a NumPy re-statement."""
import numpy as np
import pytest

import minitensor as mt
from minitensor import nn, optim


def test_noam_matches_closed_form():
    noam = optim.NoamSchedule(d_model=512, warmup=4000)
    closed = lambda s: 512 ** -0.5 * min(s ** -0.5, s * 4000 ** -1.5)
    for step in (1, 4000, 100_000):
        assert noam(step) == pytest.approx(closed(step), rel=1e-12)
    assert noam(1) == pytest.approx(512 ** -0.5 * 4000 ** -1.5, rel=1e-12)
    assert noam(4000) == pytest.approx(512 ** -0.5 * 4000 ** -0.5, rel=1e-12)   # the peak ≈ 7.0e-4
    assert noam(100_000) == pytest.approx(512 ** -0.5 * 100_000 ** -0.5, rel=1e-12)
    assert max(noam(s) for s in range(1, 20000, 7)) <= noam(4000)


def test_adam_applies_the_eq3_rate_of_the_update_it_makes(backend):
    """Update t uses lrate(t) of §5.3 Eq. (3), not lrate(t - 1): the rate is read after the update is counted.

    With a constant gradient g the moments are m_t = (1 - β₁ᵗ) g and v_t = (1 - β₂ᵗ) g², so the bias
    corrections give m̂ = g, v̂ = g² and update t moves each weight by exactly lr_t · g / (|g| + ε): the
    applied rate is readable from the weights. (At update 1, lrate(0) = lrate(1), since step_num starts at 1;
    updates 2 and 4000, the peak, tell the two apart.)
    """
    g = np.array([0.5, -2.0, 3e-3])
    p = nn.Parameter(np.zeros(3), backend=backend, dtype="float64")
    schedule = optim.NoamSchedule(d_model=512, warmup=4000)
    opt = optim.Adam([p], lr=schedule, betas=(0.9, 0.98), eps=1e-9)
    applied = {}
    for t in range(1, 4001):
        before = p.numpy().copy()
        p.grad = p.backend.asarray(g)
        opt.step()
        if t in (1, 2, 4000):
            applied[t] = (before - p.numpy()) / (g / (np.abs(g) + 1e-9))
    for t, rates in applied.items():
        mt.assert_close(rates, np.full(3, schedule(t)), name=f"rate applied at update {t} vs Eq. (3) at step {t}")


def adam_numpy(p, grads, lr, b1, b2, eps):
    m = v = 0
    for t, g in enumerate(grads, 1):
        m = b1 * m + (1 - b1) * g
        v = b2 * v + (1 - b2) * g * g
        p = p - lr * (m / (1 - b1 ** t)) / (np.sqrt(v / (1 - b2 ** t)) + eps)
    return p


def test_adam_matches_numpy_restatement(backend):
    rng = np.random.default_rng(0)
    start = rng.standard_normal((3, 4)).astype(np.float32)
    grads = [rng.standard_normal((3, 4)).astype(np.float32) for _ in range(5)]
    p = nn.Parameter(start.copy(), backend=backend)
    opt = optim.Adam([p], lr=0.01, betas=(0.9, 0.98), eps=1e-9)
    for g in grads:
        p.grad = p.backend.asarray(g)
        opt.step()
    np.testing.assert_allclose(p.numpy(), adam_numpy(start.astype(np.float64), grads, 0.01, 0.9, 0.98, 1e-9),
                               rtol=1e-5, atol=1e-6)


def test_adam_state_round_trip_continues_identically():
    rng = np.random.default_rng(0)
    grads = [rng.standard_normal(4).astype(np.float32) for _ in range(6)]
    a, b = nn.Parameter(np.ones(4)), nn.Parameter(np.ones(4))
    opt_a = optim.Adam([("w", a)], lr=optim.NoamSchedule(16, warmup=3))
    for g in grads[:3]:
        a.grad = g
        opt_a.step()
    b.data = a.data.copy()
    opt_b = optim.Adam([("w", b)], lr=optim.NoamSchedule(16, warmup=3))
    opt_b.load_state_dict(opt_a.state_dict())
    for g in grads[3:]:
        a.grad = b.grad = g
        opt_a.step()
        opt_b.step()
    np.testing.assert_array_equal(a.numpy(), b.numpy())
    with pytest.raises(KeyError, match="m.w"):
        opt_b.load_state_dict({"step": np.array(1)})


def test_sgd_step():
    p = nn.Parameter(np.array([1.0, 2.0]))
    p.grad = np.array([0.5, -1.0], dtype=np.float32)
    optim.SGD([p], lr=0.1).step()
    np.testing.assert_allclose(p.numpy(), [0.95, 2.1])


def test_clip_grad_norm_scales_to_max_norm():
    grad = np.array([3.0, 0.0, 4.0], np.float32)
    norm = optim.clip_grad_norm(grad, max_norm=1.0)
    assert float(norm) == pytest.approx(5.0)
    np.testing.assert_allclose(grad, [0.6, 0.0, 0.8], rtol=1e-5)   # scaled in place to norm 1
    small = np.array([0.3, 0.0, 0.4], np.float32)
    assert float(optim.clip_grad_norm(small, max_norm=1.0)) == pytest.approx(0.5)
    np.testing.assert_allclose(small, [0.3, 0.0, 0.4])            # below the limit: unchanged


def test_adam_gathers_gradients_once_per_step_in_parameter_order():
    a, b, c = nn.Parameter(np.zeros((2, 2))), nn.Parameter(np.zeros(1)), nn.Parameter(np.zeros(3))
    a.grad, c.grad = np.arange(4, dtype=np.float32).reshape(2, 2), np.full(3, 7, np.float32)
    opt = optim.Adam([a, b, c], lr=0.1)
    grad = opt.gather_grads()
    np.testing.assert_array_equal(grad, [0, 1, 2, 3, 0, 7, 7, 7])    # b has no gradient: zeros
    assert opt.gather_grads() is grad                                  # the same buffer until the step
    grad[:] = 0.0                                                      # edits in place (unscaling, clipping) ...
    opt.step()
    np.testing.assert_array_equal(a.numpy(), 0.0)                      # ... are what the step uses
    opt.zero_grad()
    assert opt.gather_grads() is not grad