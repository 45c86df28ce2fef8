# ---
# jupyter:
#   jupytext:
#     formats: py:percent
#     text_representation:
#       extension: .py
#       format_name: percent
# ---

# %% [markdown]
# # 08 · Encoder, decoder and masks (Figure 1)
#
# > "The encoder is composed of a stack of N = 6 identical layers. Each layer
# > has two sub-layers. The first is a multi-head self-attention mechanism, and
# > the second is a simple, position-wise fully connected feed-forward network.
# > We employ a residual connection around each of the two sub-layers, followed
# > by layer normalization. That is, the output of each sub-layer is
# > LayerNorm(x + Sublayer(x)) ... The decoder ... inserts a third sub-layer,
# > which performs multi-head attention over the output of the encoder stack ...
# > We also modify the self-attention sub-layer in the decoder stack to prevent
# > positions from attending to subsequent positions. This masking, combined
# > with fact that the output embeddings are offset by one position, ensures
# > that the predictions for position i can depend only on the known outputs at
# > positions less than i." (§3.1)
#
# We assemble Figure 1 from the library's parts, check it equals
# `transformer.Transformer`, test the masks directly, and train it on a copy
# task until **greedy decoding** is right. Then we break the causal mask on
# purpose and watch teacher-forced accuracy stay perfect while greedy decoding
# falls apart: the reason teacher-forced accuracy alone proves nothing.
#
# Shapes: B batch, S source length, T target length, D = d_model, H heads, V vocab.

# %%
import contextlib
import sys

import numpy as np

import minitensor as mt
from minitensor import nn, optim
from train.threads import cpu_threads
from transformer import LabelSmoothingLoss, Transformer, TransformerConfig, greedy_decode
from transformer.embedding import Embeddings
from transformer.layers import Decoder, Encoder
from transformer.masks import padding_mask, subsequent_mask
from transformer.positional import PositionalEncoding

FAST = "--fast" in sys.argv
CHECK_SOLUTIONS = "--check-solutions" in sys.argv
THREADS = contextlib.ExitStack()       # held until the script ends
THREADS.enter_context(cpu_threads(1))  # tiny matrices: extra BLAS/Numba threads only add overhead
PAD, BOS, EOS = 0, 2, 3

# %% [markdown]
# ## 1. The two masks
#
# Both are boolean, True = blocked, shaped to broadcast against the scores
# (B, H, T_query, T_key) (chapter 01):
#
# - **padding**: (B, 1, 1, S), no query may attend to a padding key;
# - **subsequent** (causal): (1, 1, T, T), query i may see keys 0..i only:
#   "masking out (setting to −∞) all values in the input of the softmax which
#   correspond to illegal connections" (§3.2.3).

# %%
src_example = np.array([[7, 8, 9, PAD], [7, 8, 9, 10]])
pm = padding_mask(src_example, PAD)
sm = subsequent_mask(4)
print(sm[0, 0].astype(int))

# %% CHECK
assert pm.shape == (2, 1, 1, 4) and pm[0, 0, 0].tolist() == [False, False, False, True]
assert sm.shape == (1, 1, 4, 4)
assert np.array_equal(sm[0, 0], np.triu(np.ones((4, 4), dtype=bool), k=1)), "causal = strictly upper triangle"

# %% [markdown]
# ## 2. Figure 1 from parts
#
# Source tokens are embedded (×√d_model, §3.4), get positions added (§3.5) and
# dropout (§5.4), and run through N encoder layers: the *memory*. The target,
# shifted right by one (BOS y₁ … y_{T−1}, §3.1), goes the same way into N
# decoder layers that attend to themselves (masked) and to the memory; the
# shared embedding matrix turns the result into logits. `Seq2Seq` is that
# sentence in code, with the decoder's self-attention mask as an explicit
# argument. Given the library model's weights, it must produce the same logits.

