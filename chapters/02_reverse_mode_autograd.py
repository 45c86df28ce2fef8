# ---
# jupyter:
#   jupytext:
#     formats: py:percent
#     text_representation:
#       extension: .py
#       format_name: percent
# ---

# %% [markdown]
# # 02 · Reverse-mode autograd: from a scalar engine to `minitensor.Tensor`
#
# Training the Transformer means computing the gradient of one number (the
# loss, §5.4) with respect to some 60 million others. Reverse-mode automatic
# differentiation does that in one backward sweep that costs about as much as
# the forward pass. We build it twice:
#
# 1. a **scalar engine** in the style of micrograd: each number remembers its
#    parents and a closure `_backward` that pushes its gradient to them;
# 2. then the refactor that `minitensor` makes: **ops become `Function`
#    classes** with a `forward` and a `backward` on whole arrays, a `Context`
#    that keeps what backward needs (`save_for_backward`), and a backend that
#    does the math, so the same op runs on NumPy, Numba or CuPy.
#
# The library code this chapter builds:
# [`minitensor/autograd.py`](../minitensor/autograd.py),
# [`minitensor/tensor.py`](../minitensor/tensor.py).

# %%
import numpy as np

import minitensor as mt
from _common import fails, finish
from minitensor import Function

rng = np.random.default_rng(0)

# %% [markdown]
# ## 1. A scalar engine in forty lines
#
# A `Value` holds a number, its gradient, the Values it was computed from, and a
# closure that applies the chain rule locally: given `out.grad = ∂L/∂out`, add
# `∂L/∂out · ∂out/∂parent` to each parent's gradient. `backward()` orders the
# graph so a node runs only after everything that uses it has, then calls the
# closures in that order. The sort is iterative: a deep graph (a 10,000-step
# chain) would overflow Python's recursion limit with a recursive one.

# %%
import math


class Value:
    def __init__(self, data, parents=()):
        self.data, self.grad, self._parents, self._backward = float(data), 0.0, parents, lambda: None

    def __add__(self, other):
        other = other if isinstance(other, Value) else Value(other)
        out = Value(self.data + other.data, (self, other))
        def _backward():                       # d(a+b)/da = d(a+b)/db = 1
            self.grad += out.grad
            other.grad += out.grad
        out._backward = _backward
        return out

    def __mul__(self, other):
        other = other if isinstance(other, Value) else Value(other)
        out = Value(self.data * other.data, (self, other))
        def _backward():                       # d(ab)/da = b, d(ab)/db = a
            self.grad += other.data * out.grad
            other.grad += self.data * out.grad
        out._backward = _backward
        return out

    def exp(self):
        out = Value(math.exp(self.data), (self,))
        def _backward():                       # d e^a / da = e^a, which is out.data
            self.grad += out.data * out.grad
        out._backward = _backward
        return out

    def tanh(self):
        out = Value(math.tanh(self.data), (self,))
        def _backward():                       # d tanh(a)/da = 1 - tanh(a)^2
            self.grad += (1 - out.data ** 2) * out.grad
        out._backward = _backward
        return out

    __radd__, __rmul__ = __add__, __mul__

    def backward(self):
        order, seen, stack = [], set(), [(self, False)]
        while stack:                           # iterative post-order depth-first search
            node, done = stack.pop()
            if done:
                order.append(node)
            elif id(node) not in seen:
                seen.add(id(node))
                stack.append((node, True))
                stack.extend((p, False) for p in node._parents)
        self.grad = 1.0                        # dL/dL
        for node in reversed(order):           # children before parents
            node._backward()


# %% [markdown]
# A neuron: `tanh(w·x + b)`. We differentiate it with the engine and compare
# with the derivative written out by hand: `∂/∂w_i = (1 − y²) x_i`.

