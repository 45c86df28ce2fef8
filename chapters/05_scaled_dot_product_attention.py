# ---
# jupyter:
#   jupytext:
#     formats: py:percent
#     text_representation:
#       extension: .py
#       format_name: percent
# ---

# %% [markdown]
# # 05 · Scaled dot-product attention
#
# > We call our particular attention "Scaled Dot-Product Attention" (Figure 2).
# > The input consists of queries and keys of dimension d_k, and values of
# > dimension d_v. We compute the dot products of the query with all keys,
# > divide each by √d_k, and apply a softmax function to obtain the weights on
# > the values. (§3.2.1)
#
# $$\mathrm{Attention}(Q, K, V) = \mathrm{softmax}\left(\frac{QK^\top}{\sqrt{d_k}}\right)V \tag{1}$$
#
# Each query asks "which keys look like me?"; the softmax turns the similarity
# scores into weights that are positive and sum to one; the output is the
# weighted average of the values. We build it one query at a time, then as one
# batched matrix product, and compare both with `transformer.attention`.
#
# Shapes: B batch, H heads, Tq queries, Tk keys, K = d_k, Kv = d_v.
#
# The library code this chapter builds:
# [`transformer/attention.py`](../transformer/attention.py),
# [`minitensor/kernels/softmax_forward/numba_cpu.py`](../minitensor/kernels/softmax_forward/numba_cpu.py).

# %%
import math

import matplotlib.pyplot as plt
import numpy as np

import minitensor as mt
from _common import FAST, calls_to, fails, finish, hold_training_path, numba_cuda, own_answer, show
from transformer.attention import scaled_dot_product_attention

cuda, ON_GPU = numba_cuda()                   # numba.cuda: the GPU or its simulator (section 6), before any import
from minitensor.kernels.softmax_forward import numba_cuda as softmax_cuda  # noqa: E402

rng = np.random.default_rng(0)

# %% [markdown]
# ## 1. One query at a time
#
# For query i: score every key, `s_j = q_i · k_j / √d_k`; softmax the scores;
# average the values with those weights. Nothing else.

# %%
def softmax(z):
    e = np.exp(z - z.max())                    # subtract the max: same result, no overflow
    return e / e.sum()


def attention_loop(q, k, v):
    """q (Tq, K), k (Tk, K), v (Tk, Kv) -> (Tq, Kv), one query at a time."""
    out = np.zeros((q.shape[0], v.shape[1]))
    for i in range(q.shape[0]):
        scores = np.array([q[i] @ k[j] for j in range(k.shape[0])]) / math.sqrt(q.shape[1])   # (Tk,)
        weights = softmax(scores)                                                              # (Tk,)
        out[i] = sum(weights[j] * v[j] for j in range(k.shape[0]))                            # (Kv,)
    return out


Tq, Tk, K, Kv = 4, 6, 8, 5
q1, k1, v1 = rng.standard_normal((Tq, K)), rng.standard_normal((Tk, K)), rng.standard_normal((Tk, Kv))
out_loop = attention_loop(q1, k1, v1)

# %% [markdown]
# ## 2. All queries, all heads, all sentences at once
#
# Stacking the queries as rows of Q turns the loop into `Q Kᵀ`, and leading
# axes (B, H) broadcast through the matmuls (chapter 01). This is Eq. (1) as
# written. Then the library version, which fuses the scale and the mask into
# one softmax kernel, on `minitensor` Tensors.

# %%
def attention_numpy(q, k, v, mask=None):
    """Eq. (1) for (..., Tq, K), (..., Tk, K), (..., Tk, Kv); mask True = blocked."""
    scores = q @ k.swapaxes(-1, -2) / math.sqrt(q.shape[-1])        # (..., Tq, Tk)
    if mask is not None:
        scores = np.where(mask, -np.inf, scores)                     # §3.2.3: illegal connections to −∞
    scores = scores - scores.max(axis=-1, keepdims=True)
    weights = np.exp(scores)
    weights = weights / weights.sum(axis=-1, keepdims=True)         # (..., Tq, Tk), rows sum to 1
    return weights @ v, weights                                     # (..., Tq, Kv)


B, H = 2, 3
q = rng.standard_normal((B, H, Tq, K))
k = rng.standard_normal((B, H, Tk, K))
v = rng.standard_normal((B, H, Tk, Kv))
out_np, w_np = attention_numpy(q, k, v)
out_lib, w_lib = scaled_dot_product_attention(mt.tensor(q, dtype="float64"), mt.tensor(k, dtype="float64"),
                                              mt.tensor(v, dtype="float64"))
print("output", out_lib.shape, "weights", w_lib.shape)

