# ---
# jupyter:
#   jupytext:
#     formats: py:percent
#     text_representation:
#       extension: .py
#       format_name: percent
# ---

# %% [markdown]
# # 01 · Arrays, shapes and broadcasting
#
# Every line of the Transformer is an operation on n-dimensional arrays, and
# most bugs in it are shape bugs. The paper never writes a shape down; its
# formulas are for one sentence, one head, one position. This chapter fixes the
# vocabulary the rest of the book uses:
#
# - **shape letters**: B batch, S source length, T target length, D = d_model,
#   H heads, K = d_k, V vocabulary;
# - **broadcasting**, the rule that lets `(B, T, D) + (D,)` add a bias to every
#   position, and `(B, 1, 1, S)` mask every query of every head at once;
# - and what broadcasting means for gradients: **a broadcast in the forward pass
#   is a sum in the backward pass**.
#
# Run it: `python chapters/01_arrays_and_broadcasting.py` (add `--fast` for the
# CI-sized version, `--check-solutions` to test `chapters/solutions/01_*.py`),
# or as a notebook (`chapters/README.md`).

#
# Two tools come with every chapter. `minitensor` is this repository's tensor
# library: NumPy arrays plus reverse-mode gradients; chapter 02 builds its
# engine, and here we only use `mt.tensor(...)` and `.backward()`. And
# `chapters/_common.py` holds what the chapters share: the `--fast` and
# `--check-solutions` switches, `show(fig, name)` for figures, and `fails`
# for proving that a check can fail.
#
# The library code this chapter builds:
# [`minitensor/tensor.py`](../minitensor/tensor.py).

# %%
import numpy as np

import minitensor as mt
from _common import calls_to, fails, finish

rng = np.random.default_rng(0)

# %% [markdown]
# ## 1. An array is a buffer plus a shape
#
# A NumPy array is a flat block of memory and a recipe (shape + strides) for
# reading it as a grid. `reshape` and `transpose` change the recipe, not the
# numbers, so they are free; that is why multi-head attention (§3.2.2) can split
# D into H heads of size K = D/H by a reshape and a transpose, without copying.

# %%
B, T, D, H = 2, 5, 12, 3
K = D // H                                        # §3.2.2: d_k = d_model / h
x = rng.standard_normal((B, T, D))                # (B, T, D)
heads = x.reshape(B, T, H, K).transpose(0, 2, 1, 3)   # (B, T, D) -> (B, T, H, K) -> (B, H, T, K)
print("x", x.shape, "strides", x.strides)
print("heads", heads.shape, "strides", heads.strides, "shares memory:", np.shares_memory(x, heads))

# %% CHECK
assert heads.shape == (B, H, T, K), f"split into heads gave {heads.shape}"
assert np.shares_memory(x, heads), "reshape + transpose should be views, not copies"
assert heads[1, 2, 3, 0] == x[1, 3, 2 * K], "head h holds the features h*K .. h*K+K-1 of every position"
merged = heads.transpose(0, 2, 1, 3).reshape(B, T, D)   # the inverse: (B, H, T, K) -> (B, T, D)
assert np.array_equal(merged, x), "merging the heads must give the input back"
assert not heads.flags.c_contiguous, "a transposed view is not contiguous; reshape may have to copy"

# %% [markdown]
# ## 2. Broadcasting, built from scratch
#
# NumPy's rule: line the two shapes up **from the right**; two sizes are
# compatible when they are equal or one of them is 1; a missing axis counts as
# 1. The result takes the larger size on every axis. Here it is in a few lines,
# compared with NumPy's own `np.broadcast_shapes`.

# %%
def broadcast_shape(a: tuple, b: tuple) -> tuple:
    """The shape of a ⊕ b under NumPy broadcasting; ValueError when they do not fit."""
    ndim = max(len(a), len(b))
    a = (1,) * (ndim - len(a)) + tuple(a)         # missing leading axes count as 1
    b = (1,) * (ndim - len(b)) + tuple(b)
    out = []
    for m, n in zip(a, b):
        if m != n and 1 not in (m, n):
            raise ValueError(f"cannot broadcast {a} and {b}: sizes {m} and {n}")
        out.append(n if m == 1 else m)           # a size-1 axis stretches to the other size
    return tuple(out)


# %% CHECK
cases = [((B, T, D), (D,)), ((B, 1, 1, T), (B, H, T, T)), ((T, 1), (1, T)), ((), (3, 4)),
         ((5, 1, 4), (3, 1)), ((1,), (0,))]
for a, b in cases:
    assert broadcast_shape(a, b) == np.broadcast_shapes(a, b), f"{a} ⊕ {b}"
