# ---
# jupyter:
#   jupytext:
#     formats: py:percent
#     text_representation:
#       extension: .py
#       format_name: percent
# ---

# %% [markdown]
# # 15 · Batching by length and training the built-in task
#
# > Sentences were encoded using byte-pair encoding, which has a shared
# > source-target vocabulary of about 37000 tokens. ... Sentence pairs were
# > batched together by approximate sequence length. Each training batch
# > contained a set of sentence pairs containing approximately 25000 source
# > tokens and 25000 target tokens. (§5.1)
#
# Everything so far was one model on toy inputs. Now real(istic) data: the
# built-in English→German number task (`train/data/builtin_task.py`, generated, no
# download), a shared BPE vocabulary (sentencepiece through
# `train.data.tokenizer.Tokenizer`, chapter 14), token-budget batches of similar
# lengths (`train/data/batching.py`), and the training step of §5: forward,
# label-smoothed loss (§5.4, chapter 09), backward, Adam with the Eq. (3)
# schedule (§5.3, chapter 04). We watch the training and validation loss, look
# inside the trained model's attention, and score it with greedy decoding
# (chapter 12) and sacreBLEU (chapter 13). `python -m train` runs the same
# steps with checkpoints, validation and logging (chapter 16 reads that code).
#
# Shapes: B pairs in a batch, S source length, T target length, V vocab.
#
# The library code this chapter builds:
# [`train/data/batching.py`](../train/data/batching.py),
# [`train/run/loop.py`](../train/run/loop.py).

# %%
import time

import matplotlib.pyplot as plt
import numpy as np

import minitensor as mt
from _common import FAST, OUT, calls_to, fails, finish, one_cpu_thread, show
from minitensor import optim
from train.data.batching import make_batches, pad_batch, padding_efficiency
from train.data.builtin_task import make_number_task
from train.data.inputs import make_model_inputs
from train.data.tokenizer import BOS_ID, EOS_ID, PAD_ID, Tokenizer
from train.evaluate.scores import corpus_scores
from transformer import LabelSmoothingLoss, Transformer, TransformerConfig, greedy_decode

THREADS = one_cpu_thread()

# %% [markdown]
# ## 1. The task
#
# English sentences about quantities of things, and their German translations.
# Small, but it has what translation needs: German writes 321 as
# "dreihunderteinundzwanzig" (units before tens, one word), adjectives agree
# with the noun's gender, and a fronted location moves the verb.

# %%
n_train = 3000 if FAST else 20000
task = make_number_task(seed=0, n_train=n_train, n_valid=200, n_test=200)
for en, de in task["train"][:4]:
    print(f"{en:55s} -> {de}")

# %% CHECK
train_en = {en for en, _ in task["train"]}
assert not train_en & {en for en, _ in task["test"]}, "no test sentence may appear in training"
assert len(task["train"]) == n_train and len(task["test"]) == 200, \
    "the number task has the asked-for train size and 200 test pairs"

# %% [markdown]
# ## 2. One shared subword vocabulary
#
# §5.1 uses byte-pair encoding with one vocabulary for both languages, which is
# what lets §3.4 tie the source embedding, target embedding and output
# projection into one matrix. We train a sentencepiece BPE model (chapter 14
# built BPE from scratch and compared) on both sides of the training text.
# Special ids are fixed: pad 0, unk 1, bos 2, eos 3.

# %%
tokenizer = Tokenizer.train([en for en, _ in task["train"]] + [de for _, de in task["train"]],
                            OUT / "15_tokenizer", vocab_size=400)
example = task["train"][0][1]
print(tokenizer.pieces(example))

# %% CHECK
assert (PAD_ID, BOS_ID, EOS_ID) == (0, 2, 3), "the special ids are pad 0, bos 2, eos 3"
assert tokenizer.decode(tokenizer.encode(example)) == example, "encode/decode must round-trip"
assert tokenizer.encode("dreihunderteinundzwanzig rote Äpfel")[0] != 1, "German pieces are in the shared vocabulary"

