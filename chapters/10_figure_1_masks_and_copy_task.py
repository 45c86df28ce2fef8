# ---
# jupyter:
#   jupytext:
#     formats: py:percent
#     text_representation:
#       extension: .py
#       format_name: percent
# ---

# %% [markdown]
# # 10 · Figure 1: the whole model, its masks, and a copy task
#
# > We also modify the self-attention sub-layer in the decoder stack to prevent
# > positions from attending to subsequent positions. This masking, combined
# > with fact that the output embeddings are offset by one position, ensures
# > that the predictions for position i can depend only on the known outputs at
# > positions less than i. (§3.1)
#
# Every part now exists: embeddings and positions (chapter 07), the encoder and
# decoder stacks (chapter 08), the loss (chapter 09), Adam and the schedule
# (chapter 04). We assemble Figure 1 from the library's versions of those parts,
# check it equals `transformer.Transformer`, build and test the masks, and
# train it on a copy task until **greedy decoding**, written here from its
# definition, is right. Then we break the causal mask on purpose and watch
# teacher-forced accuracy stay perfect while greedy decoding falls apart: the
# reason teacher-forced accuracy alone proves nothing.
#
# Shapes: B batch, S source length, T target length, D = d_model, H heads, V vocab.
#
# The library code this chapter builds:
# [`transformer/model.py`](../transformer/model.py),
# [`transformer/masks.py`](../transformer/masks.py).

# %%
import numpy as np

import minitensor as mt
from _common import FAST, calls_to, fails, finish, one_cpu_thread
from minitensor import nn, optim
from transformer import LabelSmoothingLoss, Transformer, TransformerConfig       # loss: chapter 09
from transformer.embedding import Embeddings                                        # chapter 07
from transformer.layers import Decoder, Encoder                                     # chapter 08
from transformer.masks import padding_mask, subsequent_mask
from transformer.positional import PositionalEncoding                               # chapter 07

THREADS = one_cpu_thread()
PAD, BOS, EOS = 0, 2, 3

# %% [markdown]
# ## 1. The two masks
#
# Both are boolean, True = blocked, shaped to broadcast against the scores
# (B, H, T_query, T_key) (chapter 01):
#
# - **padding**: (B, 1, 1, S), no query may attend to a padding key;
# - **subsequent** (causal): (1, 1, T, T), query i may see keys 0..i only.
#
# > We need to prevent leftward information flow in the decoder to preserve the
# > auto-regressive property. We implement this inside of scaled dot-product
# > attention by masking out (setting to −∞) all values in the input of the
# > softmax which correspond to illegal connections. (§3.2.3)
#
# Each is one line of NumPy; `transformer.masks` has the same two functions
# (with an offset for decoding one step at a time, chapter 12).

# %%
def padding_mask_np(ids, pad):
    return (ids == pad)[:, None, None, :]                          # (B, S) -> (B, 1, 1, S): blocks keys


def causal_mask_np(T):
    return np.triu(np.ones((T, T), dtype=bool), k=1)[None, None]   # (1, 1, T, T): key j > query i is blocked


src_example = np.array([[7, 8, 9, PAD], [7, 8, 9, 10]])
print(causal_mask_np(4)[0, 0].astype(int))

# %% CHECK
assert padding_mask_np(src_example, PAD)[0, 0, 0].tolist() == [False, False, False, True], \
    "the padding mask blocks exactly the PAD keys"
assert np.array_equal(padding_mask(src_example, PAD), padding_mask_np(src_example, PAD)), "library padding mask"
for T_ in (1, 4, 9):
    assert np.array_equal(subsequent_mask(T_), causal_mask_np(T_)), f"library causal mask, T = {T_}"

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
assert sorted(n for n, _ in ours.named_parameters()) == sorted(n for n, _ in library_model.named_parameters()), \
    "Seq2Seq names its weights as transformer.Transformer does"
mt.assert_close(ours(src, tgt_in), library_model(src, tgt_in), name="Figure 1 from parts vs Transformer", atol=1e-5)

# %% [markdown]
# Chapters 04-09 held every piece's fast path to its own version. Assembled,
# the model every config trains is `impl = "fused"` on the Numba backend; in
# float64 it must give our `Seq2Seq`'s logits, and the gradient of every
# weight through a random cotangent, as it trains: dropout on (residual,
# attention, and on the embedding sums), each model drawing its masks from
# its own generator with the same seed, so both drop the same units.