for a, b in [((B, T, D), (T,)), ((3, 2), (2, 3))]:
    try:
        broadcast_shape(a, b)
    except ValueError:
        pass
    else:
        raise AssertionError(f"{a} and {b} must not broadcast")

# %% [markdown]
# ## 3. The broadcasts the Transformer uses
#
# Three patterns recur in every chapter that follows:
#
# 1. **bias**: `(B, T, D) + (D,)`. A `Linear` layer adds one bias vector to
#    every position of every sentence.
# 2. **masks**: attention scores are `(B, H, T, S)`; a padding mask is
#    `(B, 1, 1, S)` (one row per sentence, shared by all heads and queries),
#    a causal mask `(1, 1, T, T)` (one triangle shared by all sentences and heads).
# 3. **positional encodings**: `(B, T, D) + (T, D)`, the same position vectors
#    for every sentence (§3.5).
#
# The attention product `Q Kᵀ` is a *batched* matmul: the last two axes
# multiply as matrices, the leading axes broadcast like elementwise ones.

# %%
S = 7
src_ids = np.array([[5, 6, 7, 8, 9, 0, 0], [5, 6, 7, 8, 9, 10, 11]])   # (B, S), 0 = padding
pad_mask = (src_ids == 0)[:, None, None, :]                            # (B, S) -> (B, 1, 1, S)
q = rng.standard_normal((B, H, T, K))                                   # (B, H, T, K)
k = rng.standard_normal((B, H, S, K))                                   # (B, H, S, K)
scores = q @ k.swapaxes(-1, -2)                                         # (B, H, T, K) @ (B, H, K, S) -> (B, H, T, S)
masked = np.where(pad_mask, -np.inf, scores)                           # the mask broadcasts over H and T
print("scores", scores.shape, "mask", pad_mask.shape, "masked", masked.shape)

# %% CHECK
assert scores.shape == (B, H, T, S), scores.shape
assert np.isneginf(masked[0, :, :, 5:]).all(), "every head and query of sentence 0 must see padding blocked"
assert np.isfinite(masked[1]).all(), "sentence 1 has no padding: nothing may be blocked"
assert np.allclose(scores[1, 2, 3, 4], q[1, 2, 3] @ k[1, 2, 4]), "score = dot(query, key)"

# %% [markdown]
# ## 4. Broadcasting and gradients: a broadcast is a sum in reverse
#
# If `y = x + b` with `x` of shape `(B, T, D)` and `b` of shape `(D,)`, then
# every element `b[d]` was read B·T times. The chain rule adds up the
# contributions of all those reads, so `∂L/∂b[d] = Σ_{b,t} ∂L/∂y[b,t,d]`: the
# gradient is summed over the axes the forward pass stretched.
#
# minitensor makes this visible: a `Tensor` that needs a gradient is first
# `expand`ed to the common shape (the `Expand` Function in
# `minitensor/functions/movement.py`), and `Expand.backward` sums the gradient
# back over the broadcast axes. We check it against the sum written by hand,
# using a random upstream gradient `g`.

# %%
xt = mt.tensor(rng.standard_normal((B, T, D)), requires_grad=True, dtype="float64")
bt = mt.tensor(rng.standard_normal(D), requires_grad=True, dtype="float64")
g = rng.standard_normal((B, T, D))                                     # dL/dy, random
y = xt + bt                                                            # (B, T, D) + (D,) -> (B, T, D)
(y * g).sum().backward()                                               # L = Σ y ⊙ g, so dL/dy = g
print("b.grad shape", bt.grad.shape)

# %% CHECK
assert bt.grad.shape == (D,), "a gradient always has the shape of its input"
mt.assert_close(bt.grad, g.sum(axis=(0, 1)), name="bias gradient = g summed over B and T")
mt.assert_close(xt.grad, g, name="x was not broadcast: its gradient is g itself")

# %% [markdown]
# The same holds for size-1 axes in the middle: a `(B, 1, D)` tensor added to
# `(B, T, D)` gets its gradient summed over axis 1, *keeping* the axis.

# %%
ct = mt.tensor(rng.standard_normal((B, 1, D)), requires_grad=True, dtype="float64")
(((xt + ct) * g).sum()).backward()

# %% CHECK
mt.assert_close(ct.grad, g.sum(axis=1, keepdims=True), name="(B, 1, D) gradient: sum over T, keep the axis")

