# ---
# jupyter:
#   jupytext:
#     formats: py:percent
#     text_representation:
#       extension: .py
#       format_name: percent
# ---

# %% [markdown]
# # 03 · Checking gradients with finite differences
#
# A wrong backward pass does not crash. The model still trains, a little worse,
# and nobody notices. Every hand-written backward in this repository (the fused
# softmax of §3.2.1, layernorm of §3.1, label-smoothed cross-entropy of §5.4) is
# therefore checked against the one derivative that needs no derivation:
#
# $$\frac{\partial f}{\partial x_i} \approx \frac{f(x + \varepsilon e_i) - f(x - \varepsilon e_i)}{2\varepsilon} \qquad \text{(central difference)}$$
#
# This chapter builds that check, shows why it is *central* and in *float64*,
# and shows the trap that `minitensor.gradcheck` is designed around: checking
# `out.sum()` cannot see a softmax backward that returns zeros.
#
# The library code this chapter builds:
# [`minitensor/testing.py`](../minitensor/testing.py).

# %%
import matplotlib.pyplot as plt
import numpy as np

import minitensor as mt
from _common import FAST, calls_to, fails, finish, show
from minitensor import Function

rng = np.random.default_rng(0)

# %% [markdown]
# ## 1. Forward vs central differences
#
# The one-sided difference `(f(x+ε) − f(x))/ε` has error O(ε): the Taylor term
# `f''(x)ε/2` survives. The central difference cancels it, leaving O(ε²). Both
# also suffer rounding error ≈ machine-ε/ε, so ε cannot be tiny either. We
# measure both errors on `f(x) = sin(x)·eˣ` against its exact derivative.

# %%
def f(x):
    return np.sin(x) * np.exp(x)


def df(x):
    return (np.cos(x) + np.sin(x)) * np.exp(x)


x0 = 0.7
epsilons = np.logspace(-12, -1, 45)
forward_err = np.abs((f(x0 + epsilons) - f(x0)) / epsilons - df(x0))
central_err = np.abs((f(x0 + epsilons) - f(x0 - epsilons)) / (2 * epsilons) - df(x0))

fig, ax = plt.subplots(figsize=(6, 4))
ax.loglog(epsilons, forward_err, label="forward  (f(x+ε) − f(x)) / ε")
ax.loglog(epsilons, central_err, label="central  (f(x+ε) − f(x−ε)) / 2ε")
ax.set_xlabel("ε")
ax.set_ylabel("|error| (float64)")
ax.legend()
show(fig, "03_finite_difference_error")
at = int(np.argmin(np.abs(np.log(epsilons / 1e-6))))        # the ε gradcheck uses
print(f"at ε = {epsilons[at]:.1e}: forward error {forward_err[at]:.1e}, central error {central_err[at]:.1e}")

# %% CHECK
big = epsilons > 1e-4                                      # where truncation error dominates
slope_fwd = np.polyfit(np.log(epsilons[big]), np.log(forward_err[big]), 1)[0]
slope_ctr = np.polyfit(np.log(epsilons[big]), np.log(central_err[big]), 1)[0]
assert 0.8 < slope_fwd < 1.2, f"forward difference error should scale like ε¹, slope {slope_fwd:.2f}"
assert 1.8 < slope_ctr < 2.2, f"central difference error should scale like ε², slope {slope_ctr:.2f}"
assert central_err[at] < 1e-8 < 1e-7 < forward_err[at], "at ε ≈ 1e-6 only the central difference is ~1e-9 accurate"

# %% [markdown]
# In float32 (machine ε ≈ 1.2e-7) the best central difference is only good to
# about 1e-5 relative, too coarse to tell a right backward from a slightly wrong
# one. That is why `gradcheck` refuses anything but float64 inputs.

# %% [markdown]
# ## 2. A gradient check for a whole function
#
# For a function with many inputs and outputs we need one scalar to
# differentiate. Any fixed weighting `r` of the outputs works: `L = Σ out ⊙ r`.
# Autograd gives `∂L/∂x` by `backward()` and finite differences give it by
# perturbing each input element in turn. Here is the check from scratch, for
# the library's softmax.

# %%
def numeric_grad(fn, x: np.ndarray, r: np.ndarray, eps: float = 1e-6) -> np.ndarray:
    """∂/∂x Σ fn(x)⊙r by central differences, one element at a time (float64)."""
    grad = np.zeros_like(x)
    for i in np.ndindex(x.shape):
        old = x[i]
        x[i] = old + eps
        plus = (fn(x) * r).sum()
        x[i] = old - eps
        minus = (fn(x) * r).sum()
        x[i] = old
        grad[i] = (plus - minus) / (2 * eps)
    return grad


