# ---
# jupyter:
#   jupytext:
#     formats: py:percent
#     text_representation:
#       extension: .py
#       format_name: percent
# ---

# %% [markdown]
# # 06 · Multi-head attention
#
# > Instead of performing a single attention function with d_model-dimensional
# > keys, values and queries, we found it beneficial to linearly project the
# > queries, keys and values h times with different, learned linear projections
# > to d_k, d_k and d_v dimensions, respectively. (§3.2.2)
#
# $$\mathrm{MultiHead}(Q, K, V) = \mathrm{Concat}(\mathrm{head}_1, \ldots, \mathrm{head}_h)\,W^O$$
# $$\text{where}\quad \mathrm{head}_i = \mathrm{Attention}(QW_i^Q, KW_i^K, VW_i^V)$$
#
# > In this work we employ h = 8 parallel attention layers, or heads. For each
# > of these we use d_k = d_v = d_model/h = 64. Due to the reduced dimension of
# > each head, the total computational cost is similar to that of single-head
# > attention with full dimensionality. (§3.2.2)
#
# One attention averages with one set of weights per query. Several heads can
# look at several places at once (one at the previous word, one at the
# subject, ...). We build multi-head attention as the paper writes it, a loop
# over heads with their own projection matrices, and check that the library's
# batched version, which keeps all h projections in one matrix and the heads
# as a batch axis, computes the same thing.
#
# Shapes: B batch, T positions, D = d_model, H heads, K = d_k = d_v.
#
# The library code this chapter builds:
# [`transformer/attention.py`](../transformer/attention.py),
# [`transformer/fused.py`](../transformer/fused.py).

# %%
import math

import numpy as np

import minitensor as mt
from _common import calls_to, fails, finish, hold_training_path, own_answer
from transformer.attention import MultiHeadAttention, merge_heads as library_merge_heads
from transformer.attention import split_heads as library_split_heads
from transformer.fused import split_heads as fused_split_heads

rng = np.random.default_rng(0)

# %% [markdown]
# ## 1. The library module and its weights
#
# `MultiHeadAttention` has four `Linear` layers: `w_q`, `w_k`, `w_v` map D to
# H·K, `w_o` maps H·K back to D. The paper's per-head W_i^Q (D × K) is the
# i-th block of K columns of `w_q.weight`. (Our Linear layers also have biases;
# the paper's formula has none, and the reference implementations keep them.)

# %%
B, T, D, H = 2, 5, 16, 4
K = D // H                                                          # §3.2.2: d_k = d_v = d_model / h
mha = MultiHeadAttention(d_model=D, h=H, d_k=K, d_v=K, rng=rng)
for name, p in mha.named_parameters():
    print(f"{name:14s} {p.shape}")
x = rng.standard_normal((B, T, D)).astype(np.float32)               # (B, T, D)
out_lib, weights_lib = mha(mt.tensor(x))                            # self-attention: Q = K = V = x
print("output", out_lib.shape, "weights", weights_lib.shape)

# %% CHECK
assert out_lib.shape == (B, T, D), "multi-head attention maps d_model back to d_model"
assert weights_lib.shape == (B, H, T, T), "one (T, T) weight matrix per head and sentence"
assert mha.num_parameters() == 4 * (D * D + D), "4 projections of D×D plus biases, whatever h is"

# %% [markdown]
# ## 2. The paper's formula, one head at a time
#
# For each head, slice its projection matrices out of the big ones, run Eq. (1)
# (chapter 05), and concatenate the h outputs along the feature axis before
# the output projection W^O.

# %%
def attention(q, k, v):
    s = q @ k.swapaxes(-1, -2) / math.sqrt(q.shape[-1])             # (B, Tq, Tk)
    w = np.exp(s - s.max(-1, keepdims=True))
    w /= w.sum(-1, keepdims=True)
    return w @ v, w                                                 # (B, Tq, K), (B, Tq, Tk)