# %%
def seed_dropout(model, seed):
    """Every Dropout of `model` draws from one generator seeded with `seed` (draws come in forward order)."""
    rng = np.random.default_rng(seed)
    for _, module in model.named_modules():
        if isinstance(module, nn.Dropout):
            module.rng = rng
    return model


config_drop = config.replace(p_drop=0.2, attention_dropout=0.1)

# %% [markdown]
# §5.4 drops units in two kinds of places: each sub-layer's output, and the
# sums of the embeddings and the positional encodings. With every other dropout
# off, the model in training mode must still differ from itself in eval mode,
# by exactly our `Seq2Seq`'s embedding dropout.

# %%
embedding_only = Transformer(config_drop.replace(impl="fused", attention_dropout=0.0), np.random.default_rng(0),
                             backend="numba", precision="fp64")
for name, module in embedding_only.named_modules():
    if isinstance(module, nn.Dropout) and module is not embedding_only.dropout:
        module.p = 0.0                                             # only the dropout on the sums stays on
seed_dropout(embedding_only, 6)
ours_embedding_only = Seq2Seq(config_drop.replace(attention_dropout=0.0), np.random.default_rng(1))
ours_embedding_only.to(dtype=np.float64).load_state_dict(embedding_only.state_dict())
for name, module in ours_embedding_only.named_modules():
    if isinstance(module, nn.Dropout) and module is not ours_embedding_only.dropout:
        module.p = 0.0
seed_dropout(ours_embedding_only, 6)
with mt.no_grad():
    train_mode = embedding_only(src, tgt_in).numpy()
    ours_train_mode = ours_embedding_only(src, tgt_in).numpy()
    embedding_only.eval()
    eval_mode = embedding_only(src, tgt_in).numpy()

# %% CHECK
assert np.abs(train_mode - eval_mode).max() > 1e-3, \
    "dropout on the sums of the embeddings and the positional encodings (§5.4): the fused model in training mode " \
    "gives its eval-mode logits"
mt.assert_close(train_mode, ours_train_mode,
                name="dropout on the sums of the embeddings and the positional encodings (§5.4), the fused model: "
                     "logits vs ours")

# %%
trained_model = Transformer(config_drop.replace(impl="fused"), np.random.default_rng(0), backend="numba",
                            precision="fp64")
ours64 = Seq2Seq(config_drop, np.random.default_rng(1)).to(dtype=np.float64)
ours64.load_state_dict(trained_model.state_dict())
seed_dropout(trained_model, 5)
seed_dropout(ours64, 5)
r_logits = check_rng.standard_normal((3, 6, V))
logits_ours, logits_trained = ours64(src, tgt_in), trained_model(src, tgt_in)
(logits_ours * r_logits).sum().backward()
(logits_trained * r_logits).sum().backward()
ours64.eval()
no_dropout = ours64(src, tgt_in).numpy()
ours64.train()

# %% CHECK
trained_grads = dict(trained_model.named_parameters())
assert np.abs(logits_ours.numpy() - no_dropout).max() > 1e-3, "dropout must be on in this check, or it holds nothing"
mt.assert_close(logits_trained, logits_ours.numpy(),
                name="Figure 1, the fused model on the Numba kernels, dropout on: logits vs ours")
for name, p in ours64.named_parameters():
    mt.assert_close(trained_grads[name].grad, p.grad,
                    name=f"Figure 1, the fused model on the Numba kernels, dropout on: gradient of {name} vs ours")

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
#
# We judge the model the way it will be used: by decoding. Greedy decoding is
# the simplest search: feed BOS, take the most probable next token, append it,
# run the decoder again on the longer prefix, until EOS. Written from that
# definition it recomputes the whole prefix at every step (O(T²) work per
# sentence); chapter 12 makes it O(T) with a cache and adds beam search.

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


def greedy_from_scratch(forward, src, max_new):
    """Greedy decoding by its definition: run the model on the prefix so far, append the argmax of the last
    position, repeat until every row has produced EOS (or max_new tokens). Returns token lists without EOS."""
    ys = np.full((src.shape[0], 1), BOS)                            # (B, 1)
    with mt.no_grad():
        for _ in range(max_new):
            next_token = forward(src, ys).numpy()[:, -1].argmax(-1)   # (B,) most probable next token
            ys = np.concatenate([ys, next_token[:, None]], axis=1)   # (B, t) -> (B, t+1)
            if (ys == EOS).any(axis=1).all():
                break
    return [row[:row.index(EOS)] if EOS in row else row for row in ys[:, 1:].tolist()]


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
        if step % 50 == 0 and step >= 100:                         # a cheap look: half the validation set
            score = greedy(val[0][:100]) if greedy else teacher_forced_accuracy(forward, *(v[:100] for v in val))
            if score >= target:
                break
    return step