def softmax_numpy(x):
    with mt.no_grad():
        return mt.tensor(x, dtype="float64").softmax(axis=-1).numpy()


logits = rng.standard_normal((3, 5))
r = rng.standard_normal((3, 5))                             # a random cotangent
leaf = mt.tensor(logits, requires_grad=True, dtype="float64")
(leaf.softmax(axis=-1) * r).sum().backward()

# %% CHECK
mt.assert_close(leaf.grad, numeric_grad(softmax_numpy, logits.copy(), r), name="softmax grad vs central diff",
                atol=1e-8, rtol=1e-6)

# %% [markdown]
# ## 3. Why `out.sum()` is not enough
#
# The tempting choice is `r = 1`, i.e. check `out.sum()`. For softmax that is
# a constant: every row sums to 1 whatever the input, so its true gradient is
# **zero**, and a backward that returns zeros, or any gradient whose rows sum
# to 0, passes. Here is such a broken softmax. The `out.sum()` check passes it;
# a random cotangent catches it.

# %%
class SoftmaxZeroBackward(Function):
    """Right forward, wrong backward (always zero)."""

    @staticmethod
    def forward(ctx, x):
        e = ctx.backend.xp.exp(x - x.max(axis=-1, keepdims=True))
        return e / e.sum(axis=-1, keepdims=True)

    @staticmethod
    def backward(ctx, grad_out):
        return grad_out * 0.0


def passes_check(function, cotangent) -> bool:
    t = mt.tensor(logits, requires_grad=True, dtype="float64")
    (function.apply(t) * cotangent).sum().backward()
    numeric = numeric_grad(softmax_numpy, logits.copy(), cotangent)
    return np.allclose(t.grad, numeric, atol=1e-7, rtol=1e-6)


ones_passes = passes_check(SoftmaxZeroBackward, np.ones_like(r))
random_passes = passes_check(SoftmaxZeroBackward, r)
print(f"zero backward passes the out.sum() check: {ones_passes}; the random-cotangent check: {random_passes}")

# %% CHECK
assert ones_passes, "with r = 1 the true softmax gradient is 0, so the zero backward looks right"
assert not random_passes, "a random cotangent must expose the zero backward"
try:
    mt.gradcheck(SoftmaxZeroBackward.apply, mt.tensor(logits, requires_grad=True, dtype="float64"))
except AssertionError as err:
    print("mt.gradcheck:", str(err)[:90], "...")
else:
    raise AssertionError("mt.gradcheck must reject the zero backward (it uses a random cotangent)")

# %% [markdown]
# ## 4. `minitensor.gradcheck`
#
# The library's version (in `minitensor/testing.py`, shared by tests and
# chapters) does exactly the above for every input with `requires_grad`, in
# float64, with a seeded random cotangent, and reports the worst element. Two
# more habits from the test suite: stay off kinks (relu at 0, max at ties),
# where the two one-sided derivatives differ, and away from overflow. Here it
# checks a composed expression that goes through matmul, broadcasting, the
# library's LayerNorm Function (chapter 08 builds it and derives its backward)
# and log-softmax.

# %%
n_rows = 2 if FAST else 4
xa = mt.tensor(rng.standard_normal((n_rows, 6)), requires_grad=True, dtype="float64")
wa = mt.tensor(rng.standard_normal((6, 6)), requires_grad=True, dtype="float64")
gamma = mt.tensor(rng.standard_normal(6), requires_grad=True, dtype="float64")
beta = mt.tensor(rng.standard_normal(6), requires_grad=True, dtype="float64")


def block(x, w, g, b):
    h = mt.functions.LayerNorm.apply(x @ w, g, b, eps=1e-6)        # (n, 6)
    return h.log_softmax(axis=-1)


# %% CHECK
assert mt.gradcheck(block, xa, wa, gamma, beta), "matmul + layernorm + log-softmax gradients"