# %% [markdown]
# ## Summary
# - Shapes are the contract: B, S, T, D, H, K, V, and a shape comment on every line that changes one.
# - Broadcasting aligns shapes from the right and stretches size-1 axes; masks, biases and positions all rely on it.
# - A broadcast in the forward pass is a sum over the stretched axes in the backward pass (`Expand.backward`).
#
# ## Exercises
# 1. **Predict, then run.** What shape does `np.zeros((3, 1, 4)) + np.zeros((2, 1))` have, and
#    what shape would the gradient of the second operand have? Write your answer down, then run it.
#    (Answer key: `PREDICT` in `chapters/solutions/01_arrays_and_broadcasting.py`.)
# 2. Write `unbroadcast(grad, shape)`: sum a gradient of the broadcast shape back to `shape`
#    (leading axes that were added disappear; size-1 axes are kept). `check_unbroadcast(fn)` tests it.
# 3. Write `matmul_shape(a_shape, b_shape)`: the result shape of `a @ b` for arrays of at least
#    2 dimensions (leading axes broadcast, last two multiply; raise ValueError if the inner sizes
#    differ). `check_matmul_shape(fn)` tests it.

# %%
def _random_broadcast(check_rng) -> tuple[tuple, tuple]:
    """A shape `small` and a shape `big` it broadcasts to: some leading axes added, some size-1 axes stretched."""
    big = tuple(int(n) for n in check_rng.integers(2, 5, size=int(check_rng.integers(1, 5))))
    small = big[int(check_rng.integers(0, len(big) + 1)):]
    return tuple(1 if check_rng.random() < 0.4 else n for n in small), big


def check_unbroadcast(unbroadcast) -> None:
    """Exercise 2: compare with the gradient minitensor computes through Expand, on shapes drawn afresh each
    call; summed by hand, not by running the library's Expand backward."""
    check_rng = np.random.default_rng()
    for small, big in [_random_broadcast(check_rng) for _ in range(6)] + [((), (2, 2)), ((5,), (5,))]:
        grad = check_rng.standard_normal(big)
        with calls_to(mt.Tensor.backward) as calls:
            got = np.asarray(unbroadcast(grad, small))
        assert not calls, "sum the gradient back yourself: the answer ran autograd (Tensor.backward)"
        leaf = mt.tensor(check_rng.standard_normal(small), requires_grad=True, dtype="float64")
        (leaf.expand(big) * grad).sum().backward()
        assert got.shape == tuple(small), f"unbroadcast to {small} returned shape {got.shape}"
        mt.assert_close(got, leaf.grad, name=f"unbroadcast {big} -> {small}")


def check_matmul_shape(matmul_shape) -> None:
    """Exercise 3: against the rule, on shapes drawn afresh each call and too big to build: worked out from the
    shapes alone, not by multiplying arrays."""
    check_rng = np.random.default_rng()
    for _ in range(6):
        batch = tuple(int(n) for n in check_rng.integers(1, 10**5, size=int(check_rng.integers(0, 3))))
        a_batch = tuple(1 if check_rng.random() < 0.3 else n for n in batch)[int(check_rng.integers(0, len(batch) + 1)):]
        M, K, N = (int(n) for n in check_rng.integers(10**6, 10**7, size=3))    # 8 TB and up as float64
        a, b = a_batch + (M, K), tuple(1 if check_rng.random() < 0.3 else n for n in batch) + (K, N)
        expected = np.broadcast_shapes(a[:-2], b[:-2]) + (M, N)
        try:
            got = tuple(matmul_shape(a, b))
        except (ValueError, MemoryError) as error:
            raise AssertionError(f"{a} @ {b} is a valid product: work its shape out without building arrays "
                                 f"({type(error).__name__}: {error})") from None
        assert got == expected, f"{a} @ {b}: expected {expected}, got {got}"
    try:
        matmul_shape((2, 3), (4, 5))
    except ValueError:
        return
    raise AssertionError("(2, 3) @ (4, 5) must raise ValueError: inner sizes 3 and 4 differ")


# %% CHECK the checks: a wrong answer must fail them
assert fails(check_unbroadcast, lambda grad, shape: np.sum(grad).reshape(()) * np.ones(shape)), \
    "check_unbroadcast accepted a total sum"
assert fails(check_matmul_shape, lambda a, b: a[:-1] + b[-1:]), "check_matmul_shape accepted no broadcasting"


def _unbroadcast_by_autograd(grad, shape):                          # the right numbers, by the library's Expand
    leaf = mt.tensor(np.zeros(shape), requires_grad=True, dtype="float64")
    (leaf.expand(grad.shape) * grad).sum().backward()
    return leaf.grad


assert fails(check_unbroadcast, _unbroadcast_by_autograd), "check_unbroadcast accepted autograd through Expand"
assert fails(check_matmul_shape, lambda a, b: np.matmul(np.empty(a), np.empty(b)).shape), \
    "check_matmul_shape accepted the shape of a product it built"

# %%
finish("01_arrays_and_broadcasting", {check_unbroadcast: "unbroadcast", check_matmul_shape: "matmul_shape"})