def multi_head_loop(query, memory, mha):
    """§3.2.2 literally: h separate heads, Concat, W^O. query (B, Tq, D), memory (B, Tk, D)."""
    p = {name: t.numpy().astype(np.float64) for name, t in mha.named_parameters()}
    heads, maps = [], []
    for i in range(mha.h):
        cols = slice(i * mha.d_k, (i + 1) * mha.d_k)                # head i's block of columns
        q_i = query @ p["w_q.weight"][:, cols] + p["w_q.bias"][cols]      # Q W_i^Q, (B, Tq, K)
        k_i = memory @ p["w_k.weight"][:, cols] + p["w_k.bias"][cols]     # K W_i^K, (B, Tk, K)
        v_i = memory @ p["w_v.weight"][:, cols] + p["w_v.bias"][cols]     # V W_i^V, (B, Tk, K)
        head, w = attention(q_i, k_i, v_i)
        heads.append(head)
        maps.append(w)
    concat = np.concatenate(heads, axis=-1)                         # Concat(head_1..head_h), (B, Tq, H·K)
    return concat @ p["w_o.weight"] + p["w_o.bias"], np.stack(maps, axis=1)   # (B, Tq, D), (B, H, Tq, Tk)


out_loop, weights_loop = multi_head_loop(x.astype(np.float64), x.astype(np.float64), mha)

# %% CHECK
mt.assert_close(out_lib, out_loop.astype(np.float32), name="batched heads vs per-head loop", atol=1e-5)
mt.assert_close(weights_lib, weights_loop.astype(np.float32), name="per-head attention weights", atol=1e-6)
assert not np.allclose(weights_loop[:, 0], weights_loop[:, 1], atol=1e-3), "different heads attend differently"

# %% [markdown]
# ## 3. Encoder-decoder attention: queries from one sequence, keys and values from another
#
# > In "encoder-decoder attention" layers, the queries come from the previous
# > decoder layer, and the memory keys and values come from the output of the
# > encoder. (§3.2.3)
#
# Nothing changes in the module but its second argument: the weights become
# (B, H, T, S), one row per target position over the S source positions.

# %%
S = 7
memory = rng.standard_normal((B, S, D)).astype(np.float32)          # (B, S, D) encoder output
out_x, weights_x = mha(mt.tensor(x), mt.tensor(memory))
out_x_loop, _ = multi_head_loop(x.astype(np.float64), memory.astype(np.float64), mha)

# %% CHECK
assert weights_x.shape == (B, H, T, S), weights_x.shape
mt.assert_close(out_x, out_x_loop.astype(np.float32), name="encoder-decoder attention", atol=1e-5)

# %% [markdown]
# ## 4. Attention alone does not know about order
#
# Self-attention treats its input as a *set*: permute the positions and the
# outputs are permuted the same way, nothing else changes. That is why the
# model adds positional encodings (§3.5, next chapter) to its inputs.

# %%
perm = rng.permutation(T)
out_perm, _ = mha(mt.tensor(x[:, perm]))

# %% CHECK
mt.assert_close(out_perm, out_lib.numpy()[:, perm], name="permutation equivariance", atol=1e-5)

# %% [markdown]
# ## 5. The cost is that of one big head
#
# With d_k = D/h, the projections cost the same for any h, and the score
# matmuls do h products of size (T, D/h)·(D/h, T), the same T²·D multiply-adds
# as one head of full width. We count them for the base model (D = 512).

# %%
def attention_flops(T, D, h):
    K = D // h
    projections = 4 * T * D * (h * K)                               # Q, K, V and output projections
    scores_and_mix = 2 * h * T * T * K                              # QKᵀ and W V, per head
    return projections + scores_and_mix


costs = {h: attention_flops(T=50, D=512, h=h) for h in (1, 2, 4, 8, 16, 32)}
print({h: f"{c / 1e6:.2f} M" for h, c in costs.items()})

