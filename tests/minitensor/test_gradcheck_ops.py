"""Central-difference gradcheck (float64, every element, random cotangent) for every op.

Hypothesis drives shapes for the elementwise ops, broadcasting and reductions,
including size-1 and zero-length axes.
"""
import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

import minitensor as mt
from strategies import away_from_zero, broadcast_pair, positive, shapes


def t(array, requires_grad=True, backend="numpy"):
    return mt.tensor(np.asarray(array, dtype=np.float64), requires_grad=requires_grad,
                     dtype="float64", backend=backend)


BINARY = {
    "add": (lambda a, b: a + b, away_from_zero, away_from_zero),
    "sub": (lambda a, b: a - b, away_from_zero, away_from_zero),
    "mul": (lambda a, b: a * b, away_from_zero, away_from_zero),
    "div": (lambda a, b: a / b, away_from_zero, away_from_zero),
    "pow": (lambda a, b: a ** b, positive, away_from_zero),
}
UNARY = {
    "neg": (lambda a: -a, away_from_zero),
    "exp": (lambda a: a.exp(), away_from_zero),
    "log": (lambda a: a.log(), positive),
    "sqrt": (lambda a: a.sqrt(), positive),
    "relu": (lambda a: a.relu(), away_from_zero),
    "tanh": (lambda a: a.tanh(), away_from_zero),
    "scalar_ops": (lambda a: (2.0 - a) * 3.0 / (a * a + 1.0) + 1.0, away_from_zero),
    "rpow": (lambda a: 2.0 ** a, away_from_zero),
}


@pytest.mark.parametrize("name", sorted(BINARY))
@given(pair=broadcast_pair(allow_zero=True), seed=st.integers(0, 2**16))
def test_binary_op_gradients_with_broadcasting(name, pair, seed):
    fn, make_a, make_b = BINARY[name]
    rng = np.random.default_rng(seed)
    a, b = t(make_a(rng, pair[0])), t(make_b(rng, pair[1]))
    assert mt.gradcheck(fn, a, b)


@pytest.mark.parametrize("name", sorted(UNARY))
@given(shape=shapes(allow_zero=True), seed=st.integers(0, 2**16))
def test_unary_op_gradients(name, shape, seed):
    fn, make = UNARY[name]
    assert mt.gradcheck(fn, t(make(np.random.default_rng(seed), shape)))


@st.composite
def shape_and_axes(draw, allow_zero=True):
    shape = draw(shapes(allow_zero=allow_zero))
    axes = draw(st.none() | st.lists(st.integers(0, len(shape) - 1), min_size=1, unique=True).map(tuple))
    return shape, axes, draw(st.booleans())


@given(case=shape_and_axes(), seed=st.integers(0, 2**16))
def test_sum_and_mean_gradients(case, seed):
    shape, axes, keepdims = case
    x = t(np.random.default_rng(seed).standard_normal(shape))
    assert mt.gradcheck(lambda a: a.sum(axis=axes, keepdims=keepdims), x)
    if all(n > 0 for n in shape):
        assert mt.gradcheck(lambda a: a.mean(axis=axes, keepdims=keepdims), x)


@given(case=shape_and_axes(allow_zero=False), seed=st.integers(0, 2**16))
def test_max_gradients(case, seed):
    shape, axes, keepdims = case
    x = t(np.random.default_rng(seed).permutation(np.prod(shape)).reshape(shape) * 0.1)  # distinct: no ties
    assert mt.gradcheck(lambda a: a.max(axis=axes, keepdims=keepdims), x)


def test_max_splits_gradient_between_ties():
    x = t([[1.0, 3.0, 3.0], [2.0, 0.0, 2.0]])
    x.max(axis=1).sum().backward()
    np.testing.assert_array_equal(x.grad, [[0, 0.5, 0.5], [0.5, 0, 0.5]])