# %% CHECK
mt.assert_close(attention_numpy(q1, k1, v1)[0], out_loop, name="vectorised vs loop")
mt.assert_close(out_lib, out_np, name="library Eq. (1) vs NumPy")
mt.assert_close(w_lib, w_np, name="library attention weights vs NumPy")
assert out_lib.shape == (B, H, Tq, Kv) and w_lib.shape == (B, H, Tq, Tk), \
    "Eq. (1) keeps the batch and head axes: (B, H, Tq, Kv) out, (B, H, Tq, Tk) weights"

# %% [markdown]
# ## 3. The weights are row-stochastic, and masks make exact zeros
#
# Every row of the weight matrix is a probability distribution over the keys:
# non-negative, summing to one. So every output is a convex combination of
# value vectors, and lies inside their convex hull (per coordinate: between
# the smallest and largest value). A mask (True = blocked) puts −∞ into the
# scores before the softmax, which gives weight **exactly** zero; a row with
# every key blocked gives all-zero weights in the library (a convention: there
# is nothing to attend to).

# %%
lengths = np.array([4, 6])                                          # sentence 0 has 2 padding keys
pad = (np.arange(Tk)[None, :] >= lengths[:, None])[:, None, None, :]   # (B, 1, 1, Tk)
out_m, w_m = scaled_dot_product_attention(mt.tensor(q), mt.tensor(k), mt.tensor(v), mask=pad)
w_m = w_m.numpy()
all_blocked = np.ones((1, 1, 1, Tk), dtype=bool)
_, w_none = scaled_dot_product_attention(mt.tensor(q), mt.tensor(k), mt.tensor(v), mask=all_blocked)

# %% CHECK
assert (w_m >= 0).all(), "attention weights are probabilities"
mt.assert_close(w_m.sum(axis=-1), np.ones((B, H, Tq)), name="rows sum to 1")
assert (w_m[0, :, :, 4:] == 0).all(), "masked keys get exactly zero weight"
assert (w_m[1] > 0).all(), "unmasked keys always get some weight"
vals = out_m.numpy()
assert (vals[0] <= v[0, :, :4].max(axis=1, keepdims=True) + 1e-6).all() and \
       (vals[0] >= v[0, :, :4].min(axis=1, keepdims=True) - 1e-6).all(), "outputs are convex combinations"
assert (w_none.numpy() == 0).all(), "a fully blocked row gives zero weights, not NaN"

# %% [markdown]
# ## 4. Why divide by √d_k (footnote 4)
#
# > We suspect that for large values of d_k, the dot products grow large in
# > magnitude, pushing the softmax function into regions where it has extremely
# > small gradients. (§3.2.1)
#
# > To illustrate why the dot products get large, assume that the components of
# > q and k are independent random variables with mean 0 and variance 1. Then
# > their dot product, q · k = Σ_{i=1}^{d_k} q_i k_i, has mean 0 and variance
# > d_k. (§3.2.1, footnote 4)
#
# We measure both claims: the variance of q·k grows like d_k, and without the
# scale the softmax saturates (its largest weight → 1), so its Jacobian, and
# every gradient that flows back through it, shrinks towards zero.

# %%
n_samples = 2000 if FAST else 20000
dims = [4, 16, 64, 256, 1024]
variances, max_w_raw, max_w_scaled, grad_raw, grad_scaled = [], [], [], [], []
for d_k in dims:
    qs = rng.standard_normal((n_samples, d_k))
    ks = rng.standard_normal((n_samples, d_k))
    variances.append(np.var((qs * ks).sum(axis=1)))
    scores = rng.standard_normal((200, d_k)) @ rng.standard_normal((d_k, 32))     # 200 queries, 32 keys
    for scale, max_list, grad_list in [(1.0, max_w_raw, grad_raw), (1 / math.sqrt(d_k), max_w_scaled, grad_scaled)]:
        p = np.exp(scale * scores - (scale * scores).max(axis=1, keepdims=True))
        p /= p.sum(axis=1, keepdims=True)
        max_list.append(p.max(axis=1).mean())
        jac = p[:, :, None] * (np.eye(32)[None] - p[:, None, :])                    # d softmax / d scores
        grad_list.append(np.abs(jac).sum(axis=(1, 2)).mean())

fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(9, 3.5))
ax1.loglog(dims, variances, "o-", label="measured Var(q·k)")
ax1.loglog(dims, dims, "k--", label="d_k")
ax1.set_xlabel("d_k")
ax1.legend()
ax2.semilogx(dims, grad_raw, "o-", label="softmax(q·k): Σ|Jacobian|")
ax2.semilogx(dims, grad_scaled, "o-", label="softmax(q·k/√d_k)")
ax2.set_xlabel("d_k")
ax2.legend()
show(fig, "05_sqrt_dk_scaling")
print("Var(q·k):", [f"{x:.1f}" for x in variances])
print("largest weight unscaled:", [f"{x:.2f}" for x in max_w_raw], " scaled:", [f"{x:.2f}" for x in max_w_scaled])