# %% CHECK
assert len(set(costs.values())) == 1, "§3.2.2: total cost independent of h when d_k = d_model/h"

# %% [markdown]
# ## 6. The whole of it as one op
#
# Written op by op, one attention is 16 graph nodes: 4 projections, a reshape
# and a permute per head split, the Kᵀ permute, two matmuls, the softmax, and
# a permute and reshape to merge. Each node is a Python call forward and
# backward, and on a GPU at least one kernel launch each way: for the base
# model's 18 attentions that is most of a training step's op count.
# With `TransformerConfig(impl="fused")`, `MultiHeadAttention` therefore runs Eq. (1)
# for all heads as one Function, `transformer.fused.Attention` (the default,
# `impl="composed"`, runs the op-by-op code above), whose backward is the chain
# rule through its four lines written out by hand:
#
# $$S = QK^\top,\quad W = \mathrm{softmax}(S/\sqrt{d_k}),\quad D = \mathrm{Dropout}(W),\quad O = DV$$
# $$dD = dO\,V^\top,\quad dV = D^\top dO,\quad dW = \mathrm{Dropout}(dD),\quad dS = \mathrm{softmax}'(W, dW),\quad dQ = dS\,K,\quad dK = dS^\top Q$$
#
# It must agree with finite differences, and with the op-by-op version
# written out below with Tensor ops: the head split as a reshape and a
# transpose, Eq. (1) per head, dropout on the weights (the attention dropout
# that `attention_dropout` turns on), the merge. This is the code that trains:
# every config runs it on the Numba kernels, so we hold it there (and on the
# NumPy references) to ours, values and gradients in float64, with a padding
# mask and dropout on. Its dropout draws u from a seed, `backend.uniform(seed,
# shape, float32)` (chapter 04), and ours takes the same u.

# %%
from transformer.fused import Attention


