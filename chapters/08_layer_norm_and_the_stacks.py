# ---
# jupyter:
#   jupytext:
#     formats: py:percent
#     text_representation:
#       extension: .py
#       format_name: percent
# ---

# %% [markdown]
# # 08 · Layer normalisation, sub-layer connections, and the encoder and decoder stacks
#
# > The encoder is composed of a stack of N = 6 identical layers. Each layer has
# > two sub-layers. The first is a multi-head self-attention mechanism, and the
# > second is a simple, position-wise fully connected feed-forward network. We
# > employ a residual connection around each of the two sub-layers, followed by
# > layer normalization. That is, the output of each sub-layer is
# > LayerNorm(x + Sublayer(x)), where Sublayer(x) is the function implemented by
# > the sub-layer itself. (§3.1)
#
# > We apply dropout to the output of each sub-layer, before it is added to the
# > sub-layer input and normalized. (§5.4)
#
# Chapters 05-07 built the sub-layers: multi-head attention and the feed-forward
# network. This chapter builds what holds them together, from scratch: layer
# normalisation with a backward derived by hand, the sub-layer connection
# LayerNorm(x + Dropout(Sublayer(x))), the encoder and decoder layers, and the
# stacks of N layers. Each is checked against the library's version in
# `transformer/layers.py` (imported as `library`), which the rest of the book uses.
#
# Shapes: B batch, S source length, T target length, D = d_model, H heads.
#
# The library code this chapter builds:
# [`transformer/layers.py`](../transformer/layers.py),
# [`minitensor/kernels/layernorm_forward/numba_cpu.py`](../minitensor/kernels/layernorm_forward/numba_cpu.py).

# %%
import matplotlib.pyplot as plt
import numpy as np

import minitensor as mt
from _common import FAST, calls_to, fails, finish, hold_training_path, numba_cuda, one_cpu_thread, own_answer, show
from minitensor import Function, nn
from transformer import TransformerConfig
from transformer import layers as library
from transformer.attention import MultiHeadAttention
from transformer.feed_forward import PositionwiseFeedForward

THREADS = one_cpu_thread()
cuda, ON_GPU = numba_cuda()                   # numba.cuda: the GPU or its simulator (section 7), before any import
from minitensor.kernels.layernorm_forward import numba_cuda as layernorm_cuda  # noqa: E402
rng = np.random.default_rng(0)

# %% [markdown]
# ## 1. Layer normalisation, forward
#
# LayerNorm (Ba et al. 2016) normalises each position's D features on their own:
# subtract their mean μ, divide by √(σ² + ε) (σ² the biased variance, ε a small
# constant the paper does not give; we use 1e-6), then scale and shift by two
# learned vectors, γ (starts at 1) and β (starts at 0):
#
# $$y = \gamma \odot \frac{x - \mu}{\sqrt{\sigma^2 + \varepsilon}} + \beta \qquad \text{per row of } D \text{ features}$$
#
# Unlike batch normalisation it never mixes positions or sentences, so it works
# the same for one sentence or many, in training and at test time.

# %%
def layer_norm(x, gamma, beta, eps):
    """NumPy LayerNorm over the last axis (biased variance)."""
    mean = x.mean(axis=-1, keepdims=True)                          # (..., 1)
    var = ((x - mean) ** 2).mean(axis=-1, keepdims=True)           # (..., 1)
    return (x - mean) / np.sqrt(var + eps) * gamma + beta          # (..., D)


B, T, S, D = 2, 5, 6, 16
x = rng.standard_normal((B, T, D)) * 3 + 1
norm = nn.LayerNorm(D, eps=1e-6)
gamma, beta = rng.standard_normal(D), rng.standard_normal(D)
norm.load_state_dict({"gamma": gamma, "beta": beta})
x_hat = layer_norm(x, np.ones(D), np.zeros(D), 1e-6)

# %% CHECK
mt.assert_close(norm(mt.tensor(x, dtype="float64")), layer_norm(x, gamma, beta, 1e-6).astype(np.float32),
                name="nn.LayerNorm vs the formula", atol=1e-5)
