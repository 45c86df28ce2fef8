# ---
# jupyter:
#   jupytext:
#     formats: py:percent
#     text_representation:
#       extension: .py
#       format_name: percent
# ---

# %% [markdown]
# # 07 · Feed-forward networks, embeddings and positional encodings
#
# Three small pieces complete a Transformer layer and its inputs.
#
# > In addition to attention sub-layers, each of the layers in our encoder and
# > decoder contains a fully connected feed-forward network, which is applied to
# > each position separately and identically. This consists of two linear
# > transformations with a ReLU activation in between. (§3.3)
#
# $$\mathrm{FFN}(x) = \max(0, xW_1 + b_1)W_2 + b_2 \tag{2}$$
#
# with $d_{\text{model}} = 512$ and $d_{ff} = 2048$ (§3.3).
#
# > In our model, we share the same weight matrix between the two embedding
# > layers and the pre-softmax linear transformation ... In the embedding
# > layers, we multiply those weights by √d_model. (§3.4)
#
# $$PE_{(pos, 2i)} = \sin\left(pos/10000^{2i/d_{\text{model}}}\right), \qquad PE_{(pos, 2i+1)} = \cos\left(pos/10000^{2i/d_{\text{model}}}\right)$$
#
# > We chose this function because we hypothesized it would allow the model to
# > easily learn to attend by relative positions, since for any fixed offset k,
# > PE_pos+k can be represented as a linear function of PE_pos. (§3.5)
#
# Shapes: B batch, T positions, D = d_model, F = d_ff, V vocab, L = max_len.
#
# The library code this chapter builds:
# [`transformer/feed_forward.py`](../transformer/feed_forward.py),
# [`transformer/embedding.py`](../transformer/embedding.py),
# [`transformer/positional.py`](../transformer/positional.py).

# %%
import matplotlib.pyplot as plt
import numpy as np

import minitensor as mt
from _common import calls_to, fails, finish, hold_training_path, own_answer, show
from transformer.embedding import Embeddings
from transformer.feed_forward import PositionwiseFeedForward
from transformer.positional import PositionalEncoding, sinusoid_table

rng = np.random.default_rng(0)

# %% [markdown]
# ## 1. The position-wise feed-forward network, Eq. (2)
#
# "Position-wise" means the same two matrices are applied to every position
# on its own: a (B, T, D) input is just B·T rows. We compute Eq. (2) in NumPy
# with the library module's weights, then check that running it one position
# at a time gives the same result: no information moves between positions here
# (that is attention's job).

# %%
B, T, D, F = 2, 6, 16, 64
ffn = PositionwiseFeedForward(d_model=D, d_ff=F, rng=rng)
p = {name: t.numpy() for name, t in ffn.named_parameters()}
x = rng.standard_normal((B, T, D)).astype(np.float32)
eq2 = np.maximum(0, x @ p["w_1.weight"] + p["w_1.bias"]) @ p["w_2.weight"] + p["w_2.bias"]   # §3.3, Eq. (2)
out_lib = ffn(mt.tensor(x))
one_at_a_time = np.stack([ffn(mt.tensor(x[:, t:t + 1])).numpy()[:, 0] for t in range(T)], axis=1)

# %% CHECK
mt.assert_close(out_lib, eq2, name="library FFN vs Eq. (2)", atol=1e-5)
mt.assert_close(one_at_a_time, out_lib, name="position-wise: each position on its own", atol=1e-5)
assert p["w_1.weight"].shape == (D, F) and p["w_2.weight"].shape == (F, D), "D -> d_ff -> D"

# %% [markdown]
# ## 2. Embeddings, shared and scaled by √d_model
#
# One (V, D) matrix E plays three roles when `tie=True`: source embedding,
# target embedding (both `E[ids] · √d_model`) and, transposed, the output
# projection `logits = x Eᵀ`. Sharing needs a vocabulary common to both
# languages (§5.1 uses shared BPE). The paper does not say how E is
# initialised; we draw it from N(0, 1/d_model) (as tensor2tensor does), so each
# embedding vector has norm ≈ 1 and the ×√d_model brings each *coordinate* to
# unit scale, the same as the sinusoids it is added to (every PE coordinate
# lies in [−1, 1]).

# %%
V = 50
emb = Embeddings(vocab_size=V, d_model=D, tie=True, rng=rng)
E = emb.shared.weight.numpy()                                      # (V, D)
ids = rng.integers(0, V, size=(B, T))
src_vec = emb.source(ids).numpy()                                  # (B, T, D)
hidden = mt.tensor(rng.standard_normal((B, T, D)).astype(np.float32))
logits = emb.logits(hidden).numpy()                                # (B, T, V)
print(f"std of a raw embedding coordinate {E.std():.3f}; after ×√d_model {src_vec.std():.3f}")