# %%
class Seq2Seq(nn.Module):
    """Figure 1 with the target mask as a parameter (attribute names match transformer.Transformer)."""

    def __init__(self, config, rng):
        super().__init__()
        self.config = config
        self.embeddings = Embeddings(config.vocab_size, config.d_model, config.tie_embeddings, rng)
        self.src_positions = PositionalEncoding(config.d_model, config.max_len, config.positional, rng)
        self.tgt_positions = PositionalEncoding(config.d_model, config.max_len, config.positional, rng)
        self.dropout = nn.Dropout(config.p_drop, rng=rng)
        self.encoder = Encoder(config, rng)
        self.decoder = Decoder(config, rng)

    def forward(self, src, tgt_in, tgt_mask="causal"):
        src_mask = padding_mask(src, self.config.pad_id)                           # (B, 1, 1, S)
        x = self.dropout(self.src_positions(self.embeddings.source(src)))          # (B, S, D)
        memory, _ = self.encoder(x, src_mask)                                      # (B, S, D)
        if isinstance(tgt_mask, str):
            tgt_mask = subsequent_mask(tgt_in.shape[1])                           # (1, 1, T, T)
        y = self.dropout(self.tgt_positions(self.embeddings.target(tgt_in)))       # (B, T, D)
        y, _, _ = self.decoder(y, memory, src_mask, tgt_mask)                      # (B, T, D)
        return self.embeddings.logits(y)                                           # (B, T, V)


V, L = 14, 8                                      # vocabulary (4 specials + 10 symbols), longest sequence
config = TransformerConfig.tiny(vocab_size=V, N=2, d_model=32, d_ff=64, h=4, p_drop=0.0, eps_ls=0.0, max_len=32)
library_model = Transformer(config, np.random.default_rng(0))
ours = Seq2Seq(config, np.random.default_rng(1))
ours.load_state_dict(library_model.state_dict())
check_rng = np.random.default_rng(2)
src = check_rng.integers(4, V, size=(3, 6))
tgt_in = np.concatenate([np.full((3, 1), BOS), check_rng.integers(4, V, size=(3, 5))], axis=1)

# %% CHECK
assert sorted(n for n, _ in ours.named_parameters()) == sorted(n for n, _ in library_model.named_parameters())
mt.assert_close(ours(src, tgt_in), library_model(src, tgt_in), name="Figure 1 from parts vs Transformer", atol=1e-5)

# %% [markdown]
# ## 3. Testing the masks through the whole model
#
# Two properties that must hold for *any* weights, so they can be tested on an
# untrained model:
#
# - **no leak from the future**: changing target token j changes no logits at
#   positions before j;
# - **padding is invisible**: appending padding to a source sentence changes
#   no logits.

# %%
def causal_leak(forward, src, tgt_in, j):
    """Largest change of the logits at positions < j when target token j changes."""
    changed = tgt_in.copy()
    changed[:, j] = 4 + (changed[:, j] - 4 + 1) % (V - 4)          # a different real token
    return float(np.abs(forward(src, changed).numpy()[:, :j] - forward(src, tgt_in).numpy()[:, :j]).max())


padded_src = np.concatenate([src, np.full((3, 4), PAD)], axis=1)

# %% CHECK
for j in range(1, tgt_in.shape[1]):
    assert causal_leak(library_model, src, tgt_in, j) == 0.0, f"position {j} leaks into earlier positions"
assert causal_leak(lambda s, t: ours(s, t, tgt_mask=None), src, tgt_in, 3) > 1e-3, \
    "without the causal mask the test must detect the leak"
mt.assert_close(library_model(padded_src, tgt_in), library_model(src, tgt_in), name="padding invisible", atol=1e-5)

# %% [markdown]
# ## 4. The copy task
#
# The source is a random sequence of symbols; the target is the same sequence.
# Easy for attention (look at the source position you are at) and a sharp
# sanity check of the whole pipeline: if a Transformer cannot learn to copy,
# something is broken. The decoder input is the target shifted right
# (BOS y₁ … y_n); the labels are y₁ … y_n EOS (§3.1, "offset by one position").