mt.assert_close(x_hat.mean(axis=-1), np.zeros((B, T)), name="each normalised row has mean 0", atol=1e-12)
mt.assert_close(x_hat.var(axis=-1), np.ones((B, T)), name="each normalised row has variance 1", atol=1e-5)

# %% [markdown]
# ## 2. Layer normalisation, backward: a derivation
#
# Write r = 1/√(σ² + ε) and x̂ = (x − μ)·r, so y = γ ⊙ x̂ + β. Given the upstream
# gradient dy, the gradient with respect to x̂ is g = dy ⊙ γ; dγ = Σ dy ⊙ x̂ and
# dβ = Σ dy, summed over every position (γ and β are shared by all of them).
# The interesting part is dx: every x_i moves x̂_j three ways. For one row of D:
#
# $$\frac{\partial \mu}{\partial x_i} = \frac{1}{D}, \qquad \frac{\partial \sigma^2}{\partial x_i} = \frac{2}{D}(x_i - \mu) \quad \text{(the terms through } \mu \text{ sum to zero)}$$
# $$\frac{\partial r}{\partial x_i} = -\frac{1}{2} r^3 \frac{\partial \sigma^2}{\partial x_i} = -\frac{r^2 \hat{x}_i}{D}$$
# $$\frac{\partial \hat{x}_j}{\partial x_i} = r\left(\delta_{ij} - \frac{1}{D}\right) + (x_j - \mu)\frac{\partial r}{\partial x_i} = r\left(\delta_{ij} - \frac{1}{D} - \frac{\hat{x}_j \hat{x}_i}{D}\right)$$
#
# and summing g_j ∂x̂_j/∂x_i over j:
#
# $$dx = r \cdot \left(g - \mathrm{mean}(g) - \hat{x} \odot \mathrm{mean}(g \odot \hat{x})\right)$$
#
# directly through x̂, minus the share that went through the mean, minus the
# share that went through the variance. (Chapter 03's exercise 3 asks for this
# dx.) Written as a `Function` (chapter 02), forward saves x̂ and r, not x.

# %%
class LayerNormFunction(Function):
    """y = γ ⊙ x̂ + β with x̂ = (x − μ)/√(σ² + ε) over the last axis; backward by the derivation above."""

    @staticmethod
    def forward(ctx, x, gamma, beta, *, eps):
        xp = ctx.backend.xp
        mean = x.mean(axis=-1, keepdims=True)                      # (..., 1)
        r = 1.0 / xp.sqrt(((x - mean) ** 2).mean(axis=-1, keepdims=True) + eps)   # (..., 1)
        x_hat = (x - mean) * r                                     # (..., D)
        ctx.save_for_backward(x_hat, r, gamma)
        return x_hat * gamma + beta

    @staticmethod
    def backward(ctx, grad_out):
        x_hat, r, gamma = ctx.saved
        g = grad_out * gamma                                       # ∂L/∂x̂
        dx = r * (g - g.mean(axis=-1, keepdims=True) - x_hat * (g * x_hat).mean(axis=-1, keepdims=True))
        shared = tuple(range(grad_out.ndim - 1))                   # γ and β are used at every position
        return dx, (grad_out * x_hat).sum(axis=shared), grad_out.sum(axis=shared)


class LayerNorm(nn.Module):
    """Our LayerNorm module: γ and β named like nn.LayerNorm's, forward through LayerNormFunction."""

    def __init__(self, dim, eps=1e-6):
        super().__init__()
        self.eps = eps
        self.gamma = nn.Parameter(np.ones(dim, dtype=np.float32))
        self.beta = nn.Parameter(np.zeros(dim, dtype=np.float32))

    def forward(self, x):
        return LayerNormFunction.apply(x, self.gamma.astype(x.dtype), self.beta.astype(x.dtype), eps=self.eps)


leaves = [mt.tensor(a, requires_grad=True, dtype="float64") for a in (x[:, :2], gamma, beta)]
dy = rng.standard_normal((B, 2, D))
(LayerNormFunction.apply(*leaves, eps=1e-6) * dy).sum().backward()
lib_leaves = [mt.tensor(a, requires_grad=True, dtype="float64") for a in (x[:, :2], gamma, beta)]
(mt.functions.LayerNorm.apply(*lib_leaves, eps=1e-6) * dy).sum().backward()

