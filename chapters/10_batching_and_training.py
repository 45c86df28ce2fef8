# ---
# jupyter:
#   jupytext:
#     formats: py:percent
#     text_representation:
#       extension: .py
#       format_name: percent
# ---

# %% [markdown]
# # 10 · Batching by length and training the built-in task
#
# > "Sentences were encoded using byte-pair encoding, which has a shared
# > source-target vocabulary of about 37000 tokens ... Sentence pairs were
# > batched together by approximate sequence length. Each training batch
# > contained a set of sentence pairs containing approximately 25000 source
# > tokens and 25000 target tokens." (§5.1)
#
# Everything so far was one model on toy inputs. Now real(istic) data: the
# built-in English→German number task (`train/tasks.py`, generated, no
# download), a shared BPE vocabulary (`train/tokenizer.py`, sentencepiece),
# token-budget batches of similar lengths (`train/batching.py`), and the
# training step of §5: forward, label-smoothed loss (§5.4), backward, Adam with
# the Eq. (3) schedule (§5.3). `python -m train` runs the same steps with
# checkpoints, validation and logging; here we write the loop out.
#
# Shapes: B pairs in a batch, S source length, T target length, V vocab.

# %%
import contextlib
import sys
import time
from pathlib import Path

import numpy as np

import minitensor as mt
from minitensor import optim
from train.batching import make_batches, pad_batch, padding_efficiency
from train.evaluate import corpus_scores
from train.tasks import make_number_task
from train.threads import cpu_threads
from train.tokenizer import BOS_ID, EOS_ID, PAD_ID, Tokenizer
from transformer import LabelSmoothingLoss, Transformer, TransformerConfig, greedy_decode

FAST = "--fast" in sys.argv
CHECK_SOLUTIONS = "--check-solutions" in sys.argv
HERE = Path(__file__).resolve().parent if "__file__" in globals() else Path.cwd()
OUT = HERE / "_out"
OUT.mkdir(exist_ok=True)
THREADS = contextlib.ExitStack()       # held until the script ends
THREADS.enter_context(cpu_threads(1))  # tiny matrices: extra BLAS/Numba threads only add overhead

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
assert len(task["train"]) == n_train and len(task["test"]) == 200

# %% [markdown]
# ## 2. One shared subword vocabulary
#
# §5.1 uses byte-pair encoding with one vocabulary for both languages, which is
# what lets §3.4 tie the source embedding, target embedding and output
# projection into one matrix. We train a sentencepiece BPE model on both sides
# of the training text. Special ids are fixed: pad 0, unk 1, bos 2, eos 3.

# %%
tokenizer = Tokenizer.train([en for en, _ in task["train"]] + [de for _, de in task["train"]],
                            OUT / "10_tokenizer", vocab_size=400)
example = task["train"][0][1]
print(tokenizer.pieces(example))

# %% CHECK
assert (PAD_ID, BOS_ID, EOS_ID) == (0, 2, 3)
assert tokenizer.decode(tokenizer.encode(example)) == example, "encode/decode must round-trip"
assert tokenizer.encode("dreihunderteinundzwanzig rote Äpfel")[0] != 1, "German pieces are in the shared vocabulary"

# %% [markdown]
# ## 3. Batches by length, within a token budget
#
# Padding is wasted compute: a batch costs B × (longest sentence) on each side.
# Sorting pairs by length before cutting batches keeps sentences of similar
# length together; a batch closes when one more pair would push B·max(S) or
# B·max(T) past `max_tokens`. The model sees source = ids + EOS, decoder input
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
# ## 4. The training step
#
# One update, as in §5: pad a batch, run the model with teacher forcing,
# label-smoothed loss over non-pad tokens (§5.4, ε_ls = 0.1), backward, one Adam
# step (β₂ = 0.98, ε = 1e-9) at the learning rate of Eq. (3). Dropout
# P_drop = 0.1 is on during training (§5.4). The model is small (N = 2,
# d_model = 64) so it trains on a CPU; the warm-up is shortened to match the
# short run.

# %%
def model_inputs(indices):
    """src (B, S) = ids+EOS; tgt_in (B, T) = BOS+ids; tgt_out (B, T) = ids+EOS (§3.1 offset by one)."""
    src = pad_batch([src_ids[i] + [EOS_ID] for i in indices], PAD_ID)
    tgt_in = pad_batch([[BOS_ID] + tgt_ids[i] for i in indices], PAD_ID)
    tgt_out = pad_batch([tgt_ids[i] + [EOS_ID] for i in indices], PAD_ID)
    return src, tgt_in, tgt_out


config = TransformerConfig.tiny(vocab_size=tokenizer.vocab_size, N=2, d_model=64, d_ff=256, h=4,
                                p_drop=0.1, eps_ls=0.1, max_len=128)
model = Transformer(config, np.random.default_rng(0))
n_steps = 160 if FAST else 1500
opt = optim.Adam(model.named_parameters(), lr=optim.NoamSchedule(config.d_model, warmup=100 if FAST else 400,
                                                                 factor=2.0))