# %%
def copy_batch(n, rng):
    """src (n, L), tgt_in (n, L+1), tgt_out (n, L+1), right-padded with PAD."""
    lengths = rng.integers(3, L + 1, size=n)
    src, tgt_in, tgt_out = (np.zeros((n, L + extra), dtype=np.int64) for extra in (0, 1, 1))
    for row, length in enumerate(lengths):
        seq = rng.integers(4, V, size=length)
        src[row, :length] = seq
        tgt_in[row, 0], tgt_in[row, 1:length + 1] = BOS, seq       # BOS y1 .. yn
        tgt_out[row, :length], tgt_out[row, length] = seq, EOS     # y1 .. yn EOS
    return src, tgt_in, tgt_out


def teacher_forced_accuracy(forward, src, tgt_in, tgt_out):
    with mt.no_grad():
        predicted = forward(src, tgt_in).numpy().argmax(-1)        # (B, T) given the true prefix
    real = tgt_out != PAD
    return float((predicted == tgt_out)[real].mean())


def greedy_exact_match(hypotheses, src):
    return float(np.mean([hyp == [t for t in row if t != PAD] for hyp, row in zip(hypotheses, src)]))


def train_copy(forward, params, max_steps, val, rng, target=0.99, greedy=None):
    """Adam + Noam (§5.3); stops early once greedy (or teacher-forced) accuracy reaches `target`."""
    opt = optim.Adam(params, lr=optim.NoamSchedule(d_model=32, warmup=100, factor=0.7))
    loss_fn = LabelSmoothingLoss(eps_ls=0.0, pad_id=PAD)
    for step in range(1, max_steps + 1):
        s, ti, to = copy_batch(64, rng)
        opt.zero_grad()
        loss_fn(forward(s, ti), to).loss.backward()
        opt.step()
        if step % 25 == 0 and step >= 100:
            score = greedy(val[0]) if greedy else teacher_forced_accuracy(forward, *val)
            if score >= target:
                break
    return step


val = copy_batch(200, np.random.default_rng(99))
max_steps = 800 if FAST else 2000
library_model.train()
steps = train_copy(library_model, library_model.named_parameters(), max_steps, val, np.random.default_rng(3),
                   greedy=lambda s: greedy_exact_match(greedy_decode(library_model, s, max_len_b=5), s))
library_model.eval()
tf_acc = teacher_forced_accuracy(library_model, *val)
greedy_acc = greedy_exact_match(greedy_decode(library_model, val[0], max_len_b=5), val[0])
print(f"correct mask: {steps} steps, teacher-forced token accuracy {tf_acc:.3f}, greedy exact match {greedy_acc:.3f}")

# %% CHECK
assert greedy_acc >= 0.97, f"greedy decoding must copy (almost) every held-out sequence, got {greedy_acc:.3f}"
assert tf_acc >= 0.99, f"teacher-forced accuracy {tf_acc:.3f}"

# %% [markdown]
# ### Greedy decoding from scratch
#
# `greedy_decode` keeps a cache of past keys and values so each step costs
# one position. The definition needs none of that: run the decoder on the
# prefix so far, take the argmax of the last position, append, repeat until
# EOS. Both must produce the same outputs.

# %%
def greedy_from_scratch(forward, src, max_new):
    ys = np.full((src.shape[0], 1), BOS)                            # (B, 1)
    with mt.no_grad():
        for _ in range(max_new):
            next_token = forward(src, ys).numpy()[:, -1].argmax(-1)   # (B,) most probable next token
            ys = np.concatenate([ys, next_token[:, None]], axis=1)   # (B, t) -> (B, t+1)
    outputs = []
    for row in ys[:, 1:].tolist():
        outputs.append(row[:row.index(EOS)] if EOS in row else row)
    return outputs


# %% CHECK
some = val[0][:40]
assert greedy_from_scratch(library_model, some, L + 1) == greedy_decode(library_model, some, max_len_b=5), \
    "cached greedy_decode must equal greedy decoding by recomputation"

# %% [markdown]
# ## 5. A leaky mask looks like success under teacher forcing
#
# Now train the same architecture **without** the causal mask. Under teacher
# forcing the decoder input at position i+1 *is* the label of position i, so
# the model learns to read the answer from the future and teacher-forced
# accuracy goes to ~100%, faster than with the right mask. At inference time
# the future does not exist yet, and greedy decoding fails.