# %% CHECK
assert mt.gradcheck(lambda a, g, b: LayerNormFunction.apply(a, g, b, eps=1e-6),
                    *[mt.tensor(a, requires_grad=True, dtype="float64") for a in (x[:, :2], gamma, beta)]), \
    "the derived LayerNorm backward disagrees with central differences"
for name, ours, theirs in zip(("dx", "dγ", "dβ"), leaves, lib_leaves):
    mt.assert_close(ours.grad, theirs.grad, name=f"LayerNorm {name}: derivation vs library kernel")

# %% [markdown]
# ## 3. The sub-layer connection: post-norm, and pre-norm as a contrast
#
# §3.1 and §5.4 together give the order: run the sub-layer, drop out its
# output, add the input back (the residual), normalise the sum:
#
#     post-norm (the paper):  LayerNorm(x + Dropout(Sublayer(x)))
#     pre-norm (a variant):   x + Dropout(Sublayer(LayerNorm(x)))
#
# Pre-norm (the Annotated Transformer and most later models use it) keeps an
# un-normalised "residual stream" running through the whole stack and needs one
# extra LayerNorm at the end of each stack; it trains deep stacks more easily.
# Post-norm normalises every sub-layer's output, so with fresh weights (γ = 1,
# β = 0) **every row it returns has mean 0 and variance 1**, whatever came in.
# That property is the check: it fails for the easy slip
# `x + LayerNorm(Dropout(Sublayer(x)))`, which still trains.
#
# A sub-layer here is any function (B, T, D) -> ((B, T, D), aux), where aux is
# what it wants to hand back (attention weights, or None for the FFN).
# `TransformerConfig` (transformer/config.py) is a frozen record of the paper's
# hyperparameters: N, d_model, d_ff, h, d_k, d_v, p_drop, norm, ...

# %%
class SublayerConnection(nn.Module):
    """Residual + dropout + LayerNorm around one sub-layer; config.norm = "post" (§3.1) or "pre"."""

    def __init__(self, config, rng):
        super().__init__()
        self.pre_norm = config.norm == "pre"
        self.norm = LayerNorm(config.d_model, eps=config.layernorm_eps)
        self.dropout = nn.Dropout(config.p_drop, rng=rng)          # chapter 04

    def forward(self, x, sublayer):
        if self.pre_norm:
            out, aux = sublayer(self.norm(x))
            return x + self.dropout(out), aux                      # pre-norm: the residual stream stays un-normalised
        out, aux = sublayer(x)
        return self.norm(x + self.dropout(out)), aux               # §3.1, §5.4: LayerNorm(x + Dropout(Sublayer(x)))


def assert_post_norm_output(connection) -> None:
    """Fresh post-norm connections return rows of mean 0 and variance 1, in training and evaluation."""
    check_rng = np.random.default_rng(1)
    x_big = mt.tensor(check_rng.standard_normal((2, 7, D)) * 5 + 3)           # far from normalised
    w = mt.tensor(check_rng.standard_normal((D, D)) / np.sqrt(D))
    for training in (True, False):
        connection.train(training)
        out, _ = connection(x_big, lambda y: (y @ w, None))
        rows = out.numpy().astype(np.float64)
        assert np.abs(rows.mean(axis=-1)).max() < 1e-4, \
            f"post-norm output rows must have mean 0, got up to {np.abs(rows.mean(axis=-1)).max():.3f}: " \
            f"is it x + LayerNorm(...) instead of LayerNorm(x + ...)?"
        assert np.abs(rows.var(axis=-1) - 1).max() < 1e-3, \
            f"post-norm output rows must have variance 1, got {rows.var(axis=-1).min():.3f}..{rows.var(axis=-1).max():.3f}"


config = TransformerConfig.tiny(vocab_size=20, N=2, d_model=D, d_ff=4 * D, h=4, p_drop=0.1)
pre_config = config.replace(norm="pre")
ours = SublayerConnection(config, np.random.default_rng(7))
theirs = library.SublayerConnection(config, np.random.default_rng(7))     # same seed: same dropout masks
ffn = PositionwiseFeedForward(D, 4 * D, rng)
xt = mt.tensor(x.astype(np.float32))
step = lambda y: (ffn(y), None)                                              # noqa: E731 - a sub-layer

