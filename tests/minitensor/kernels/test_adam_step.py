"""adam_step: every Numba version vs the reference (param, m, v after several steps); float64
through every backend (gradcheck-style training runs in float64); the reference vs the closed form
of the first step.

Shapes: P parameters (flat), also a 2-D buffer.
"""
import numpy as np
import pytest

import minitensor as mt
from minitensor.kernels.adam_step import numba_cpu
from minitensor.dtypes import BF16
from minitensor.kernels.adam_step.reference import adam_step_ref
from minitensor.kernels.bf16_cast.reference import bf16_cast_ref
from tests.minitensor.kernels._close import assert_close

HYPER = dict(lr=1e-3, beta1=0.9, beta2=0.98, eps=1e-9)  # §5.3


@pytest.mark.parametrize("version", sorted(numba_cpu.VERSIONS))
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("shape", [(1,), (5,), (17,), (1000,), (7, 33)])
def test_adam_step_matches_reference(monkeypatch, version, dtype, shape):
    monkeypatch.setattr(numba_cpu, "DEFAULT", version)
    rng = np.random.default_rng(0)
    param = rng.standard_normal(shape).astype(dtype)
    m, v = np.zeros(shape, dtype), np.zeros(shape, dtype)
    mine = [param.copy(), m.copy(), v.copy()]
    theirs = [param.copy(), m.copy(), v.copy()]
    for step in range(1, 4):
        grad = rng.standard_normal(shape).astype(dtype)
        grad.flat[0] = 0.0  # a zero gradient: v = 0 at step 1, eps keeps the division finite
        assert numba_cpu.adam_step(mine[0], grad, mine[1], mine[2], step=step, **HYPER) is None
        adam_step_ref(theirs[0], grad, theirs[1], theirs[2], step=step, **HYPER)
    for name, a, b in zip(("param", "m", "v"), mine, theirs):
        assert a.dtype == b.dtype == dtype
        assert_close(a, b, f"adam_step v{version} {name}")


def test_adam_step_float64_through_the_backend(backend):
    """Backend.adam_step keeps float64 param, grad, m, v in float64 and matches the reference."""
    b = mt.get_backend(backend)
    rng = np.random.default_rng(5)
    param = rng.standard_normal((3, 41))
    m, v = np.zeros_like(param), np.zeros_like(param)
    mine = [b.asarray(a.copy()) for a in (param, m, v)]
    theirs = [param.copy(), m.copy(), v.copy()]
    for step in range(1, 4):
        grad = rng.standard_normal(param.shape)
        assert b.adam_step(mine[0], b.asarray(grad), mine[1], mine[2], step=step, **HYPER) is None
        adam_step_ref(theirs[0], grad, theirs[1], theirs[2], step=step, **HYPER)
    for name, a, ref in zip(("param", "m", "v"), mine, theirs):
        a = b.to_numpy(a)
        assert a.dtype == np.float64, f"{backend} adam_step turned float64 {name} into {a.dtype}"
        assert_close(a, ref, f"adam_step float64 {name} on {backend}")


def test_adam_step_rejects_non_contiguous():
    buf = np.zeros((4, 4), np.float32)[:, :2]
    with pytest.raises(ValueError):
        numba_cpu.adam_step(buf, buf, buf, buf, step=1, **HYPER)


def test_adam_step_reference_first_step_closed_form():
    """At step 1 from m = v = 0: m_hat = g, v_hat = g^2, so param -= lr * g / (|g| + eps)."""
    g = np.array([0.5, -2.0, 1e-3])
    param, m, v = np.zeros(3), np.zeros(3), np.zeros(3)
    adam_step_ref(param, g, m, v, step=1, **HYPER)
    assert_close(param, -HYPER["lr"] * g / (np.abs(g) + HYPER["eps"]), "param")
    assert_close(m, 0.1 * g, "m")
    assert_close(v, 0.02 * g * g, "v")


@pytest.mark.parametrize("version", sorted(numba_cpu.VERSIONS))
@pytest.mark.parametrize("half_dtype", [np.float16, BF16], ids=["fp16", "bf16"])
def test_adam_step_writes_the_half_copy_of_the_updated_param(monkeypatch, version, half_dtype):
    """half = the updated float32 param rounded once to float16 / bf16, in the same call."""
    monkeypatch.setattr(numba_cpu, "DEFAULT", version)
    rng = np.random.default_rng(3)
    param = rng.standard_normal(257).astype(np.float32)
    m, v = np.zeros_like(param), np.zeros_like(param)
    half = np.zeros(param.shape, half_dtype)
    mine, theirs = [param.copy(), m.copy(), v.copy(), half.copy()], [param.copy(), m.copy(), v.copy(), half.copy()]
    for step in (1, 2):
        grad = rng.standard_normal(param.shape).astype(np.float32)
        numba_cpu.adam_step(mine[0], grad, mine[1], mine[2], step=step, half=mine[3], **HYPER)
        adam_step_ref(theirs[0], grad, theirs[1], theirs[2], step=step, half=theirs[3], **HYPER)
    np.testing.assert_array_equal(theirs[3], bf16_cast_ref(theirs[0], BF16) if half_dtype == BF16
                                  else theirs[0].astype(np.float16))     # the reference's own definition
    np.testing.assert_array_equal(mine[3], theirs[3])


def test_adam_optimizer_hands_the_half_copy_to_the_forward_pass(backend):
    """Adam(half_dtype=...) keeps Parameter.half equal to the rounded masters after every step,
    and a parameter whose data is replaced has no half copy until the next step."""
    b = mt.get_backend(backend)
    p = mt.nn.Parameter(b.asarray(np.linspace(-1, 1, 12, dtype=np.float32).reshape(3, 4)), backend=b)
    opt = mt.optim.Adam([p], lr=0.1, half_dtype=BF16)
    assert (b.to_numpy(p.half(BF16)) == bf16_cast_ref(p.numpy(), BF16)).all() and p.half(np.float16) is None
    p.grad = b.asarray(np.ones((3, 4), np.float32))
    opt.step()
    assert (b.to_numpy(p.half(BF16)) == bf16_cast_ref(p.numpy(), BF16)).all()
    p.data = b.asarray(np.zeros((3, 4), np.float32))                 # e.g. load_state_dict
    assert p.half(BF16) is None
    opt.step()
    assert (b.to_numpy(p.half(BF16)) == bf16_cast_ref(p.numpy(), BF16)).all()