@pytest.mark.parametrize("a_shape,b_shape", [
    ((3, 4), (4, 5)), ((2, 3, 4), (4, 5)), ((2, 3, 4), (2, 4, 5)), ((2, 1, 3, 4), (1, 2, 4, 2)),
    ((1, 4), (4, 1)), ((2, 0, 4), (4, 3)), ((3, 0), (0, 2)),
])
def test_matmul_gradients(a_shape, b_shape, rng):
    assert mt.gradcheck(lambda a, b: a @ b, t(rng.standard_normal(a_shape)), t(rng.standard_normal(b_shape)))


def test_movement_op_gradients(rng):
    x = t(rng.standard_normal((2, 3, 4)))
    assert mt.gradcheck(lambda a: a.reshape(6, 4), x)
    assert mt.gradcheck(lambda a: a.permute(2, 0, 1), x)
    assert mt.gradcheck(lambda a: a.transpose(0, 2), x)
    assert mt.gradcheck(lambda a: a.unsqueeze(1).expand(2, 5, 3, 4), x)
    assert mt.gradcheck(lambda a: a[:, 1:, ::2], x)
    assert mt.gradcheck(lambda a: a[1], x)
    assert mt.gradcheck(lambda a: a[np.array([0, 1, 1, 0]), :, np.array([3, 3, 0, 1])], x)


def test_indexing_with_repeated_ids_scatter_adds(rng):
    table = t(rng.standard_normal((5, 3)))
    ids = np.array([[0, 4, 4], [2, 0, 4]])
    assert mt.gradcheck(lambda w: w[ids], table)
    table.grad = None
    table[ids].sum().backward()
    np.testing.assert_array_equal(table.grad[:, 0], [2, 0, 1, 0, 3])


def test_embedding_gradient(backend, rng):
    from minitensor.functions import Embedding
    table = t(rng.standard_normal((6, 4)), backend=backend)
    ids = table.backend.asarray(np.array([[1, 5, 1], [0, 1, 2]]))
    assert mt.gradcheck(lambda w: Embedding.apply(w, ids=ids), table)


def test_concat_and_stack_gradients(rng):
    a, b, c = (t(rng.standard_normal(s)) for s in [(2, 3), (2, 1), (2, 2)])
    assert mt.gradcheck(lambda a, b, c: mt.concat([a, b, c], axis=1), a, b, c)
    d, e = t(rng.standard_normal((2, 3))), t(rng.standard_normal((2, 3)))
    assert mt.gradcheck(lambda d, e: mt.stack([d, e], axis=1), d, e)
    assert mt.gradcheck(lambda d, e: mt.stack([d, e], axis=0), d, e)


def test_where_and_masked_fill_gradients(rng):
    a, b = t(rng.standard_normal((3, 4))), t(rng.standard_normal((1, 4)))
    cond = rng.random((3, 4)) > 0.5
    assert mt.gradcheck(lambda a, b: mt.where(cond, a, b), a, b)
    assert mt.gradcheck(lambda a: a.masked_fill(np.array([True, False, False, True]), -5.0), a)


def test_cast_gradient_returns_input_dtype(rng):
    x = t(rng.standard_normal((3,)))
    y = x.astype(np.float32)
    assert y.dtype == np.float32
    (y * 2).sum().backward()
    assert x.grad.dtype == np.float64 and np.all(x.grad == 2)


# --- fused ops, on every CPU backend (the kernels come from the backend) ---------------
def test_softmax_gradient(backend, rng):
    x = t(rng.standard_normal((2, 3, 5)), backend=backend)
    assert mt.gradcheck(lambda a: a.softmax(axis=-1, scale=0.7), x)
    assert mt.gradcheck(lambda a: a.softmax(axis=1), x)
    mask = np.zeros((2, 1, 5), dtype=bool)
    mask[0, 0, 3:] = True
    mask[1, 0, :] = True                                    # fully blocked rows
    assert mt.gradcheck(lambda a: a.softmax(mask=mask), x)


def test_log_softmax_gradient(backend, rng):
    assert mt.gradcheck(lambda a: a.log_softmax(axis=-1), t(rng.standard_normal((3, 7)), backend=backend))
    assert mt.gradcheck(lambda a: a.log_softmax(axis=0), t(rng.standard_normal((3, 7)), backend=backend))