# %% CHECK
assert_post_norm_output(SublayerConnection(config, np.random.default_rng(8)))
assert_post_norm_output(library.SublayerConnection(config, np.random.default_rng(8)))
for training in (True, False):
    ours.train(training)
    theirs.train(training)
    mt.assert_close(ours(xt, step)[0], theirs(xt, step)[0], name=f"post-norm connection (training={training})",
                    atol=1e-5)
mt.assert_close(SublayerConnection(pre_config, rng).eval()(xt, step)[0],
                library.SublayerConnection(pre_config, rng).eval()(xt, step)[0], name="pre-norm connection", atol=1e-5)
assert fails(assert_post_norm_output, SublayerConnection(pre_config, rng)), "pre-norm outputs are not normalised"

# %% [markdown]
# ## 4. The encoder layer
#
# Two sub-layers, each in its own connection: multi-head self-attention
# (chapter 06: queries, keys and values all come from x; padding keys masked),
# then the position-wise FFN (chapter 07). Attribute names follow the library's,
# so the library layer's weights load into ours and the outputs must agree.

# %%
class EncoderLayer(nn.Module):
    """§3.1: self-attention, then the FFN, each wrapped as LayerNorm(x + Dropout(Sublayer(x)))."""

    def __init__(self, config, rng):
        super().__init__()
        self.self_attn = MultiHeadAttention(config.d_model, config.h, config.d_k, config.d_v, rng)
        self.feed_forward = PositionwiseFeedForward(config.d_model, config.d_ff, rng)
        self.sublayers = nn.ModuleList([SublayerConnection(config, rng) for _ in range(2)])

    def forward(self, x, src_mask):
        """x (B, S, D), src_mask (B, 1, 1, S) -> (x (B, S, D), self-attention weights (B, H, S, S))."""
        x, weights = self.sublayers[0](x, lambda y: self.self_attn(y, None, src_mask))   # §3.2.3 self-attention
        x, _ = self.sublayers[1](x, lambda y: (self.feed_forward(y), None))              # §3.3 FFN
        return x, weights


def same_layer(ours, theirs, *inputs, outputs=1):
    """Load `theirs`' weights into `ours`; their outputs must agree in eval mode and, with equal dropout seeds, in training."""
    ours.load_state_dict(theirs.state_dict())
    for training in (False, True):
        ours.train(training)
        theirs.train(training)
        for module in (ours, theirs):                                # every Dropout draws from one fresh generator
            fresh = np.random.default_rng(11)
            for _, sub in module.named_modules():
                if isinstance(sub, nn.Dropout):
                    sub.rng = fresh
        got, expected = ours(*inputs), theirs(*inputs)
        for i in range(outputs):
            mt.assert_close(got[i], expected[i].numpy(), name=f"{type(ours).__name__} output {i} "
                                                               f"(training={training})", atol=1e-5)


src_mask = np.zeros((B, 1, 1, S), dtype=bool)
src_mask[0, ..., 4:] = True                                        # sentence 0: two padding keys
memory_in = mt.tensor(rng.standard_normal((B, S, D)).astype(np.float32))
encoder_layer = EncoderLayer(config, rng)

# %% CHECK
assert sorted(n for n, _ in encoder_layer.named_parameters()) == \
       sorted(n for n, _ in library.EncoderLayer(config, rng).named_parameters()), "same parameter names"
same_layer(encoder_layer, library.EncoderLayer(config, rng), memory_in, src_mask, outputs=2)

# %% [markdown]
# ## 5. The decoder layer
#
# > In addition to the two sub-layers in each encoder layer, the decoder inserts
# > a third sub-layer, which performs multi-head attention over the output of the
# > encoder stack. Similar to the encoder, we employ residual connections around
# > each of the sub-layers, followed by layer normalization. We also modify the
# > self-attention sub-layer in the decoder stack to prevent positions from
# > attending to subsequent positions. (§3.1)
#
# Three connections: masked self-attention (the causal mask of chapter 05, True
# above the diagonal), encoder-decoder attention (queries from the decoder, keys
# and values from the encoder's output, the *memory*, with the source padding
# mask), and the FFN. Chapter 12 adds a key/value cache for decoding; here every
# call sees the whole target prefix.