# %% CHECK
for d_k, var in zip(dims, variances):
    assert abs(var / d_k - 1) < 0.15, f"Var(q·k) should be ≈ d_k = {d_k}, measured {var:.1f}"
assert max_w_raw[-1] > 0.9, "unscaled scores at d_k = 1024 saturate the softmax (one weight ≈ 1)"
assert max(max_w_scaled) - min(max_w_scaled) < 0.1, "scaled scores keep the softmax's sharpness independent of d_k"
assert grad_raw[-1] < 0.25 * grad_scaled[-1], "saturated softmax passes back much smaller gradients"

# %% [markdown]
# ## 5. Gradients
#
# The library's attention goes through two matmuls and the fused softmax
# Function; `mt.gradcheck` (chapter 03) checks all three inputs at once.

# %%
qg = mt.tensor(rng.standard_normal((1, 2, 3, 4)), requires_grad=True, dtype="float64")
kg = mt.tensor(rng.standard_normal((1, 2, 5, 4)), requires_grad=True, dtype="float64")
vg = mt.tensor(rng.standard_normal((1, 2, 5, 3)), requires_grad=True, dtype="float64")
causal = np.triu(np.ones((3, 5), dtype=bool), k=3)[None, None]       # a few blocked entries

# %% CHECK
assert mt.gradcheck(lambda a, b, c: scaled_dot_product_attention(a, b, c, mask=causal)[0], qg, kg, vg), \
    "attention gradients disagree with central differences"

# %% [markdown]
# ## 6. The path that trains
#
# The library computes the softmax of Eq. (1) as one fused `Softmax` Function
# (scale and mask inside), whose forward and backward are kernels: NumPy
# references, compiled Numba kernels (what every config trains with), CUDA
# kernels on a GPU, and a `numba.cuda` kernel that chapter 18 takes apart
# (here it just has to agree: without a GPU it runs on numba's CUDA simulator,
# chapter 17). We hold every one of them to a softmax of our own, written with
# Tensor ops so that autograd gives its gradient: values and gradients in
# float64, through a random cotangent (chapter 03); then all of Eq. (1), the
# library's `scaled_dot_product_attention`, on each backend.

# %%
def softmax_rows(x, scale, mask):
    """softmax(scale·x) over the last axis as Tensor ops; blocked entries (mask True) get weight 0."""
    z = x * scale
    e = (z - z.max(axis=-1, keepdims=True).detach()).exp() * mt.tensor(~mask, dtype=x.dtype)   # the max only shifts
    return e / e.sum(axis=-1, keepdims=True)


def attention_ours(q, k, v, mask):
    """Eq. (1) from our own softmax: softmax(QKᵀ/√d_k) V, masked."""
    return softmax_rows(q @ k.T, 1 / math.sqrt(q.shape[-1]), mask) @ v


path_scores = {"x": rng.standard_normal((2, 3, 5)) * 2}                # 6 rows: the simulator runs 64 threads a row
path_qkv = {"q": rng.standard_normal((2, 3, 4)), "k": rng.standard_normal((2, 5, 4)),
            "v": rng.standard_normal((2, 5, 3))}
r_scores, r_attention = rng.standard_normal((2, 3, 5)), rng.standard_normal((2, 3, 3))
cuda_path = "the numba.cuda kernel (" + ("GPU" if ON_GPU else "CUDA simulator") + ")"

# %% CHECK
hold_training_path("softmax(x/2) with a causal mask",
                   lambda x: mt.functions.Softmax.apply(x, scale=0.5, mask=causal[0]), path_scores, own_answer(lambda x: softmax_rows(x, 0.5, causal[0]), path_scores, r_scores), r_scores,
                   kernels={cuda_path: lambda x: softmax_cuda.softmax_forward(x, 0.5, causal[0])})
hold_training_path("Eq. (1), scaled_dot_product_attention",
                   lambda q, k, v: scaled_dot_product_attention(q, k, v, causal[0])[0], path_qkv, own_answer(lambda q, k, v: attention_ours(q, k, v, causal[0]), path_qkv, r_attention),
                   r_attention)