loss_fn = LabelSmoothingLoss(eps_ls=config.eps_ls, pad_id=PAD_ID)
order = np.random.default_rng(1).permutation(len(batches))
history, start = [], time.perf_counter()
model.train()
for step in range(1, n_steps + 1):
    src, tgt_in, tgt_out = model_inputs(batches[order[(step - 1) % len(batches)]])
    opt.zero_grad()
    out = loss_fn(model(src, tgt_in), tgt_out)                     # (B, T, V) logits -> scalar loss
    out.loss.backward()
    opt.step()
    history.append((out.loss.item(), float(out.nll_sum) / out.n_tokens))
    if step % (40 if FAST else 100) == 0:
        print(f"step {step:5d}  loss {history[-1][0]:.3f}  nll/token {history[-1][1]:.3f}  "
              f"lr {opt.current_lr():.2e}  {time.perf_counter() - start:.1f}s")

# %% CHECK
first, last = np.mean([h[0] for h in history[:5]]), np.mean([h[0] for h in history[-5:]])
assert last < 0.6 * first, f"training must cut the loss substantially: {first:.2f} -> {last:.2f}"

# %% [markdown]
# ## 5. Does it translate?
#
# Greedy decoding (chapter 11 has beam search) on held-out test sentences,
# scored with sacreBLEU (chapter 12). After the short fast-mode run the output
# is mostly the right *shape* of sentence; the full run gets most sentences
# exactly right. `python -m train` runs the demo config for longer, with beam
# search and checkpoint averaging.

# %%
n_eval = 40 if FAST else 200
test_src = pad_batch([tokenizer.encode(en) + [EOS_ID] for en, _ in task["test"][:n_eval]], PAD_ID)
hyps = [tokenizer.decode(ids) for ids in greedy_decode(model, test_src, max_len_b=20)]
refs = [de for _, de in task["test"][:n_eval]]
scores = corpus_scores(hyps, refs)
for (en, de), hyp in list(zip(task["test"], hyps))[:3]:
    print(f"EN  {en}\nREF {de}\nHYP {hyp}\n")
print(scores.format())

# %% CHECK
min_bleu = 5.0 if FAST else 60.0
assert scores.bleu > min_bleu, f"BLEU {scores.bleu:.1f} after {n_steps} steps (expected > {min_bleu})"

# %% [markdown]
# ## Summary
# - One BPE vocabulary for both languages makes tied embeddings possible (§3.4, §5.1).
# - Sort by length, then cut batches by a padded-token budget: >90% of the compute goes to real tokens.
# - A training step: teacher-forced forward, smoothed loss over real tokens, backward, Adam at the Eq. (3) rate.
#
# ## Exercises
# 1. **Predict, then run.** If you double `max_tokens` to 2048, roughly how many batches will there be,
#    and will the padding efficiency go up or down? Check with `make_batches` and `padding_efficiency`.
# 2. Write `bucket_batches(src_len, tgt_len, max_tokens)`: batches (lists of indices) of pairs sorted by
#    max(src, tgt) length, each within the padded budget on both sides. `check_bucket_batches(fn)` tests it.
# 3. Write `make_model_inputs(src, tgt, bos, eos, pad)`: from two lists of id lists build the padded
#    `(src + EOS, BOS + tgt, tgt + EOS)` arrays. `check_make_model_inputs(fn)` compares with `model_inputs`.

# %%
def check_bucket_batches(bucket_batches) -> None:
    """Exercise 2: coverage, budget, and padding efficiency close to the library's."""
    got = [np.asarray(b, dtype=np.int64) for b in bucket_batches(src_len, tgt_len, 1024)]
    assert np.array_equal(np.sort(np.concatenate(got)), np.arange(len(src_len))), "every pair exactly once"
    for b in got:
        assert len(b) * src_len[b].max() <= 1024 and len(b) * tgt_len[b].max() <= 1024, "a batch is over budget"
    ours = min(padding_efficiency(got, src_len), padding_efficiency(got, tgt_len))
    assert ours > 0.85, f"padding efficiency {ours:.2f}: sort by length before cutting"
    assert len(got) <= 1.1 * len(batches), f"{len(got)} batches vs the library's {len(batches)}: too small"


def check_make_model_inputs(make_inputs) -> None:
    """Exercise 3: against this chapter's model_inputs."""
    idx = np.arange(7)
    got = make_inputs([src_ids[i] for i in idx], [tgt_ids[i] for i in idx], BOS_ID, EOS_ID, PAD_ID)
    for name, a, b in zip(("src", "tgt_in", "tgt_out"), got, model_inputs(idx)):
        assert np.array_equal(np.asarray(a), b), f"{name} differs"


# %% CHECK the checks: a wrong answer must fail them
def _fails(check, wrong) -> bool:
    try:
        check(wrong)
    except AssertionError:
        return True
    return False


def _random_batches(s, t, budget):                                  # no sorting: lots of padding
    idx, out, cur = np.random.default_rng(0).permutation(len(s)), [], []
    for i in idx:
        if cur and (len(cur) + 1) * max(s[cur + [i]].max(), t[cur + [i]].max()) > budget:
            out.append(cur)
            cur = []
        cur.append(int(i))
    return out + [cur]


assert _fails(check_bucket_batches, _random_batches), "check_bucket_batches accepted unsorted batches"
assert _fails(check_make_model_inputs, lambda s, t, b, e, p: (pad_batch(s, p), pad_batch(t, p), pad_batch(t, p))), \
    "check_make_model_inputs accepted inputs without BOS/EOS"

# %%
if CHECK_SOLUTIONS:
    import importlib
    solutions = importlib.import_module("solutions.10_batching_and_training")
    check_bucket_batches(solutions.bucket_batches)
    check_make_model_inputs(solutions.make_model_inputs)
    print("solutions OK")
print("chapter 10 OK")