# %%
class DecoderLayer(nn.Module):
    """§3.1: masked self-attention, encoder-decoder attention over the memory, then the FFN."""

    def __init__(self, config, rng):
        super().__init__()
        self.self_attn = MultiHeadAttention(config.d_model, config.h, config.d_k, config.d_v, rng)
        self.cross_attn = MultiHeadAttention(config.d_model, config.h, config.d_k, config.d_v, rng)
        self.feed_forward = PositionwiseFeedForward(config.d_model, config.d_ff, rng)
        self.sublayers = nn.ModuleList([SublayerConnection(config, rng) for _ in range(3)])

    def forward(self, x, memory, src_mask, tgt_mask):
        """x (B, T, D), memory (B, S, D) -> (x (B, T, D), self weights (B, H, T, T), cross weights (B, H, T, S))."""
        x, self_w = self.sublayers[0](x, lambda y: self.self_attn(y, None, tgt_mask))        # §3.2.3 masked
        x, cross_w = self.sublayers[1](x, lambda y: self.cross_attn(y, memory, src_mask))    # §3.2.3 enc-dec
        x, _ = self.sublayers[2](x, lambda y: (self.feed_forward(y), None))
        return x, self_w, cross_w


causal = np.triu(np.ones((T, T), dtype=bool), k=1)[None, None]    # (1, 1, T, T): True = a later position
decoder_layer = DecoderLayer(config, rng)
target_in = mt.tensor(x.astype(np.float32))
out_a = decoder_layer.eval()(target_in, memory_in, src_mask, causal)[0].numpy()
changed = x.astype(np.float32).copy()
changed[:, 3] += 1.0                                               # change position 3 only
out_b = decoder_layer(mt.tensor(changed), memory_in, src_mask, causal)[0].numpy()

# %% CHECK
same_layer(decoder_layer, library.DecoderLayer(config, rng), target_in, memory_in, src_mask, causal, outputs=3)
assert np.array_equal(out_a[:, :3], out_b[:, :3]), "positions 0-2 must not see position 3 (causal mask)"
assert not np.allclose(out_a[:, 3:], out_b[:, 3:]), "positions 3 and later do see it"

# %% [markdown]
# ## 6. The stacks, and what pre-norm does to the residual stream
#
# An encoder is N encoder layers applied in turn (N = 6 in the paper); a decoder
# is N decoder layers that all read the same memory. Pre-norm stacks end with
# one more LayerNorm (the last layer's output is otherwise never normalised).
# Both also return every layer's attention weights, for plotting (chapter 15).
#
# The figure shows why the two orders behave so differently in deep stacks: the
# norm of each position's vector after every layer of a 12-layer encoder with
# fresh weights. Post-norm resets it to √D at every sub-layer; pre-norm adds each
# sub-layer's output onto a stream that only grows.

# %%
class Encoder(nn.Module):
    """§3.1: N identical EncoderLayers (plus a final LayerNorm for pre-norm)."""

    def __init__(self, config, rng):
        super().__init__()
        self.layers = nn.ModuleList([EncoderLayer(config, rng) for _ in range(config.N)])
        if config.norm == "pre":
            self.norm = LayerNorm(config.d_model, eps=config.layernorm_eps)

    def forward(self, x, src_mask):
        maps = []
        for layer in self.layers:
            x, weights = layer(x, src_mask)
            maps.append(weights)
        return (self.norm(x) if "norm" in self._modules else x), maps


class Decoder(nn.Module):
    """§3.1: N identical DecoderLayers over one memory (plus a final LayerNorm for pre-norm)."""

    def __init__(self, config, rng):
        super().__init__()
        self.layers = nn.ModuleList([DecoderLayer(config, rng) for _ in range(config.N)])
        if config.norm == "pre":
            self.norm = LayerNorm(config.d_model, eps=config.layernorm_eps)

    def forward(self, x, memory, src_mask, tgt_mask):
        self_maps, cross_maps = [], []
        for layer in self.layers:
            x, self_w, cross_w = layer(x, memory, src_mask, tgt_mask)
            self_maps.append(self_w)
            cross_maps.append(cross_w)
        return (self.norm(x) if "norm" in self._modules else x), self_maps, cross_maps