# %% [markdown]
# ## 3. Batches by length, within a token budget
#
# Padding is wasted compute: a batch costs B × (longest sentence) on each side.
# Sorting pairs by length before cutting batches keeps sentences of similar
# length together; a batch closes when one more pair would push B·max(S) or
# B·max(T) past `max_tokens` (`train.data.batching.make_batches` does this; exercise 2
# asks you to write it). The model sees source = ids + EOS, decoder input
# BOS + ids, labels ids + EOS (§3.1), so each side costs len + 1 positions.
# We compare with batches of the same size drawn at random.

# %%
src_ids = tokenizer.encode_batch([en for en, _ in task["train"]])
tgt_ids = tokenizer.encode_batch([de for _, de in task["train"]])
src_len = np.array([len(s) + 1 for s in src_ids])                  # + EOS
tgt_len = np.array([len(t) + 1 for t in tgt_ids])                  # + BOS (input) or EOS (labels)
max_tokens = 1024
batches = make_batches(src_len, tgt_len, max_tokens=max_tokens, seed=0)
shuffled = np.random.default_rng(0).permutation(len(src_len))
sizes = np.cumsum([len(b) for b in batches])[:-1]
random_batches = np.split(shuffled, sizes)                         # same batch sizes, random members
eff_sorted = padding_efficiency(batches, src_len), padding_efficiency(batches, tgt_len)
eff_random = padding_efficiency(random_batches, src_len), padding_efficiency(random_batches, tgt_len)
print(f"{len(batches)} batches; real/padded tokens, sorted: src {eff_sorted[0]:.2f} tgt {eff_sorted[1]:.2f}; "
      f"random: src {eff_random[0]:.2f} tgt {eff_random[1]:.2f}")

# %% CHECK
covered = np.sort(np.concatenate(batches))
assert np.array_equal(covered, np.arange(len(src_len))), "every pair in exactly one batch"
for b in batches:
    assert len(b) * src_len[b].max() <= max_tokens and len(b) * tgt_len[b].max() <= max_tokens, "over budget"
assert min(eff_sorted) > 0.9, f"length-sorted batches should be >90% real tokens, got {eff_sorted}"
assert min(eff_sorted) > max(eff_random), "sorting by length must beat random batching"

# %% [markdown]
# ## 4. The training step, and the loss curves
#
# One update, as in §5: pad a batch, run the model with teacher forcing,
# label-smoothed loss over non-pad tokens (§5.4, ε_ls = 0.1), backward, one Adam
# step (β₂ = 0.98, ε = 1e-9) at the learning rate of Eq. (3). Dropout
# P_drop = 0.1 is on during training (§5.4). The model is small (N = 2,
# d_model = 64) so it trains on a CPU; the warm-up is shortened to match the
# short run, and the short `--fast` run uses a gentler peak rate (factor 1
# instead of 2), which it needs to get anywhere in 160 steps.
#
# Every few steps we also compute the loss on held-out validation pairs, in
# eval mode (no dropout) and without building a graph: the curve that tells
# learning from memorising. Besides the smoothed loss we log the true NLL per
# token, whose exponential is the perplexity §6.2 reports.

# %%
def model_inputs(indices, src_ids, tgt_ids):
    """src (B, S) = ids+EOS; tgt_in (B, T) = BOS+ids; tgt_out (B, T) = ids+EOS (§3.1 offset by one)."""
    src = pad_batch([src_ids[i] + [EOS_ID] for i in indices], PAD_ID)
    tgt_in = pad_batch([[BOS_ID] + tgt_ids[i] for i in indices], PAD_ID)
    tgt_out = pad_batch([tgt_ids[i] + [EOS_ID] for i in indices], PAD_ID)
    return src, tgt_in, tgt_out


# %% [markdown]
# `python -m train fit` builds the same three arrays with the library's
# `make_model_inputs` (the real data path: a prepared corpus's batch goes
# through it). The training below runs on the library's inputs, so first they
# must be ours on every batch, with each row offset by exactly one: BOS first,
# label t as the decoder input at t + 1, EOS as the last label, then padding.