# %% [markdown]
# ## Summary
# - Central differences have O(ε²) truncation error; with ε ≈ 1e-6 in float64 they resolve gradients to ~1e-9.
# - Check `Σ out ⊙ r` with a random `r`: `out.sum()` cannot see bugs in functions whose sum is constant, like softmax.
# - `mt.gradcheck(fn, *inputs)` does all of this; every Function in minitensor is tested with it.
#
# ## Exercises
# 1. **Predict, then run.** A softmax backward that forgets the `− Σ dy⊙y` term returns `y ⊙ dy`.
#    Does the `out.sum()` check (r = 1) catch it? Work out `y ⊙ 1` before you run `passes_check` on it.
#    (Answer key: `PREDICT` in `chapters/solutions/03_checking_gradients.py`.)
# 2. Write `central_difference(f, x, eps)` for a scalar function `f` of an array `x`: the array of
#    ∂f/∂x_i. `check_central_difference(fn)` tests it on a function with a known gradient.
# 3. Write `layernorm_backward(dy, x, gamma, eps)`: dx for y = (x − mean)/√(var + ε)·γ over the last
#    axis (biased variance). `check_layernorm_backward(fn)` compares it with minitensor's LayerNorm.
#    Try it with pen and paper first; chapter 08 derives it step by step (§2 there) if you get stuck.

# %%
def check_central_difference(central_difference) -> None:
    """Exercise 2: against exact gradients, at points drawn afresh each call; must be accurate to ~1e-8 with
    eps=1e-6, which a one-sided (forward) difference does not reach."""
    check_rng = np.random.default_rng()
    x, a = check_rng.standard_normal((2, int(check_rng.integers(3, 6)), int(check_rng.integers(4, 7))))
    x[0, 0] = check_rng.choice([-1, 1]) * check_rng.uniform(0.1, 0.9)     # where a forward difference of Σx³ is off
    got = central_difference(lambda z: float(np.sum(a * np.tanh(z))), x.copy(), 1e-6)
    mt.assert_close(np.asarray(got), a * (1 - np.tanh(x) ** 2), name="∂/∂x Σ a·tanh(x)", atol=1e-8, rtol=1e-6)
    got = central_difference(lambda z: float(np.sum(z ** 3)), x.copy(), 1e-6)
    mt.assert_close(np.asarray(got), 3 * x ** 2, name="∂/∂x Σ x³", atol=1e-8, rtol=1e-6)


def check_layernorm_backward(layernorm_backward) -> None:
    """Exercise 3: dx must match minitensor's LayerNorm backward for random dy, shapes drawn afresh each call;
    derived by hand: no autograd and no library backward inside the answer."""
    check_rng = np.random.default_rng()
    rows, D = check_rng.integers(2, 6), check_rng.integers(3, 9)
    x = check_rng.standard_normal((rows, D))
    g = check_rng.standard_normal(D)
    dy = check_rng.standard_normal((rows, D))
    with calls_to(mt.Tensor.backward, mt.functions.LayerNorm.backward) as calls:
        got = np.asarray(layernorm_backward(dy, x, g, 1e-5))
    assert not calls, f"derive dx by hand: the answer called {dict(calls)}"
    xt = mt.tensor(x, requires_grad=True, dtype="float64")
    y = mt.functions.LayerNorm.apply(xt, mt.tensor(g, dtype="float64"), mt.tensor(np.zeros(D), dtype="float64"),
                                     eps=1e-5)
    (y * dy).sum().backward()
    mt.assert_close(got, xt.grad, name="layernorm dx")


# %% CHECK the checks: a wrong answer must fail them
def _forward_difference(f, x, eps):
    base, grad = f(x), np.zeros_like(x)
    for i in np.ndindex(x.shape):
        x[i] += eps
        grad[i] = (f(x) - base) / eps
        x[i] -= eps
    return grad


def _layernorm_backward_no_mean_terms(dy, x, g, eps):      # treats mean and variance as constants
    return dy * g / np.sqrt(x.var(axis=-1, keepdims=True) + eps)


assert fails(check_central_difference, _forward_difference), "a forward difference is not accurate enough"
def _layernorm_backward_by_autograd(dy, x, g, eps):        # the right numbers, by the method the exercise replaces
    xt = mt.tensor(x, requires_grad=True, dtype="float64")
    y = mt.functions.LayerNorm.apply(xt, mt.tensor(g, dtype="float64"), mt.tensor(np.zeros_like(g), dtype="float64"),
                                     eps=eps)
    (y * dy).sum().backward()
    return xt.grad


assert fails(check_layernorm_backward, _layernorm_backward_no_mean_terms), "layernorm check too weak"
assert fails(check_layernorm_backward, _layernorm_backward_by_autograd), "check_layernorm_backward accepted autograd"

# %%
finish("03_checking_gradients", {check_central_difference: "central_difference", check_layernorm_backward: "layernorm_backward"})