def stream_norms(norm_kind, n_layers):
    """Mean ‖x‖ per position after each of n_layers fresh encoder layers (eval mode)."""
    deep = Encoder(config.replace(N=n_layers, norm=norm_kind), np.random.default_rng(3)).eval()
    h, norms = mt.tensor(x.astype(np.float32)), [float(np.linalg.norm(x, axis=-1).mean())]
    for layer in deep.layers:
        h, _ = layer(h, None)
        norms.append(float(np.linalg.norm(h.numpy(), axis=-1).mean()))
    return norms


n_deep = 6 if FAST else 12
post_norms, pre_norms = stream_norms("post", n_deep), stream_norms("pre", n_deep)
fig, ax = plt.subplots(figsize=(6, 3.5))
ax.plot(post_norms, "o-", label="post-norm: LayerNorm(x + Sublayer(x))")
ax.plot(pre_norms, "s-", label="pre-norm: x + Sublayer(LayerNorm(x))")
ax.axhline(np.sqrt(D), color="gray", ls="--", label="√D")
ax.set_xlabel("encoder layers applied")
ax.set_ylabel("mean ‖x‖ per position")
ax.legend()
show(fig, "08_residual_stream_norm")
print("post-norm:", [f"{v:.1f}" for v in post_norms], "\npre-norm: ", [f"{v:.1f}" for v in pre_norms])

# %% CHECK
for kind in ("post", "pre"):
    kind_config = config.replace(norm=kind)
    same_layer(Encoder(kind_config, rng), library.Encoder(kind_config, rng), memory_in, src_mask, outputs=1)
    same_layer(Decoder(kind_config, rng), library.Decoder(kind_config, rng), target_in, memory_in, src_mask, causal,
               outputs=1)
assert np.allclose(post_norms[1:], np.sqrt(D), rtol=1e-3), f"post-norm keeps ‖x‖ = √D after every layer: {post_norms}"
assert pre_norms[-1] > pre_norms[1], f"pre-norm's residual stream grows with depth: {pre_norms}"

# %% [markdown]
# The stacks' gradients must agree too: the same random cotangent through ours
# and the library's, with the same weights, gives the same gradient for every
# parameter (chapter 03's habit of a random r).

# %%
ours_stack, lib_stack = Encoder(config, rng), library.Encoder(config, rng)
ours_stack.load_state_dict(lib_stack.state_dict())
cotangent = rng.standard_normal((B, S, D)).astype(np.float32)
for stack in (ours_stack.eval(), lib_stack.eval()):
    (stack(memory_in, src_mask)[0] * mt.tensor(cotangent)).sum().backward()

# %% CHECK
lib_grads = dict(lib_stack.named_parameters())
for name, p in ours_stack.named_parameters():
    mt.assert_close(p.grad, lib_grads[name].grad, name=f"gradient of {name}", atol=1e-4, rtol=1e-4)

# %% [markdown]
# ## 7. The path that trains
#
# Every config trains with `impl = "fused"` on the Numba backend. There
# LayerNorm is one Function with compiled forward and backward kernels, and the
# post-norm connection runs as **one** Function, `DropoutAddLayerNorm`:
# dropout, the residual add and LayerNorm in a single op each way, its backward
# written by hand. Sections 1-6 held the op-by-op library (`impl="composed"`)
# to our code; a slip in the fused op (say `x + LayerNorm(Dropout(s))`) would
# pass all of them and still train every real run wrong. So we hold the fused
# path to our `LayerNormFunction` and our `SublayerConnection`, values and
# gradients in float64, dropout on (the same seed, so the same mask): on the
# NumPy reference kernels, the Numba kernels, and the `numba.cuda` LayerNorm
# kernel that chapter 18 takes apart (on the CUDA simulator without a GPU).

# %%
fused_config = config.replace(impl="fused", p_drop=0.3)
ln_inputs = {"x": x[:, :2] * 2.0, "gamma": gamma, "beta": beta}      # 4 rows: the simulator runs 64 threads a row
connection_inputs = {"x": rng.standard_normal((B, 3, D)) * 3, "w": rng.standard_normal((D, D)) / 4,
                     "b": rng.standard_normal(D), "gamma": gamma, "beta": beta}