# %%
xs, ws, b = [0.5, -1.5, 2.0], [0.3, 0.8, -0.2], 0.1
w_vals = [Value(w) for w in ws]
b_val = Value(b)
y = sum((w * x for w, x in zip(w_vals, xs)), b_val).tanh()
y.backward()
by_hand = [(1 - y.data ** 2) * x for x in xs]
print("y =", round(y.data, 6), " dy/dw =", [round(w.grad, 6) for w in w_vals])

# %% CHECK
assert np.allclose([w.grad for w in w_vals], by_hand), "engine disagrees with the hand derivative"
assert np.isclose(b_val.grad, 1 - y.data ** 2), "dy/db = 1 - y^2"

# %% [markdown]
# **Why `+=`.** A value used twice gets gradient from both uses. `a * a` must
# give `2a`, `c + c` must give 2, and a graph that is reused (the same weight at
# every position) must add up the contributions of every use. The neuron above
# used every Value once, so it cannot tell `+=` from `=`; these can. The same is
# true in minitensor: leaves accumulate, and `zero_grad` is an explicit step of
# the training loop. The chain below is 10,000 operations deep: the iterative
# sort handles it.

# %%
a = Value(3.0)
(a * a).backward()
c = Value(-2.0)
(c + c).backward()
u, w = Value(0.5), Value(4.0)
(u * w + u).backward()                         # u reaches the output twice: through the product and directly
deep = Value(1.0)
node = deep
for _ in range(10_000):
    node = node * 1.0001
node.backward()

# %% CHECK
assert a.grad == 6.0, f"d(a·a)/da = 2a = 6, got {a.grad} (a closure that assigns instead of adds gives 3)"
assert c.grad == 2.0, f"d(c+c)/dc = 2, got {c.grad}: Value.__add__ must add (+=) into the gradients, not assign"
assert (u.grad, w.grad) == (5.0, 0.5), f"d(u·w + u)/du = w + 1 = 5, d/dw = u = 0.5; got {(u.grad, w.grad)}"
assert np.isclose(deep.grad, 1.0001 ** 10_000), "the deep chain's gradient is the product of its factors"

# %% [markdown]
# ## 2. The same computation with `minitensor.Tensor`
#
# `minitensor` works on arrays instead of scalars, and the result must agree
# with our engine on the same numbers.

# %%
x_t = mt.tensor(np.array([xs]), dtype="float64")                       # (1, 3)
w_t = mt.tensor(np.array([ws]).T, requires_grad=True, dtype="float64")  # (3, 1)
b_t = mt.tensor(np.array([b]), requires_grad=True, dtype="float64")     # (1,)
y_t = (x_t @ w_t + b_t).tanh()                                          # (1, 3) @ (3, 1) + (1,) -> (1, 1)
y_t.sum().backward()

# %% CHECK
mt.assert_close(y_t.numpy().ravel(), np.array([y.data]), name="forward")
mt.assert_close(w_t.grad.ravel(), np.array([w.grad for w in w_vals]), name="dy/dw: Tensor vs Value")
mt.assert_close(b_t.grad, np.array([b_val.grad]), name="dy/db: Tensor vs Value")

# %% [markdown]
# ## 3. The refactor: closures → `Function` classes
#
# The scalar engine is perfect for reading and hopeless for a Transformer: a
# Python object per number, and the op's math split between `__mul__` and a
# closure hidden inside it. `minitensor/autograd.py` keeps the idea and changes
# three things:
#
# - **Grouping.** One `Function` subclass per primitive, with a static
#   `forward(ctx, *arrays)` and `backward(ctx, grad_out)` side by side, on whole
#   arrays. `Function.apply` is the only place that wraps arrays into Tensors and
#   records the graph (a `Context` with the parents), so forward and backward
#   stay plain array code you can test alone.
# - **`save_for_backward`.** A closure captures whatever it happens to mention
#   (often the whole parent Values). A Function saves exactly the arrays its
#   backward needs, `ctx.save_for_backward(out)`, and `backward()` frees them as
#   soon as they are used. Memory is what limits batch size.
# - **Swappable backends.** Backward does its math through `ctx.backend.xp`
#   (NumPy or CuPy) or the backend's kernels, never through a hard-coded `np.`,
#   so the same Function runs on every backend.
#
# Here is a new primitive written that way: `Softplus(x) = log(1 + eˣ)`, whose
# derivative is the logistic sigmoid. Forward saves its input; backward returns
# one gradient per input. `mt.gradcheck` (next chapter) compares it with finite
# differences.