# %%
def offset_by_one(tgt_in, tgt_out) -> bool:
    """Every row: tgt_in = BOS y_1 … y_n PAD…, tgt_out = y_1 … y_n EOS PAD… (§3.1)."""
    for row_in, row_out in zip(tgt_in, tgt_out):
        n = int((row_out != PAD_ID).sum())                         # y_1 … y_{n-1} EOS
        if not (row_in[0] == BOS_ID and row_out[n - 1] == EOS_ID and np.array_equal(row_in[1:n], row_out[:n - 1])
                and (row_in[n:] == PAD_ID).all() and (row_out[n:] == PAD_ID).all()):
            return False
    return True


def library_inputs(indices):
    return make_model_inputs([src_ids[i] for i in indices], [tgt_ids[i] for i in indices])


# %% CHECK
for b in batches:
    for part, own, library in zip(("source", "decoder input", "labels"), model_inputs(b, src_ids, tgt_ids),
                                  library_inputs(b)):
        assert np.array_equal(own, library), \
            f"the library's model inputs (make_model_inputs, the data path of fit): the {part} differs from ours (§3.1)"
    assert offset_by_one(*library_inputs(b)[1:]), \
        "the library's model inputs: the decoder input must be the labels shifted right by one (§3.1)"

# %%
valid_src = tokenizer.encode_batch([en for en, _ in task["valid"]])
valid_tgt = tokenizer.encode_batch([de for _, de in task["valid"]])
valid_batches = [model_inputs(range(i, min(i + 50, len(valid_src))), valid_src, valid_tgt)
                 for i in range(0, len(valid_src), 50)]


def validation_loss(model, loss_fn, shift_sources=0):
    """(smoothed loss, NLL) per target token over the validation pairs, eval mode, no graph.
    shift_sources = k pairs each target with the source k rows away in its batch (the wrong one)."""
    model.eval()
    loss_sum = nll_sum = tokens = 0.0
    with mt.no_grad():
        for src, tgt_in, tgt_out in valid_batches:
            out = loss_fn(model(np.roll(src, shift_sources, axis=0), tgt_in), tgt_out)
            loss_sum, nll_sum, tokens = loss_sum + out.loss.item() * out.n_tokens, nll_sum + float(out.nll_sum), \
                tokens + out.n_tokens
    model.train()
    return loss_sum / tokens, nll_sum / tokens


config = TransformerConfig.tiny(vocab_size=tokenizer.vocab_size, N=2, d_model=64, d_ff=256, h=4,
                                p_drop=0.1, eps_ls=0.1, max_len=128)
model = Transformer(config, np.random.default_rng(0))
n_steps, eval_every = (160, 40) if FAST else (1500, 100)
schedule = optim.NoamSchedule(config.d_model, warmup=160, factor=1.0) if FAST else \
    optim.NoamSchedule(config.d_model, warmup=400, factor=2.0)
opt = optim.Adam(model.named_parameters(), lr=schedule)
loss_fn = LabelSmoothingLoss(eps_ls=config.eps_ls, pad_id=PAD_ID)
order = np.random.default_rng(1).permutation(len(batches))
history, valid_history, start = [], [], time.perf_counter()
model.train()
for step in range(1, n_steps + 1):
    src, tgt_in, tgt_out = library_inputs(batches[order[(step - 1) % len(batches)]])
    opt.zero_grad()
    out = loss_fn(model(src, tgt_in), tgt_out)                     # (B, T, V) logits -> scalar loss
    out.loss.backward()
    opt.step()
    history.append((out.loss.item(), float(out.nll_sum) / out.n_tokens))
    if step % eval_every == 0:
        valid_history.append((step, *validation_loss(model, loss_fn)))
        print(f"step {step:5d}  train loss {history[-1][0]:.3f}  valid loss {valid_history[-1][1]:.3f}  "
              f"valid nll/token {valid_history[-1][2]:.3f}  lr {opt.current_lr():.2e}  "
              f"{time.perf_counter() - start:.1f}s")

fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(10, 3.5))
steps_axis = np.arange(1, n_steps + 1)
for column, ax, title in ((1, ax1, "label-smoothed loss (§5.4)"), (2, ax2, "NLL per token (perplexity = e^NLL)")):
    ax.plot(steps_axis, [h[column - 1] for h in history], alpha=0.5, label="train (each batch)")
    ax.plot([v[0] for v in valid_history], [v[column] for v in valid_history], "o-", label="validation")
    ax.set_xlabel("update step")
    ax.set_title(title)
    ax.legend()
show(fig, "15_loss_curves")

# %% CHECK
first, last = np.mean([h[0] for h in history[:5]]), np.mean([h[0] for h in history[-5:]])
assert last < 0.6 * first, f"training must cut the loss substantially: {first:.2f} -> {last:.2f}"
assert valid_history[-1][1] < 0.6 * valid_history[0][1], f"the validation loss must fall too: {valid_history}"
assert valid_history[-1][1] > valid_history[-1][2], "the smoothed loss stays above the NLL (it cannot reach 0, §5.4)"

# %% [markdown]
# Teacher forcing shows the decoder the target up to the token it predicts,
# never that token (§3.1's offset, §3.2.3's mask). If the answer leaked in, the
# model would learn to copy it, and its loss would not care which source it was
# given. So score the validation pairs again with every source swapped for
# another sentence's: a model that translates must do much worse.

# %%
wrong_nll = validation_loss(model, loss_fn, shift_sources=1)[1]
print(f"validation NLL/token: {valid_history[-1][2]:.3f} with the right sources, {wrong_nll:.3f} with the wrong ones")

# %% CHECK
assert wrong_nll > valid_history[-1][2] + 1.0, \
    f"the model must read its source, and teacher forcing must not show it the answer: with the wrong sources " \
    f"the validation NLL/token is {wrong_nll:.3f}, with the right ones {valid_history[-1][2]:.3f} (is the " \
    f"decoder input offset by one, §3.1? does the decoder attend to the memory, §3.2.3?)"

# %% [markdown]
# ## 5. What the heads attend to
#
# The paper's appendix draws attention weights (Figures 3-5). `model.attention_maps`
# runs one eval-mode forward pass and returns every attention weight matrix:
# per layer, the encoder's self-attention (source × source), the decoder's
# masked self-attention (target × target, nothing above the diagonal) and the
# encoder-decoder attention (target × source), one panel per head. In a model
# that translates, some cross-attention heads line up target pieces with the
# source words they translate; number words are where to look.

# %%
example_en, example_de = task["test"][1]
ex_src, ex_tgt_in, _ = model_inputs([0], [tokenizer.encode(example_en)], [tokenizer.encode(example_de)])
maps = model.attention_maps(ex_src, ex_tgt_in)                     # name -> (1, H, Tq, Tk)
src_labels = tokenizer.pieces(example_en) + ["</s>"]
tgt_labels = ["<s>"] + tokenizer.pieces(example_de)
kinds = [("encoder.layers.{}.self_attn", src_labels, src_labels, "encoder self"),
         ("decoder.layers.{}.self_attn", tgt_labels, tgt_labels, "decoder self (causal)"),
         ("decoder.layers.{}.cross_attn", tgt_labels, src_labels, "encoder-decoder")]
rows = [(name.format(layer), q, k, f"{title}, layer {layer}") for name, q, k, title in kinds for layer in range(config.N)]
fig, axes = plt.subplots(len(rows), config.h, figsize=(2.6 * config.h, 2.6 * len(rows)))
for r, (name, q_labels, k_labels, title) in enumerate(rows):
    for head in range(config.h):
        ax = axes[r, head]
        ax.imshow(maps[name][0, head], cmap="viridis", vmin=0.0, vmax=1.0)
        ax.set_xticks(range(len(k_labels)), k_labels, rotation=90, fontsize=5)
        ax.set_yticks(range(len(q_labels)), q_labels, fontsize=5)
        ax.set_title(f"{title}, head {head}", fontsize=6)
show(fig, "15_attention_maps")

# %% CHECK
for name, weights in maps.items():
    mt.assert_close(weights.sum(axis=-1), np.ones(weights.shape[:-1]), name=f"{name}: rows sum to 1", atol=1e-5)