r_ln, r_connection = rng.standard_normal((B, 2, D)), rng.standard_normal((B, 3, D))


def with_norm(connection, gamma_, beta_):
    """`connection` (fresh: dropout draws from its own rng) with our leaves as its LayerNorm's γ and β."""
    connection.norm.gamma, connection.norm.beta = gamma_, beta_
    return connection


def connection_ours(x_, w, b, gamma_, beta_):
    """The sub-layer is a Linear, xW + b, as the last one of attention (W^O) and of the FFN (W₂) is."""
    return with_norm(SublayerConnection(fused_config, np.random.default_rng(9)), gamma_, beta_)(
        x_, lambda y: (y @ w + b, None))[0]


def connection_library(x_, w, b, gamma_, beta_):
    """Under impl="fused" the library's stacks run time-major (tokens (T, B, D), `transformer/model.py`):
    the connection takes the batch transposed, and draws its mask as the (B, T, D) layout would. It is
    handed the sub-layer's last Linear, built to leave its bias out (as the fused stacks build W^O and W₂,
    `folds_output_bias`), and adds that bias in its one op."""
    output = nn.Linear(D, D)
    output.weight, output.bias = w, b
    output.add_bias = not library.folds_output_bias(fused_config)
    connection = with_norm(library.SublayerConnection(fused_config, np.random.default_rng(9), output), gamma_, beta_)
    return connection(x_.transpose(0, 1), lambda y: (output(y), None))[0].transpose(0, 1)


cuda_path = "the numba.cuda kernel (" + ("GPU" if ON_GPU else "CUDA simulator") + ")"

# %% CHECK
hold_training_path("LayerNorm", lambda x_, g, b: mt.functions.LayerNorm.apply(x_, g, b, eps=1e-6), ln_inputs,
                   own_answer(lambda x_, g, b: LayerNormFunction.apply(x_, g, b, eps=1e-6), ln_inputs, r_ln), r_ln,
                   kernels={cuda_path: lambda x_, g, b: layernorm_cuda.layernorm_forward(x_, g, b, 1e-6)[0]})
hold_training_path("the post-norm sub-layer connection (fused DropoutAddLayerNorm, p_drop = 0.3, the output bias "
                   "folded in)", connection_library,
                   connection_inputs, own_answer(connection_ours, connection_inputs, r_connection), r_connection,
                   backends=("numpy", "numba"))            # a GPU draws its own dropout mask (tests/minitensor/kernels hold it)

# %% [markdown]
# ## Summary
# - LayerNorm normalises each position over its D features; its backward is r·(g − mean(g) − x̂·mean(g⊙x̂)): direct, through the mean, through the variance.
# - The paper's sub-layer connection is LayerNorm(x + Dropout(Sublayer(x))): every output row is normalised, which is how a test tells it from x + LayerNorm(...).
# - An encoder layer is self-attention + FFN; a decoder layer adds masked self-attention and encoder-decoder attention; a stack is N of them.
#
# ## Exercises
# 1. **Predict, then run.** Feed inputs of scale 100 (`x * 100`) to the 6-layer stacks of section 6. What is
#    the mean ‖x‖ per position after the last post-norm layer? After the last pre-norm layer (before its
#    final LayerNorm)? Change `stream_norms` to check. (Answer key: `PREDICT` in
#    `chapters/solutions/08_layer_norm_and_the_stacks.py`.)
# 2. RMSNorm (Zhang & Sennrich 2019) drops the mean: y = γ ⊙ x / √(mean(x²) + ε). Derive its backward the way
#    section 2 did and write `rms_norm_backward(dy, x, gamma, eps)` returning dx. `check_rms_norm_backward(fn)`
#    compares it with autograd through an RMSNorm built from Tensor ops.
# 3. **Find the bug.** Write `is_post_norm(connection, d_model)`: given a fresh sub-layer connection (γ = 1,
#    β = 0, dropout off, called as `connection(x, sublayer) -> (out, aux)` on (B, T, d_model) Tensors),
#    return True only if it computes
#    LayerNorm(x + Dropout(Sublayer(x))); it must say False for x + LayerNorm(Dropout(Sublayer(x))), for
#    pre-norm, and for LayerNorm(Sublayer(x)) without the residual. `check_is_post_norm(fn)` tests it.