# %%
class Softplus(Function):
    """f = log(1 + e^x);  df/dx = 1 / (1 + e^-x)"""

    @staticmethod
    def forward(ctx, x):
        ctx.save_for_backward(x)
        xp = ctx.backend.xp
        return xp.logaddexp(0.0, x)            # log(e^0 + e^x), stable for large |x|

    @staticmethod
    def backward(ctx, grad_out):
        (x,) = ctx.saved
        xp = ctx.backend.xp
        return grad_out / (1.0 + xp.exp(-x))   # one gradient per input


v = mt.tensor(rng.standard_normal((3, 4)), requires_grad=True, dtype="float64")
out = Softplus.apply(v)                        # (3, 4)
print("the output remembers its Function:", out._ctx.function.__name__)

# %% CHECK
mt.assert_close(out, np.log1p(np.exp(v.numpy())), name="softplus forward")
assert mt.gradcheck(Softplus.apply, v), "softplus backward disagrees with finite differences"
assert out._ctx.parents == (v,), "apply records the inputs as the graph's parents"

# %% [markdown]
# ### Swapping the backend
#
# The backend belongs to the tensor and every op carries it forward. The NumPy
# backend is the reference; `"cpu"` picks the Numba backend (compiled kernels
# for softmax, layernorm, cross-entropy, Adam) when Numba imports. The same
# graph on two backends must give the same numbers, and mixing backends in one
# op is an error rather than a silent copy. A GPU cell would sit behind
# `if mt.available("cupy"):`.

# %%
z = rng.standard_normal((4, 6))
results = {}
for name in ["numpy", "numba"] + (["cupy"] if mt.available("cupy") else []):
    if not mt.available(name):
        print(f"backend {name} not available here: {mt.why_unavailable(name)}")
        continue
    t = mt.tensor(z, requires_grad=True, backend=name)
    (Softplus.apply(t).softmax(axis=-1) * mt.tensor(z, backend=name)).sum().backward()
    results[name] = t.grad if name != "cupy" else t.grad.get()
print("ran on:", list(results))

# %% CHECK
for name, grad in results.items():
    mt.assert_close(grad, results["numpy"], name=f"{name} backend vs numpy")
if "numba" in results:
    try:
        mt.tensor(z, backend="numpy") + mt.tensor(z, backend="numba")
    except ValueError as err:
        print("mixing backends:", str(err)[:72], "...")
    else:
        raise AssertionError("adding tensors from two backends must raise")

# %% [markdown]
# ## Summary
# - Reverse mode: run forward, then visit nodes children-first, each adding `grad · local derivative` into its parents.
# - minitensor groups each op's forward and backward in a `Function`, saves only what backward needs, and does the math through the tensor's backend.
# - Gradients accumulate with `+`: reuse adds up, and clearing them (`zero_grad`) is the caller's job.
#
# ## Exercises
# 1. **Predict, then run.** Build `loss = (w * 3.0).sum()` from a leaf `w = mt.tensor([1.0, 2.0], requires_grad=True)`,
#    call `loss.backward()`, then build it again and call `backward()` again *without* clearing `w.grad`.
#    What is `w.grad` now? (Answer key: `PREDICT` in `chapters/solutions/02_reverse_mode_autograd.py`.)
# 2. Add `__pow__(self, k)` (a constant exponent k) to a Value-like class: write `value_pow(a, k)`
#    that returns a new `Value` (build it with `type(a)(data, (a,))`) with the right closure. `check_value_pow(fn)` tests it.
# 3. Write a `Sigmoid(Function)` (forward saves the *output*; backward uses `y(1−y)`).
#    `check_sigmoid(cls)` runs gradcheck and compares with `1 / (1 + e^{-x})`.