for layer in range(config.N):
    self_w = maps[f"decoder.layers.{layer}.self_attn"][0]
    assert np.all(np.triu(self_w, k=1) == 0), "decoder self-attention puts no weight on later positions"
    assert maps[f"decoder.layers.{layer}.cross_attn"].shape == (1, config.h, len(tgt_labels), len(src_labels)), \
        "cross-attention maps are (1, h, target length, source length)"

# %% [markdown]
# ## 6. Does it translate?
#
# Greedy decoding (chapter 12) on held-out test sentences, scored with
# sacreBLEU (chapter 13). After the short fast-mode run most sentences are
# right or nearly; the full run gets almost all of them exactly right.
# `python -m train` runs the demo config for longer, with beam search and
# checkpoint averaging.
#
# A BLEU bar alone is a weak test: a model that ignores the source and always
# writes the most typical German sentence of the task scores about 5-10 BLEU
# (the fluent but wrong outputs share n-grams like "unter der Treppe"). So we
# also decode every test sentence with **another** sentence's source: a model
# that reads its source must then lose almost all of its BLEU.

# %%
n_eval = 40 if FAST else 200
test_src = pad_batch([tokenizer.encode(en) + [EOS_ID] for en, _ in task["test"][:n_eval]], PAD_ID)
refs = [de for _, de in task["test"][:n_eval]]
hyps = [tokenizer.decode(ids) for ids in greedy_decode(model, test_src, max_len_b=20)]
wrong_source = [tokenizer.decode(ids) for ids in greedy_decode(model, np.roll(test_src, 1, axis=0), max_len_b=20)]
scores, blind = corpus_scores(hyps, refs), corpus_scores(wrong_source, refs)
for (en, de), hyp in list(zip(task["test"], hyps))[:3]:
    print(f"EN  {en}\nREF {de}\nHYP {hyp}\n")
print(scores.format())
print(f"BLEU with every source swapped for another: {blind.bleu:.1f}")

# %% CHECK
min_bleu = 30.0 if FAST else 60.0
assert scores.bleu > min_bleu, f"BLEU {scores.bleu:.1f} after {n_steps} steps (expected > {min_bleu})"
assert scores.bleu - blind.bleu > 20, \
    f"the translations must depend on the source: BLEU {scores.bleu:.1f}, with the wrong sources {blind.bleu:.1f}"

# %% [markdown]
# ## Summary
# - One BPE vocabulary for both languages makes tied embeddings possible (§3.4, §5.1); sorting by length before cutting token-budget batches keeps >90% of the compute on real tokens.
# - A training step: teacher-forced forward, smoothed loss over real tokens, backward, Adam at the Eq. (3) rate; watch the validation loss and NLL, not just the training loss.
# - Judge the model by decoding, and check that its output depends on its input: BLEU with the wrong sources must collapse.
#
# ## Exercises
# 1. **Predict, then run.** If you double `max_tokens` to 2048, roughly how many batches will there be,
#    and will the padding efficiency go up or down? Check with `make_batches` and `padding_efficiency`.
#    (Answer key: `PREDICT` in `chapters/solutions/15_batching_and_training.py`.)
# 2. Write `bucket_batches(src_len, tgt_len, max_tokens)`: batches (lists of indices) of pairs sorted by
#    max(src, tgt) length, each within the padded budget on both sides. `check_bucket_batches(fn)` tests it.
# 3. **Find the bug.** A colleague's run learns nothing useful; their batches came from a `model_inputs` that
#    swapped BOS and EOS, or shifted by two, or forgot EOS. Write `offset_is_right(tgt_in, tgt_out, bos, eos,
#    pad)` that returns True only for a batch built as §3.1 says (decoder input BOS y₁ … y_n, labels
#    y₁ … y_n EOS, padded alike). `check_offset_is_right(fn)` tests it on right and broken batches.