# %%
def _rms_norm_autograd(x, gamma, eps):
    """RMSNorm from Tensor ops: autograd gives its backward (the reference for exercise 2)."""
    return x / ((x * x).mean(axis=-1, keepdims=True) + eps).sqrt() * gamma


def check_rms_norm_backward(rms_norm_backward) -> None:
    """Exercise 2: dx against autograd for random inputs and a random cotangent, drawn afresh each call; the
    answer is derived by hand, so it may not run autograd itself."""
    check_rng = np.random.default_rng()
    rows, Dc = (int(n) for n in check_rng.integers(2, 10, size=2))
    xs, gs, dys = check_rng.standard_normal((rows, Dc)) * 2, check_rng.standard_normal(Dc), \
        check_rng.standard_normal((rows, Dc))
    with calls_to(mt.Tensor.backward) as calls:
        got = np.asarray(rms_norm_backward(dys, xs, gs, 1e-5), dtype=np.float64)
    assert not calls, "derive RMSNorm's dx by hand: the answer ran autograd (Tensor.backward)"
    leaf = mt.tensor(xs, requires_grad=True, dtype="float64")
    (_rms_norm_autograd(leaf, mt.tensor(gs, dtype="float64"), 1e-5) * dys).sum().backward()
    mt.assert_close(got, leaf.grad, name="RMSNorm dx")


def _connection(kind):
    """A fresh D-wide connection of a given kind (the right one and three classic slips), dropout off."""
    norm_ = LayerNorm(D)
    forms = {
        "post": lambda x, out: norm_(x + out),
        "x + LayerNorm(sublayer)": lambda x, out: x + norm_(out),
        "no residual": lambda x, out: norm_(out),
    }

    def connection(x, sublayer):
        if kind == "pre":
            out, aux = sublayer(norm_(x))
            return x + out, aux
        out, aux = sublayer(x)
        return forms[kind](x, out), aux
    return connection


def check_is_post_norm(is_post_norm) -> None:
    """Exercise 3: True for the paper's order only."""
    assert is_post_norm(_connection("post"), D), "LayerNorm(x + Sublayer(x)) is post-norm"
    for kind in ("x + LayerNorm(sublayer)", "pre", "no residual"):
        assert not is_post_norm(_connection(kind), D), f"{kind} is not the paper's sub-layer connection"


# %% CHECK the checks: a wrong answer must fail them
def _rms_backward_as_layernorm(dy, xs, gs, eps):                  # reuses LayerNorm's dx: the mean term is wrong here
    r = 1 / np.sqrt(xs.var(axis=-1, keepdims=True) + eps)
    xh, g = (xs - xs.mean(axis=-1, keepdims=True)) * r, dy * gs
    return r * (g - g.mean(axis=-1, keepdims=True) - xh * (g * xh).mean(axis=-1, keepdims=True))


def _only_checks_normalised(connection, d_model):                 # misses "no residual"
    x_test = mt.tensor(np.random.default_rng(0).standard_normal((2, 3, d_model)) * 4)
    out, _ = connection(x_test, lambda y: (y * 2.0, None))
    return bool(np.allclose(out.numpy().mean(axis=-1), 0, atol=1e-4))


assert fails(check_rms_norm_backward, _rms_backward_as_layernorm), "check_rms_norm_backward accepted LayerNorm's dx"


def _rms_backward_by_autograd(dy, x, gamma, eps):                   # the right numbers, by autograd
    leaf = mt.tensor(x, requires_grad=True, dtype="float64")
    (_rms_norm_autograd(leaf, mt.tensor(gamma, dtype="float64"), eps) * dy).sum().backward()
    return leaf.grad


assert fails(check_rms_norm_backward, _rms_backward_by_autograd), "check_rms_norm_backward accepted autograd"
assert fails(check_is_post_norm, _only_checks_normalised), "check_is_post_norm accepted a test that ignores the residual"

# %%
finish("08_layer_norm_and_the_stacks", {check_rms_norm_backward: "rms_norm_backward", check_is_post_norm: "is_post_norm"})