def multi_head_ours(q, k, v, heads, mask, p, u):
    """(B, T, H·K) Tensors -> (B, Tq, H·K): split, Eq. (1) per head with dropout on the weights (draws u), merge."""
    def split(a):                                                   # (B, T, H·K) -> (B, H, T, K)
        return a.reshape(a.shape[0], a.shape[1], heads, a.shape[2] // heads).transpose(1, 2)

    qh, kh, vh = split(q), split(k), split(v)
    weights = (qh @ kh.T).softmax(-1, scale=1 / math.sqrt(qh.shape[-1]), mask=mask)   # (B, H, Tq, Tk)
    dropped = weights * mt.tensor((u >= p) / (1 - p), dtype=weights.dtype)            # chapter 04's dropout
    out = dropped @ vh                                                                 # (B, H, Tq, K)
    return out.transpose(1, 2).reshape(q.shape[0], q.shape[1], heads * vh.shape[-1])  # Concat(heads)


q64, k64, v64 = (mt.tensor(rng.standard_normal((1, 3, H * 2)), requires_grad=True, dtype="float64") for _ in range(3))
p_attn, seed_attn, Tk_path = 0.2, 77, 6
padding = np.zeros((B, 1, 1, Tk_path), dtype=bool)
padding[0, ..., 4:] = True                                          # sentence 0 has 2 padding keys
u_attn = mt.get_backend("numba").uniform(seed_attn, (B, H, T, Tk_path), np.float32)
path_inputs = {"q": rng.standard_normal((B, T, D)), "k": rng.standard_normal((B, Tk_path, D)),
               "v": rng.standard_normal((B, Tk_path, D))}
r_path = rng.standard_normal((B, T, D))

# %% CHECK
hold_training_path(f"multi-head attention (fused Attention, padding mask, dropout p = {p_attn})",
                   lambda q, k, v: Attention.apply(q, k, v, heads=H, mask=padding, p=p_attn, seed=seed_attn)[0],
                   path_inputs, own_answer(lambda q, k, v: multi_head_ours(q, k, v, H, padding, p_attn, u_attn),
                                           path_inputs, r_path), r_path,
                   backends=("numpy", "numba"))             # a GPU draws its own u (tests/minitensor/kernels hold its kernels)
assert mt.gradcheck(lambda a, b, c: Attention.apply(a, b, c, heads=H)[0], q64, k64, v64), \
    "the hand-written attention backward disagrees with central differences"

# %% [markdown]
# The fused model trains time-major: its stacks hold tokens as (T, B, H·K),
# position by position (chapter 10), and `Attention` reads its heads from that
# layout in place (`time_major=True`), with its dropout mask drawn as the
# (B, T) layout would draw it. So we hold that layout too: the same inputs laid
# out (T, B, H·K), the answer read back to (B, T, H·K) and compared with ours.

# %%
def time_major(a):
    return np.ascontiguousarray(np.swapaxes(a, 0, 1))                    # (B, T, ·) -> (T, B, ·) memory


def multi_head_ours_time_major(q, k, v):
    out = multi_head_ours(q.transpose(0, 1), k.transpose(0, 1), v.transpose(0, 1), H, padding, p_attn, u_attn)
    return out.transpose(0, 1)                                            # (B, Tq, H·K) -> (Tq, B, H·K)


path_inputs_tm = {name: time_major(a) for name, a in path_inputs.items()}
r_path_tm = time_major(r_path)

# %% CHECK
hold_training_path(f"multi-head attention, time-major (T, B, H·K) as the fused model trains (fused Attention, "
                   f"padding mask, dropout p = {p_attn})",
                   lambda q, k, v: Attention.apply(q, k, v, heads=H, mask=padding, p=p_attn, seed=seed_attn,
                                                   time_major=True)[0],
                   path_inputs_tm, own_answer(multi_head_ours_time_major, path_inputs_tm, r_path_tm), r_path_tm,
                   backends=("numpy", "numba"))

# %% [markdown]
# ## Summary
# - Multi-head attention = h attentions on learned D→D/h projections, concatenated, then W^O.
# - The library stores the h projections as one (D, H·K) matrix; with impl="fused" all heads run as one
#   Function, read in place (no split or merge copies), and Q, K, V come from one product: 3 graph nodes
#   per self-attention instead of 16.
# - Attention is permutation-equivariant; order has to come from positional encodings.
#
# ## Exercises
# 1. **Predict, then run.** How many parameters does `MultiHeadAttention(512, h, 512 // h, 512 // h)` have for
#    h = 1, 8 and 16? Table 3 row (A) varies h at fixed cost: does the parameter count change?
#    (Answer key: `PREDICT` in `chapters/solutions/06_multi_head_attention.py`.)
# 2. Write `split_heads(x, h)`: (B, T, D) -> (B, h, T, D/h) with head i holding features i·D/h ... (i+1)·D/h − 1,
#    and `merge_heads(x)`, its inverse. `check_split_merge(split, merge)` tests both.
# 3. Write `multi_head_self_attention(x, wq, wk, wv, wo, h)` in NumPy without a loop over heads
#    (weights (D, D), no biases). `check_mhsa(fn)` compares it with the per-head formula.

# %%
def check_split_merge(split_heads, merge_heads) -> None:
    """Exercise 2: layout must match the library's w_q column blocks, for sizes drawn afresh each call; written
    in NumPy, not by calling the library's split_heads/merge_heads."""
    check_rng = np.random.default_rng()
    Bc, Tc, hc, Kc = (int(n) for n in check_rng.integers(2, 6, size=4))
    xc = check_rng.standard_normal((Bc, Tc, hc * Kc))
    with calls_to(library_split_heads, library_merge_heads, fused_split_heads) as calls:
        heads = np.asarray(split_heads(xc, hc))
        merged = np.asarray(merge_heads(heads))
    assert not calls, f"reshape the heads yourself: the answer called the library's {dict(calls)}"
    assert heads.shape == (Bc, hc, Tc, Kc), f"split_heads shape {heads.shape}, expected {(Bc, hc, Tc, Kc)}"
    b, i, t = (int(check_rng.integers(n)) for n in (Bc, hc, Tc))
    assert np.array_equal(heads[b, i, t], xc[b, t, i * Kc:(i + 1) * Kc]), \
        f"head {i} must hold features {i * Kc}..{(i + 1) * Kc - 1}"
    assert np.array_equal(merged, xc), "merge_heads(split_heads(x)) must be x"


def check_mhsa(multi_head_self_attention) -> None:
    """Exercise 3: against the per-head loop (zero biases), sizes drawn afresh each call; in NumPy, neither
    through the library's attention nor through this chapter's loop over heads."""
    check_rng = np.random.default_rng()
    hc, Kc = (int(n) for n in check_rng.integers(2, 5, size=2))
    Dc = hc * Kc
    m = MultiHeadAttention(d_model=Dc, h=hc, d_k=Kc, d_v=Kc, rng=check_rng)
    xc = check_rng.standard_normal((2, int(check_rng.integers(2, 7)), Dc))
    ref, _ = multi_head_loop(xc, xc, m)
    w = {name: t.numpy().astype(np.float64) for name, t in m.named_parameters()}
    assert all(np.all(w[f"{n}.bias"] == 0) for n in ("w_q", "w_k", "w_v", "w_o")), "biases start at zero"
    with calls_to(MultiHeadAttention.forward, Attention.forward, multi_head_loop, attention) as calls:
        got = multi_head_self_attention(xc, w["w_q.weight"], w["w_k.weight"], w["w_v.weight"], w["w_o.weight"], hc)
    assert not calls, f"write it in NumPy, without a loop over heads: the answer called {dict(calls)}"
    mt.assert_close(np.asarray(got), ref, name="multi-head self-attention")


# %% CHECK the checks: a wrong answer must fail them
def _split_wrong(x, h):                                             # heads interleaved, not blocks
    B_, T_, D_ = x.shape
    return x.reshape(B_, T_, D_ // h, h).transpose(0, 3, 1, 2)


def _merge_wrong(x):
    B_, h_, T_, K_ = x.shape
    return x.transpose(0, 2, 3, 1).reshape(B_, T_, h_ * K_)


def _one_head(x, wq, wk, wv, wo, h):                                # ignores h
    return attention(x @ wq, x @ wk, x @ wv)[0] @ wo


assert fails(check_split_merge, _split_wrong, _merge_wrong), "check_split_merge accepted interleaved heads"
assert fails(check_split_merge, fused_split_heads, lambda x: np.asarray(library_merge_heads(mt.tensor(x)))), \
    "check_split_merge accepted the library's split_heads and merge_heads"
assert fails(check_mhsa, _one_head), "check_mhsa accepted single-head attention"


def _through_the_library(x, wq, wk, wv, wo, h):                    # the right numbers, by the library's module
    module = MultiHeadAttention(d_model=x.shape[-1], h=h, d_k=wq.shape[1] // h, d_v=wv.shape[1] // h)
    module.w_q.weight, module.w_k.weight, module.w_v.weight, module.w_o.weight = \
        (mt.nn.Parameter(w, dtype="float64") for w in (wq, wk, wv, wo))
    for linear in (module.w_q, module.w_k, module.w_v, module.w_o):
        linear.bias = mt.nn.Parameter(np.zeros(linear.out_features), dtype="float64")
    return module(mt.tensor(x, dtype="float64"))[0].numpy()


assert fails(check_mhsa, _through_the_library), "check_mhsa accepted the library's MultiHeadAttention"

# %%
finish("06_multi_head_attention", {check_split_merge: "split_heads merge_heads", check_mhsa: "multi_head_self_attention"})