def test_layer_norm_gradient(backend, rng):
    from minitensor.functions import LayerNorm
    x = t(rng.standard_normal((2, 3, 6)), backend=backend)
    gamma, beta = t(rng.standard_normal(6), backend=backend), t(rng.standard_normal(6), backend=backend)
    assert mt.gradcheck(lambda x, g, b: LayerNorm.apply(x, g, b, eps=1e-5), x, gamma, beta)


@pytest.mark.parametrize("ignore_index", [0, None])
def test_cross_entropy_gradient(backend, rng, ignore_index):
    from minitensor.functions import CrossEntropy
    logits = t(rng.standard_normal((5, 7)), backend=backend)
    targets = logits.backend.asarray(np.array([1, 0, 6, 3, 2]))
    assert mt.gradcheck(lambda z: CrossEntropy.apply(z, targets=targets, smoothing=0.1, ignore_index=ignore_index)[0], logits)


def test_dropout_gradient_and_statistics(backend, rng):
    from minitensor.functions import Dropout
    x = t(rng.standard_normal((4, 5)), backend=backend)
    assert mt.gradcheck(lambda a: Dropout.apply(a, p=0.3, seed=7), x)
    ones = mt.ones((200, 500), backend=backend)
    y = Dropout.apply(ones, p=0.25, seed=1).numpy()
    kept = y != 0
    assert abs(kept.mean() - 0.75) < 0.01                       # keeps ~1-p
    np.testing.assert_allclose(y[kept], 1 / 0.75, rtol=1e-6)    # inverted scaling
    np.testing.assert_array_equal(Dropout.apply(ones, p=0.25, seed=1).numpy(), y)  # same seed, same mask


def test_linear_gradient(backend, rng):
    from minitensor.functions import Linear
    x, w, b = (t(rng.standard_normal(s), backend=backend) for s in [(2, 3, 4), (4, 5), (5,)])
    assert mt.gradcheck(Linear.apply, x, w, b)
    assert mt.gradcheck(Linear.apply, x, w)


def test_linear_mixed_precision_returns_float32_weight_grads(rng):
    from minitensor.functions import Linear
    x = mt.tensor(rng.standard_normal((3, 4)), dtype="float16", requires_grad=True, backend="numpy")
    w = mt.tensor(rng.standard_normal((4, 2)), requires_grad=True, backend="numpy")
    y = Linear.apply(x, w)
    assert y.dtype == np.float16
    y.sum().backward()
    assert w.grad.dtype == np.float32 and x.grad.dtype == np.float16


@given(data=st.data())
def test_softmax_with_mask_along_any_axis_matches_numpy(backend, data):
    """softmax(x, axis, mask) for every axis and broadcast mask: blocked entries 0, the rest a distribution.

    The reference is written here in NumPy along `axis` directly; the library moves `axis` last
    (and the mask with it) for its kernels, which is where a lost or misaligned mask would show.
    """
    shape = data.draw(shapes(min_dims=1, max_dims=4))
    axis = data.draw(st.integers(-len(shape), len(shape) - 1))
    mask_shape = tuple(n if data.draw(st.booleans()) else 1 for n in shape)[data.draw(st.integers(0, len(shape))):]
    rng = np.random.default_rng(data.draw(st.integers(0, 2**16)))
    x = rng.standard_normal(shape)
    mask = rng.random(mask_shape) < 0.4
    z = np.where(np.broadcast_to(mask, shape), -np.inf, x * 0.7)
    top = np.max(z, axis=axis, keepdims=True)
    e = np.exp(z - np.where(np.isfinite(top), top, 0.0))
    total = e.sum(axis=axis, keepdims=True)
    expected = np.divide(e, total, out=np.zeros_like(e), where=total > 0)   # a fully blocked line gives zeros
    out = t(x, backend=backend).softmax(axis=axis, scale=0.7, mask=mask)
    mt.assert_close(out, expected, f"softmax along axis {axis} of {shape} with a {mask_shape} mask")