# %%
def check_value_pow(value_pow) -> None:
    """Exercise 2: d(a^k)/da = k·a^(k-1), accumulated with +=, for bases and exponents drawn afresh each call;
    to float64's precision, which a derivative measured by finite differences does not reach."""
    check_rng = np.random.default_rng()
    for base, k in zip(check_rng.uniform(0.2, 4.0, size=4), check_rng.uniform(-3.0, 4.0, size=4)):
        base, k = float(base), float(k)
        a = Value(base)
        out = value_pow(a, k) * 2.0 + value_pow(a, k)        # used twice: gradients must add
        out.backward()
        assert np.isclose(out.data, 3 * base ** k, rtol=1e-12), f"forward of {base}**{k}"
        assert np.isclose(a.grad, 3 * k * base ** (k - 1), rtol=1e-12, atol=0), \
            f"d({base}**{k})/da: got {a.grad}, expected {3 * k * base ** (k - 1)} (k·a^(k−1), exactly)"


def check_sigmoid(sigmoid_cls) -> None:
    """Exercise 3: values, the saved output (and nothing else), and gradcheck against central differences."""
    x = mt.tensor(np.random.default_rng(2).standard_normal((3, 5)) * 3, requires_grad=True, dtype="float64")
    y = sigmoid_cls.apply(x)
    mt.assert_close(y, 1 / (1 + np.exp(-x.numpy())), name="sigmoid forward")
    saved = y._ctx.saved                       # what forward kept for backward (freed once backward has run)
    assert len(saved) == 1, f"forward must save exactly one array, the output y; it saved {len(saved)}"
    assert np.shape(saved[0]) == y.shape and np.allclose(saved[0], y.numpy()), \
        "forward must save its output y (backward needs only y(1−y)), not the input x"
    assert mt.gradcheck(sigmoid_cls.apply, x), "sigmoid backward"


# %% CHECK the checks: a wrong answer must fail them
class _SigmoidWrong(Function):
    @staticmethod
    def forward(ctx, x):
        y = 1 / (1 + ctx.backend.xp.exp(-x))
        ctx.save_for_backward(y)
        return y

    @staticmethod
    def backward(ctx, grad_out):
        (y,) = ctx.saved
        return grad_out * y                    # forgot (1 - y)


class _SigmoidSavesInput(Function):          # right values and gradients, but keeps x and recomputes y
    @staticmethod
    def forward(ctx, x):
        ctx.save_for_backward(x)
        return 1 / (1 + ctx.backend.xp.exp(-x))

    @staticmethod
    def backward(ctx, grad_out):
        (x,) = ctx.saved
        y = 1 / (1 + ctx.backend.xp.exp(-x))
        return grad_out * y * (1 - y)


def _pow_assigns(a, k):                        # assigns the gradient instead of adding it
    out = Value(a.data ** k, (a,))
    def _backward():
        a.grad = k * a.data ** (k - 1) * out.grad
    out._backward = _backward
    return out


assert fails(check_sigmoid, _SigmoidWrong), "check_sigmoid accepted a wrong backward"
assert fails(check_sigmoid, _SigmoidSavesInput), "check_sigmoid accepted a Sigmoid that saves its input"
assert fails(check_value_pow, _pow_assigns), "check_value_pow accepted '=' instead of '+='"


def _pow_by_finite_differences(a, k):          # the right numbers to ~1e-10, measured instead of derived
    out = Value(a.data ** k, (a,))
    def _backward():
        h = 1e-6
        a.grad += ((a.data + h) ** k - (a.data - h) ** k) / (2 * h) * out.grad
    out._backward = _backward
    return out


assert fails(check_value_pow, _pow_by_finite_differences), "check_value_pow accepted a measured derivative"

# %%
finish("02_reverse_mode_autograd", {check_value_pow: "value_pow", check_sigmoid: "Sigmoid"})