# %%
leaky = Seq2Seq(config, np.random.default_rng(5))
leaky_forward = lambda s, t: leaky(s, t, tgt_mask=None)             # noqa: E731 - the bug, on purpose
leaky_steps = train_copy(leaky_forward, leaky.named_parameters(), 300 if FAST else 800, val,
                         np.random.default_rng(6), target=0.99)
leaky.eval()
leaky_tf = teacher_forced_accuracy(leaky_forward, *val)
leaky_greedy = greedy_exact_match(greedy_from_scratch(leaky_forward, val[0], L + 1), val[0])
print(f"leaky mask:   {leaky_steps} steps, teacher-forced token accuracy {leaky_tf:.3f}, "
      f"greedy exact match {leaky_greedy:.3f}")

# %% CHECK
assert leaky_tf >= 0.95, f"the leaky model should look great under teacher forcing, got {leaky_tf:.3f}"
assert leaky_greedy <= 0.2, f"...and fail at greedy decoding, got {leaky_greedy:.3f}"

# %% [markdown]
# ## Summary
# - Figure 1 = embeddings (×√d_model) + positions, N encoder layers, N decoder layers with causal self-attention and encoder-decoder attention, tied output projection.
# - Test masks through the model: later target tokens must not move earlier logits; source padding must not move anything.
# - Judge a model by greedy (or beam) decoding: a leaky causal mask scores ~100% under teacher forcing and fails when decoding.
#
# ## Exercises
# 1. **Predict, then run.** With the leaky model, what does greedy decoding emit at the first step,
#    when the decoder sees only BOS? Print `greedy_from_scratch(leaky_forward, val[0][:5], 3)`.
# 2. Write `causal_mask(T)`: bool (T, T), True where key j > query i. `check_causal_mask(fn)` tests it,
#    including inside a model.
# 3. Write `shift_right(tgt, bos, eos, pad)`: from right-padded targets (B, n) build `(tgt_in, tgt_out)`
#    as in `copy_batch`. `check_shift_right(fn)` tests it.

# %%
def check_causal_mask(causal_mask) -> None:
    """Exercise 2: shape, values, and no leak when the model uses it."""
    for T in (1, 2, 5):
        got = np.asarray(causal_mask(T))
        assert got.dtype == bool and got.shape == (T, T), f"causal_mask({T}) has {got.dtype} {got.shape}"
        assert np.array_equal(got, subsequent_mask(T)[0, 0]), f"causal_mask({T}) values"
    forward = lambda s, t: ours(s, t, tgt_mask=np.asarray(causal_mask(t.shape[1]))[None, None])  # noqa: E731
    assert causal_leak(forward, src, tgt_in, 2) == 0.0, "the model leaks with this mask"


def check_shift_right(shift_right) -> None:
    """Exercise 3: against copy_batch's construction."""
    s, ti, to = copy_batch(20, np.random.default_rng(8))
    got_in, got_out = shift_right(s, BOS, EOS, PAD)
    assert np.array_equal(np.asarray(got_in), ti), "tgt_in must be BOS y1 .. yn, then padding"
    assert np.array_equal(np.asarray(got_out), to), "tgt_out must be y1 .. yn EOS, then padding"


# %% CHECK the checks: a wrong answer must fail them
def _fails(check, wrong) -> bool:
    try:
        check(wrong)
    except AssertionError:
        return True
    return False


assert _fails(check_causal_mask, lambda T: np.triu(np.ones((T, T), dtype=bool))), "accepted a mask that hides i itself"
assert _fails(check_shift_right, lambda t, b, e, p: (np.pad(t, ((0, 0), (1, 0))), np.pad(t, ((0, 0), (0, 1))))), \
    "accepted a shift without BOS/EOS"

# %%
if CHECK_SOLUTIONS:
    import importlib
    solutions = importlib.import_module("solutions.08_encoder_decoder_and_masks")
    check_causal_mask(solutions.causal_mask)
    check_shift_right(solutions.shift_right)
    print("solutions OK")
print("chapter 08 OK")