val = copy_batch(200, np.random.default_rng(99))
max_steps = 800 if FAST else 2000
library_model.train()
steps = train_copy(library_model, library_model.named_parameters(), max_steps, val, np.random.default_rng(3),
                   greedy=lambda s: greedy_exact_match(greedy_from_scratch(library_model, s, L + 1), s))
library_model.eval()
tf_acc = teacher_forced_accuracy(library_model, *val)
greedy_acc = greedy_exact_match(greedy_from_scratch(library_model, val[0], L + 1), val[0])
print(f"correct mask: {steps} steps, teacher-forced token accuracy {tf_acc:.3f}, greedy exact match {greedy_acc:.3f}")

# %% CHECK
assert greedy_acc >= 0.97, f"greedy decoding must copy (almost) every held-out sequence, got {greedy_acc:.3f}"
assert tf_acc >= 0.99, f"teacher-forced accuracy {tf_acc:.3f}"

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
#    (Answer key: `PREDICT` in `chapters/solutions/10_figure_1_masks_and_copy_task.py`.)
# 2. **Find the bug.** A colleague's `suspect_padding_mask` (below) makes the padding test of section 3
#    fail for the encoder, and crashes encoder-decoder attention whenever T ≠ S. Work out from its shape
#    what it blocks instead of padding keys, then write `padding_mask_fixed(ids, pad)`.
#    `check_padding_mask(fn)` tests its shape, its values, and that padding becomes invisible to the model.
# 3. Write `shift_right(tgt, bos, eos, pad)`: from right-padded targets (B, n) build `(tgt_in, tgt_out)`
#    as in `copy_batch`. `check_shift_right(fn)` tests it.

# %%
def suspect_padding_mask(ids, pad):
    """The colleague's version: the padding test fails with it. What does (B, 1, S, 1) block?"""
    return (ids == pad)[:, None, :, None]


def check_padding_mask(padding_mask_fixed) -> None:
    """Exercise 2: shape (B, 1, 1, S), True at padding, and the encoder output at real positions unchanged by
    padding; the learner's fix, not the library's padding_mask."""
    with calls_to(padding_mask) as calls:
        got = np.asarray(padding_mask_fixed(padded_src, PAD))
    assert not calls, "fix the colleague's mask yourself: the answer called the library's padding_mask"
    assert got.shape == (3, 1, 1, padded_src.shape[1]), f"shape {got.shape}: one row per sentence, shared by queries"
    assert np.array_equal(got[:, 0, 0], padded_src == PAD), "True exactly at the padding keys"
    with mt.no_grad():
        short, _ = library_model.encoder(library_model.embeddings.source(src), padding_mask_fixed(src, PAD))
        long, _ = library_model.encoder(library_model.embeddings.source(padded_src), got)
    mt.assert_close(long.numpy()[:, :src.shape[1]], short.numpy(), name="padding invisible to the encoder", atol=1e-5)


def check_shift_right(shift_right) -> None:
    """Exercise 3: against copy_batch's construction, on a batch drawn afresh each call."""
    s, ti, to = copy_batch(20, np.random.default_rng())
    got_in, got_out = shift_right(s, BOS, EOS, PAD)
    assert np.array_equal(np.asarray(got_in), ti), "tgt_in must be BOS y1 .. yn, then padding"
    assert np.array_equal(np.asarray(got_out), to), "tgt_out must be y1 .. yn EOS, then padding"


# %% CHECK the checks: a wrong answer must fail them
assert fails(check_padding_mask, suspect_padding_mask), "check_padding_mask accepted the colleague's mask"
assert fails(check_padding_mask, lambda ids, pad: (ids != pad)[:, None, None, :]), "accepted an inverted mask"
assert fails(check_shift_right, lambda t, b, e, p: (np.pad(t, ((0, 0), (1, 0))), np.pad(t, ((0, 0), (0, 1))))), \
    "accepted a shift without BOS/EOS"
assert fails(check_padding_mask, padding_mask), "check_padding_mask accepted the library's padding_mask"
assert fails(check_shift_right, lambda t, b, e, p: copy_batch(20, np.random.default_rng(8))[1:]), \
    "check_shift_right accepted the answer for one fixed batch"

# %%
finish("10_figure_1_masks_and_copy_task", {check_padding_mask: "padding_mask_fixed", check_shift_right: "shift_right"})