# %%
def check_bucket_batches(bucket_batches) -> None:
    """Exercise 2: coverage, budget, and padding efficiency close to the library's; bucketed by the answer, not
    by the library's make_batches."""
    with calls_to(make_batches) as calls:
        got = [np.asarray(b, dtype=np.int64) for b in bucket_batches(src_len, tgt_len, 1024)]
    assert not calls, "sort and cut the batches yourself: the answer called the library's make_batches"
    assert np.array_equal(np.sort(np.concatenate(got)), np.arange(len(src_len))), "every pair exactly once"
    for b in got:
        assert len(b) * src_len[b].max() <= 1024 and len(b) * tgt_len[b].max() <= 1024, "a batch is over budget"
    ours = min(padding_efficiency(got, src_len), padding_efficiency(got, tgt_len))
    assert ours > 0.85, f"padding efficiency {ours:.2f}: sort by length before cutting"
    assert len(got) <= 1.1 * len(batches), f"{len(got)} batches vs the library's {len(batches)}: too small"


def _broken_batches():
    """(name, tgt_in, tgt_out) for the right construction and three classic slips."""
    idx = np.arange(6)
    _, right_in, right_out = model_inputs(idx, src_ids, tgt_ids)
    ys = [tgt_ids[i] for i in idx]
    return [("right", right_in, right_out, True),
            ("BOS and EOS swapped", pad_batch([[EOS_ID] + y for y in ys], PAD_ID),
             pad_batch([y + [BOS_ID] for y in ys], PAD_ID), False),
            ("shifted by two", pad_batch([[BOS_ID, BOS_ID] + y[:-1] for y in ys], PAD_ID), right_out, False),
            ("no EOS label", right_in, pad_batch([y + [PAD_ID] for y in ys], PAD_ID), False),
            ("not shifted", pad_batch([y + [EOS_ID] for y in ys], PAD_ID), right_out, False),
            ("labels reversed", right_in, pad_batch([y[::-1] + [EOS_ID] for y in ys], PAD_ID), False),
            ("labels of other sentences", right_in, np.roll(right_out, 1, axis=0), False)]


def check_offset_is_right(offset_is_right) -> None:
    """Exercise 3: True for the §3.1 construction only: on real batches drawn at random, and on slips that
    keep every token count right (labels reversed, or another sentence's)."""
    for name, tgt_in, tgt_out, expected in _broken_batches():
        assert bool(offset_is_right(tgt_in, tgt_out, BOS_ID, EOS_ID, PAD_ID)) == expected, \
            f"offset_is_right must say {expected} for a batch made {name}"
    for b in np.random.default_rng().choice(len(batches), size=3, replace=False):
        _, tgt_in, tgt_out = model_inputs(batches[b], src_ids, tgt_ids)
        assert offset_is_right(tgt_in, tgt_out, BOS_ID, EOS_ID, PAD_ID), \
            f"offset_is_right must say True for batch {b}, made right"


# %% CHECK the checks: a wrong answer must fail them
def _random_batches(s, t, budget):                                  # no sorting: lots of padding
    idx, out, cur = np.random.default_rng(0).permutation(len(s)), [], []
    for i in idx:
        if cur and (len(cur) + 1) * max(s[cur + [i]].max(), t[cur + [i]].max()) > budget:
            out.append(cur)
            cur = []
        cur.append(int(i))
    return out + [cur]


assert fails(check_bucket_batches, _random_batches), "check_bucket_batches accepted unsorted batches"
assert fails(check_bucket_batches, lambda s_len, t_len, budget: make_batches(s_len, t_len, budget)), \
    "check_bucket_batches accepted the library's make_batches"
assert fails(check_offset_is_right, lambda ti, to, b, e, p: bool((ti[:, 0] == b).all())), \
    "check_offset_is_right accepted a test that only looks at BOS"


def _counts_tokens(tgt_in, tgt_out, bos, eos, pad):                 # BOS first, EOS last, the counts agree
    n = (tgt_out != pad).sum(axis=1)
    return bool((tgt_in[:, 0] == bos).all() and ((tgt_in != pad).sum(axis=1) == n).all()
                and (tgt_out[np.arange(len(n)), n - 1] == eos).all())


assert fails(check_offset_is_right, _counts_tokens), "check_offset_is_right accepted a token count"

# %%
finish("15_batching_and_training", {check_bucket_batches: "bucket_batches", check_offset_is_right: "offset_is_right"})