# %% CHECK
mt.assert_close(src_vec, E[ids] * np.sqrt(D), name="source embedding = E[ids]·√d_model", atol=1e-5)
mt.assert_close(emb.target(ids), src_vec, name="tied: target embedding uses the same matrix")
mt.assert_close(logits, hidden.numpy() @ E.T, name="tied: logits = x Eᵀ", atol=1e-5)
assert [n for n, _ in emb.named_parameters()] == ["shared.weight"], "one matrix when tied"
assert 0.7 < src_vec.std() < 1.3, "scaled embeddings have unit-scale coordinates"

# %% [markdown]
# Because E is used three times, its gradient is the **sum** of the three
# uses' gradients (chapter 02's `+=`, at matrix scale). We check that against
# untied copies of the same matrix.

# %%
g1, g2, g3 = (rng.standard_normal(s).astype(np.float32) for s in [(B, T, D), (B, T, D), (B, T, V)])
emb.shared.weight.grad = None
loss = (emb.source(ids) * g1).sum() + (emb.target(ids) * g2).sum() + (emb.logits(hidden) * g3).sum()
loss.backward()
untied = Embeddings(vocab_size=V, d_model=D, tie=False, rng=rng)
untied.load_state_dict({"src.weight": E, "tgt.weight": E, "generator.weight": E.T})
loss_u = (untied.source(ids) * g1).sum() + (untied.target(ids) * g2).sum() + (untied.logits(hidden) * g3).sum()
loss_u.backward()

# %% CHECK
summed = untied.src.weight.grad + untied.tgt.weight.grad + untied.generator.weight.grad.T
mt.assert_close(emb.shared.weight.grad, summed, name="tied gradient = sum of the three uses", atol=1e-4)

# %% [markdown]
# ## 3. Sinusoidal positional encodings, §3.5
#
# Dimension pair (2i, 2i+1) is a point on a circle turning at frequency
# ω_i = 10000^(−2i/d_model): wavelengths from 2π (i = 0) to 10000·2π. Position 0
# is angle 0 everywhere: PE(0) = (sin 0, cos 0, ...) = (0, 1, 0, 1, ...).

# %%
def sinusoids(max_len, d_model):
    pos = np.arange(max_len)[:, None]                              # (L, 1)
    i2 = np.arange(0, d_model, 2)[None, :]                         # (1, D/2) the values of 2i
    angle = pos / 10000 ** (i2 / d_model)                          # (L, D/2)
    pe = np.zeros((max_len, d_model))
    pe[:, 0::2], pe[:, 1::2] = np.sin(angle), np.cos(angle)        # §3.5: sin on 2i, cos on 2i+1
    return pe


d_model, max_len = 64, 128
pe = sinusoids(max_len, d_model)
table = sinusoid_table(max_len, d_model)                           # the library's (float32)
module = PositionalEncoding(d_model, max_len, "sinusoidal", rng)
zeros_in = mt.zeros((1, 10, d_model))
added = module(zeros_in, offset=5).numpy()[0]                      # x + PE[5:15]

fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(10, 3.5))
ax1.imshow(pe.T, aspect="auto", cmap="RdBu", origin="lower")
ax1.set_xlabel("position")
ax1.set_ylabel("dimension")
ax1.set_title("PE (§3.5)")
for dim in (0, 2, 10, 30):
    ax2.plot(pe[:, dim], label=f"dim {dim}")
ax2.set_xlabel("position")
ax2.legend()
show(fig, "07_positional_encoding")

