"""The graph machinery: topological order, accumulation, no_grad, errors."""
import numpy as np
import pytest

import minitensor as mt
from minitensor.autograd import Function, backward, is_grad_enabled


def test_backward_of_deep_chain_does_not_hit_recursion_limit():
    x = mt.tensor(np.array([1.0]), requires_grad=True, dtype="float64", backend="numpy")
    y = x
    for _ in range(10_000):
        y = y * 1.0001
    y.sum().backward()
    assert x.grad[0] == pytest.approx(1.0001 ** 10_000, rel=1e-9)


def test_shared_subexpression_accumulates_both_paths():
    x = mt.tensor(np.array([3.0]), requires_grad=True, dtype="float64", backend="numpy")
    a = x * x          # used twice below: d/dx (x² + x³) = 2x + 3x² = 6 + 27
    (a + a * x).sum().backward()
    assert x.grad[0] == pytest.approx(33.0)


def test_leaf_grads_accumulate_across_backward_calls_until_zeroed():
    x = mt.tensor(np.array([2.0]), requires_grad=True, dtype="float64", backend="numpy")
    (x * 3).sum().backward()
    (x * 3).sum().backward()
    assert x.grad[0] == 6.0
    x.grad = None
    (x * 3).sum().backward()
    assert x.grad[0] == 3.0


def test_on_leaf_done_fires_once_per_leaf_when_its_gradient_is_final():
    """The data-parallel hook: a leaf used early and late in the graph is reported once, after its last use."""
    rng = np.random.default_rng(0)
    w1, w2, b = (mt.tensor(rng.standard_normal(shape), requires_grad=True, dtype="float64")
                 for shape in ((3, 3), (3, 3), (3,)))
    x = mt.tensor(rng.standard_normal((2, 3)), dtype="float64")
    h = ((x @ w1 + b).tanh() @ w2 + b).tanh() @ w1          # w1 and b: first and last layers both use them
    seen = []
    backward((h * h).sum(), on_leaf_done=lambda leaf: seen.append((leaf, leaf.grad.copy())))
    assert [id(leaf) for leaf, _ in seen].count(id(w1)) == 1 and len(seen) == 3
    for leaf, grad_then in seen:
        np.testing.assert_array_equal(grad_then, leaf.grad)  # nothing was added after the report
    order = [id(leaf) for leaf, _ in seen]
    assert order.index(id(w2)) < order.index(id(w1))        # w2 is done before backward reaches the first layer


def test_no_grad_records_nothing_and_restores_on_exception():
    x = mt.tensor([1.0], requires_grad=True)
    with mt.no_grad():
        y = x * 2
    assert not y.requires_grad and y._ctx is None
    with pytest.raises(ZeroDivisionError):
        with mt.no_grad():
            1 / 0
    assert is_grad_enabled()
    assert (x * 2).requires_grad


def test_detach_cuts_the_graph():
    x = mt.tensor(np.array([2.0]), requires_grad=True, dtype="float64", backend="numpy")
    y = x * x.detach()            # gradient flows only through the first factor: d/dx = x
    y.sum().backward()
    assert x.grad[0] == 2.0


def test_backward_errors_are_explained():
    with pytest.raises(RuntimeError, match="does not require grad"):
        mt.tensor([1.0]).sum().backward()
    with pytest.raises(RuntimeError, match="needs a scalar"):
        (mt.tensor([1.0, 2.0], requires_grad=True) * 2).backward()


def test_function_returning_wrong_number_of_gradients_is_caught():
    class Broken(Function):
        @staticmethod
        def forward(ctx, a, b):
            return a + b

        @staticmethod
        def backward(ctx, grad_out):
            return (grad_out,)   # one gradient for two inputs

    a = mt.tensor([1.0], requires_grad=True)
    with pytest.raises(RuntimeError, match="returned 1 gradients for 2 inputs"):
        Broken.apply(a, a).sum().backward()


def test_mixing_backends_raises():
    a = mt.tensor([1.0], backend="numpy")
    b = mt.tensor([1.0], backend="numba") if mt.available("numba") else None
    if b is None:
        pytest.skip("numba not available")
    with pytest.raises(ValueError, match="different backends"):
        a + b


def test_float32_default_and_float64_on_request():
    assert mt.tensor([1.0]).dtype == np.float32
    assert mt.tensor(np.zeros(2)).dtype == np.float32
    assert mt.tensor(np.zeros(2), dtype="float64").dtype == np.float64
    assert mt.tensor(np.arange(3)).dtype.kind == "i"


def test_intermediate_tensors_are_not_kept_alive_by_the_graph():
    import weakref
    x = mt.tensor(np.ones(3), requires_grad=True, dtype="float64", backend="numpy")
    y = x * 2.0
    z = y.exp()                     # Exp saves its output, not its input: y itself is not needed
    probe = weakref.ref(y)
    del y
    assert probe() is None, "the graph must record y by its Context, not hold y (and its array) alive"
    z.sum().backward()
    np.testing.assert_allclose(x.grad, 2 * np.exp(2.0))


def test_second_backward_through_freed_graph_raises():
    x = mt.tensor(np.ones(2), requires_grad=True, dtype="float64", backend="numpy")
    y = (x * x).sum()
    y.backward()
    with pytest.raises(RuntimeError, match="already freed"):
        y.backward()