# %% [markdown]
# ## Summary
# - Eq. (1): scores QKᵀ/√d_k, a softmax per query row, a weighted average of the values.
# - The weights are row-stochastic; masking puts −∞ before the softmax and gives exact zeros.
# - Without 1/√d_k the scores have variance d_k and the softmax saturates, starving the gradients.
#
# ## Exercises
# 1. **Predict, then run.** If you add the same constant to every score in a row (say, +100),
#    what happens to that row's weights? What if every key is identical? Try it with `attention_numpy`.
#    (Answer key: `PREDICT` in `chapters/solutions/05_scaled_dot_product_attention.py`.)
# 2. Write `attention(q, k, v, mask)` in NumPy (Eq. (1), mask True = blocked, a fully blocked row
#    gives zeros). `check_attention(fn)` compares it with the library.
# 3. Write `attention_backward(q, k, v, dout)` returning `(dq, dk, dv)` for Eq. (1) without a mask,
#    using the softmax Jacobian-vector product `dS = W ⊙ (dW − Σ dW⊙W)`. `check_attention_backward(fn)`
#    compares it with autograd.

# %%
def check_attention(attention) -> None:
    """Exercise 2: random shapes and masks drawn afresh each call, including a fully blocked row; written in
    NumPy, not by calling the library's attention."""
    check_rng = np.random.default_rng()
    Tq, Tk, K = (int(n) for n in check_rng.integers(2, 7, size=3))
    qc, kc, vc = (check_rng.standard_normal(s) for s in [(2, 2, Tq, K), (2, 2, Tk, K), (2, 2, Tk, K + 2)])
    mask = check_rng.random((2, 1, Tq, Tk)) < 0.3
    mask[0, 0, 1] = True                                              # one row with nothing to attend to
    with calls_to(scaled_dot_product_attention) as calls:
        got_out, got_w = attention(qc, kc, vc, mask)
    assert not calls, "write attention in NumPy: the answer called the library's scaled_dot_product_attention"
    out_ref, w_ref = scaled_dot_product_attention(*(mt.tensor(a, dtype="float64") for a in (qc, kc, vc)),
                                                  mask=mask)
    mt.assert_close(np.asarray(got_w, dtype=np.float64), w_ref, name="attention weights")
    mt.assert_close(np.asarray(got_out, dtype=np.float64), out_ref, name="attention output")


def check_attention_backward(attention_backward) -> None:
    """Exercise 3: against autograd through the library's attention, on inputs drawn afresh each call; the
    answer is the chain rule written out, so it may not run autograd itself."""
    check_rng = np.random.default_rng()
    Tq, Tk, K = (int(n) for n in check_rng.integers(2, 7, size=3))
    arrays = [check_rng.standard_normal(s) for s in [(2, Tq, K), (2, Tk, K), (2, Tk, 3)]]
    dout = check_rng.standard_normal((2, Tq, 3))
    with calls_to(mt.Tensor.backward) as calls:
        answers = attention_backward(*arrays, dout)
    assert not calls, "write the backward pass by hand: the answer ran autograd (Tensor.backward)"
    leaves = [mt.tensor(a, requires_grad=True, dtype="float64") for a in arrays]
    out, _ = scaled_dot_product_attention(*leaves)
    (out * dout).sum().backward()
    for name, got, leaf in zip(("dq", "dk", "dv"), answers, leaves):
        mt.assert_close(np.asarray(got), leaf.grad, name=name)


# %% CHECK the checks: a wrong answer must fail them
def _unscaled(q, k, v, mask):                                       # forgot 1/√d_k
    s = np.where(mask, -np.inf, q @ k.swapaxes(-1, -2))
    w = np.exp(s - s.max(-1, keepdims=True))
    w = np.nan_to_num(w / w.sum(-1, keepdims=True))
    return w @ v, w


def _backward_without_softmax(q, k, v, dout):                       # treats the weights as constants for q, k
    w = attention_numpy(q, k, v)[1]
    return np.zeros_like(q), np.zeros_like(k), w.swapaxes(-1, -2) @ dout


with np.errstate(all="ignore"):
    assert fails(check_attention, _unscaled), "check_attention accepted attention without 1/√d_k"
def _library_attention(q, k, v, mask):                            # the right numbers, by calling the library
    out, w = scaled_dot_product_attention(*(mt.tensor(a, dtype="float64") for a in (q, k, v)), mask=mask)
    return out.numpy(), w.numpy()


def _backward_by_autograd(q, k, v, dout):                          # the right numbers, by autograd
    leaves = [mt.tensor(a, requires_grad=True, dtype="float64") for a in (q, k, v)]
    (scaled_dot_product_attention(*leaves)[0] * dout).sum().backward()
    return [leaf.grad for leaf in leaves]


assert fails(check_attention_backward, _backward_without_softmax), "check_attention_backward too weak"
assert fails(check_attention, _library_attention), "check_attention accepted the library's attention"
assert fails(check_attention_backward, _backward_by_autograd), "check_attention_backward accepted autograd"

# %%
finish("05_scaled_dot_product_attention", {check_attention: "attention", check_attention_backward: "attention_backward"})