# %% CHECK
expected_pe0 = np.tile([0.0, 1.0], d_model // 2)
assert np.array_equal(table[0], expected_pe0.astype(np.float32)), f"PE(0) must be (0, 1, 0, 1, ...), got {table[0][:6]}"
mt.assert_close(table, pe.astype(np.float32), name="library table vs §3.5 formula", atol=1e-6)
mt.assert_close(added, table[5:15], name="PositionalEncoding adds rows offset..offset+T")
mt.assert_close(table[7, 0], np.float32(np.sin(7.0)), name="dim 0 has wavelength 2π")

# %% [markdown]
# ### PE(pos + k) is a linear function of PE(pos)
#
# Each (sin, cos) pair turns by the angle k·ω_i when the position moves by k,
# which is a 2×2 rotation. So a block-diagonal matrix M_k, the same for every
# position, maps PE(pos) to PE(pos + k): the "linear function" of §3.5. It
# also makes the dot product PE(p)·PE(q) depend only on p − q.

# %%
def rotation_for_offset(k, d_model):
    M = np.zeros((d_model, d_model))
    for j in range(d_model // 2):
        a = k / 10000 ** (2 * j / d_model)
        c, s = np.cos(a), np.sin(a)
        # sin(x+a) = sin x cos a + cos x sin a;  cos(x+a) = cos x cos a − sin x sin a
        M[2 * j:2 * j + 2, 2 * j:2 * j + 2] = [[c, s], [-s, c]]
    return M


k_off = 9
M = rotation_for_offset(k_off, d_model)

# %% CHECK
mt.assert_close(pe[:-k_off] @ M.T, pe[k_off:], name=f"PE(pos+{k_off}) = M PE(pos) for every pos")
dots = pe @ pe.T
assert np.allclose(dots[10, 13], dots[50, 53]) and np.allclose(dots[10, 13], dots[13, 10]), \
    "PE(p)·PE(q) depends only on |p − q|"
mt.assert_close((pe ** 2).sum(axis=1), np.full(max_len, d_model / 2), name="‖PE(pos)‖² = d_model/2")

# %% [markdown]
# ## 4. The path that trains
#
# Every config trains on the Numba backend, where the embedding's backward is a
# compiled scatter-add kernel (`embedding_backward`: each id's row of the
# gradient adds up every position that looked it up) and the FFN's two layers
# are fused `Linear` Functions. We hold the library's modules, their weights
# swapped for our float64 leaves, to our own versions: a lookup written as a
# one-hot matrix product (so autograd's gradient of E is the one-hot's
# transpose times the upstream gradient, repeated ids summed), the tied logits
# x Eᵀ, and Eq. (2) from Tensor ops. Values and gradients, on the NumPy
# reference kernels and the Numba kernels (and CUDA's on a GPU).

# %%
ids_path = rng.integers(0, V, size=(B, T))
ids_path[1, :3] = ids_path[0, 0]                                    # repeated ids: their gradients must add up
one_hot = np.eye(V)[ids_path]                                       # (B, T, V)
embed_inputs = {"E": E.astype(np.float64)}
logits_inputs = {"E": E.astype(np.float64), "x": rng.standard_normal((B, T, D))}
ffn_inputs = {"x": rng.standard_normal((B, T, D)), "W1": rng.standard_normal((D, F)), "b1": rng.standard_normal(F),
              "W2": rng.standard_normal((F, D)), "b2": rng.standard_normal(D)}
r_embed, r_logits = rng.standard_normal((B, T, D)), rng.standard_normal((B, T, V))


def library_embeddings(E_leaf):
    """The library's tied Embeddings with our leaf as its table (it lives on the leaf's backend)."""
    module = Embeddings(vocab_size=V, d_model=D, tie=True, rng=np.random.default_rng(0))
    module.shared.weight = E_leaf
    return module


def library_ffn(x, w1, b1, w2, b2):
    module = PositionwiseFeedForward(d_model=D, d_ff=F, rng=np.random.default_rng(0))
    module.w_1.weight, module.w_1.bias, module.w_2.weight, module.w_2.bias = w1, b1, w2, b2
    return module(x)


# %% CHECK
hold_training_path("the tied source embedding E[ids]·√d_model", lambda E_: library_embeddings(E_).source(ids_path),
                   embed_inputs,
                   own_answer(lambda E_: mt.tensor(one_hot, dtype="float64") @ E_ * np.sqrt(D), embed_inputs, r_embed),
                   r_embed)
hold_training_path("the tied logits x Eᵀ", lambda E_, h: library_embeddings(E_).logits(h), logits_inputs,
                   own_answer(lambda E_, h: h @ E_.T, logits_inputs, r_logits), r_logits)
hold_training_path("the FFN, Eq. (2)", library_ffn, ffn_inputs,
                   own_answer(lambda x_, w1, b1, w2, b2: (x_ @ w1 + b1).relu() @ w2 + b2, ffn_inputs, r_embed), r_embed)

# %% [markdown]
# ## Summary
# - Eq. (2): two linear maps with a ReLU, applied to every position separately (d_model → d_ff → d_model).
# - One shared (V, D) matrix embeds source and target (×√d_model) and produces the logits (x Eᵀ); its gradient sums all three uses.
# - Sinusoids: PE(0) = (0, 1, 0, 1, ...); a fixed offset is a fixed rotation, so relative positions are linear to read.
#
# ## Exercises
# 1. **Predict, then run.** Which positions have the same encoding in dimension pair i = 0
#    (wavelength 2π)? Is there any pair of positions below 10,000 with identical *full* encodings?
#    (Answer key: `PREDICT` in `chapters/solutions/07_feed_forward_embeddings_positions.py`.)
# 2. tensor2tensor (the paper's code) lays the same sinusoids out **concatenated**, all sines then all
#    cosines: [sin(pos·ω_0) … sin(pos·ω_{D/2−1}) | cos(pos·ω_0) … cos(pos·ω_{D/2−1})], not interleaved.
#    Write `concat_permutation(d_model)`: the index array `perm` with `concatenated = table[:, perm]` for the
#    paper's `table`. Then explain why a model cannot tell the two layouts apart (the check shows one
#    identity you need). `check_concat_permutation(fn)` tests it.
# 3. Relative positions: show that PE(p)·PE(p + k) does not depend on p, and write `pe_dot(k, d_model)`,
#    its closed form as a sum over the D/2 frequencies. `check_pe_dot(fn)` compares it with the table.

# %%
def check_concat_permutation(concat_permutation) -> None:
    """Exercise 2: the permuted table is the concatenated layout, and a linear layer cannot tell them apart, for
    sizes drawn afresh each call; the permutation is read off the layouts, not found by matching table columns."""
    check_rng = np.random.default_rng()
    for L, Dm in [(50, 8)] + [(int(check_rng.integers(20, 80)), 2 * int(check_rng.integers(2, 40)))]:
        with calls_to(sinusoid_table, PositionalEncoding.forward) as calls:
            perm = np.asarray(concat_permutation(Dm))
        assert not calls, "work the permutation out from the two layouts: the answer read the library's table"
        table = sinusoid_table(L, Dm).astype(np.float64)
        omega = 10000.0 ** (-np.arange(0, Dm, 2) / Dm)                          # the paper's frequencies
        angle = np.arange(L)[:, None] * omega[None, :]
        mt.assert_close(table[:, perm], np.concatenate([np.sin(angle), np.cos(angle)], axis=1),
                        name=f"concatenated layout, D = {Dm}", atol=1e-6)
        W = check_rng.standard_normal((Dm, 5))
        # a first layer W reading the concatenated layout = the layer W[argsort(perm)] reading the paper's
        mt.assert_close(table[:, perm] @ W, table @ W[np.argsort(perm)], name="same products, rows of W permuted")


def check_pe_dot(pe_dot) -> None:
    """Exercise 3: against dot products of table rows, for positions p, offsets k (also negative) and sizes drawn
    afresh each call; a closed form, not a dot product of the library's table rows."""
    check_rng = np.random.default_rng()
    for Dm in (8, 2 * int(check_rng.integers(5, 40))):
        table = sinusoid_table(400, Dm).astype(np.float64)
        for k in [0] + [int(k) for k in check_rng.integers(-60, 60, size=4)]:
            with calls_to(sinusoid_table, PositionalEncoding.forward) as calls:
                got = float(pe_dot(k, Dm))
            assert not calls, "write PE(p)·PE(p + k) as a sum over frequencies: the answer read the library's table"
            for p in check_rng.integers(60, 340, size=3):
                assert abs(got - table[p] @ table[p + k]) < 1e-4, f"D = {Dm}, p = {p}, k = {k}: {got:.5f}"


# %% CHECK the checks: a wrong answer must fail them
assert fails(check_concat_permutation, lambda Dm: np.arange(Dm)), "accepted the interleaved layout"
assert fails(check_concat_permutation, lambda Dm: np.concatenate([np.arange(1, Dm, 2), np.arange(0, Dm, 2)])), \
    "accepted cosines first"
assert fails(check_pe_dot, lambda k, Dm: Dm / 2 * np.cos(k)), "accepted one frequency for all pairs"


def _permutation_by_matching(Dm):                                   # the right permutation, by matching columns
    table, omega = sinusoid_table(50, Dm).astype(np.float64), 10000.0 ** (-np.arange(0, Dm, 2) / Dm)
    angle = np.arange(50)[:, None] * omega[None, :]
    wanted = np.concatenate([np.sin(angle), np.cos(angle)], axis=1)
    return np.array([int(np.argmin(np.abs(table - wanted[:, [j]]).sum(axis=0))) for j in range(Dm)])


assert fails(check_concat_permutation, _permutation_by_matching), "check_concat_permutation accepted column matching"
assert fails(check_pe_dot, lambda k, Dm: float(sinusoid_table(abs(k) + 1, Dm)[0] @ sinusoid_table(abs(k) + 1, Dm)[-1])), \
    "check_pe_dot accepted a dot product of the library's table rows"

# %%
finish("07_feed_forward_embeddings_positions", {check_concat_permutation: "concat_permutation", check_pe_dot: "pe_dot"})
