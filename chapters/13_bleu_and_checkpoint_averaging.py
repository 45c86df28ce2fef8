# ---
# jupyter:
#   jupytext:
#     formats: py:percent
#     text_representation:
#       extension: .py
#       format_name: percent
# ---

# %% [markdown]
# # 13 · BLEU, the paper-comparable score, and checkpoint averaging
#
# > For the base models, we used a single model obtained by averaging the last 5
# > checkpoints, which were written at 10-minute intervals. For the big models,
# > we averaged the last 20 checkpoints. (§6.1)
#
# Table 2 reports BLEU on newstest2014. Two details decide whether a number is
# comparable with it. First, **how BLEU was computed**: the paper's scores come
# from tokenized text with compound splitting (tensor2tensor's
# `get_ende_bleu.sh`), not from sacreBLEU's detokenized default; the same
# output scores about 1.5 BLEU lower with sacreBLEU (tensorflow/tensor2tensor issue 317:
# 27.52 vs 29.02). We report sacreBLEU, with its signature, as the main number
# and the paper-comparable score beside it (`train/evaluate/scores.py`). Second,
# **which weights**: the average of the last checkpoints, not the last one.
#
# From the library we use: `train.data.builtin_task.make_number_task`, the built-in
# English→German task (generated from a small grammar, no download; chapter 15
# trains on it), here only for its German sentences; `train.evaluate.scores`, the
# scoring the training pipeline reports; and `transformer.checkpoint`, which
# saves and loads weights as safetensors files (chapter 16 opens the format).
#
# The library code this chapter builds:
# [`train/evaluate/scores.py`](../train/evaluate/scores.py),
# [`transformer/checkpoint.py`](../transformer/checkpoint.py).

# %%
import weakref
from collections import Counter

import matplotlib.pyplot as plt
import numpy as np
from sacrebleu.metrics import BLEU
from sacrebleu.metrics.helpers import extract_all_word_ngrams

import minitensor as mt
from _common import FAST, OUT, calls_to, fails, finish, one_cpu_thread, show
from minitensor import optim
from train.data.builtin_task import make_number_task
from train.evaluate.scores import corpus_scores, paper_bleu, paper_tokenize
from transformer import LabelSmoothingLoss, Transformer, TransformerConfig
from transformer.checkpoint import average_checkpoints, load_checkpoint, save_checkpoint

THREADS = one_cpu_thread()
rng = np.random.default_rng(0)

# %% [markdown]
# ## 1. BLEU from scratch
#
# Corpus BLEU (Papineni et al. 2002): for n = 1..4, the *clipped* n-gram
# precision p_n (a hypothesis n-gram counts at most as often as it occurs in
# the reference), summed over the whole corpus before dividing; their geometric
# mean; times a brevity penalty BP = exp(1 − r/c) when the hypotheses are
# shorter (c tokens) than the references (r tokens). On already-tokenized text
# with no smoothing this must equal sacreBLEU exactly.

# %%
def ngrams(tokens, n):
    return Counter(tuple(tokens[i:i + n]) for i in range(len(tokens) - n + 1))


def corpus_bleu(hyps, refs, max_n=4):
    """BLEU (0-100) of whitespace-tokenized hypotheses against one reference each."""
    matches, totals, c, r = np.zeros(max_n), np.zeros(max_n), 0, 0
    for hyp, ref in zip(hyps, refs):
        h, rf = hyp.split(), ref.split()
        c, r = c + len(h), r + len(rf)
        for n in range(1, max_n + 1):
            hyp_counts, ref_counts = ngrams(h, n), ngrams(rf, n)
            matches[n - 1] += sum(min(k, ref_counts[g]) for g, k in hyp_counts.items())   # clipped
            totals[n - 1] += max(len(h) - n + 1, 0)
    if c == 0 or (matches == 0).any():
        return 0.0
    log_precision = np.log(matches / totals).mean()                 # geometric mean of p_1..p_4
    brevity = min(0.0, 1 - r / c)                                   # log BP
    return 100 * float(np.exp(log_precision + brevity))


task = make_number_task(seed=0, n_train=10, n_valid=10, n_test=60)
refs = [de for _, de in task["test"]]


def corrupt(sentence, rng):
    """A plausible wrong translation: drop a word, or swap two."""
    words = sentence.split()
    if rng.random() < 0.5 and len(words) > 3:
        del words[rng.integers(len(words))]
    else:
        i, j = rng.choice(len(words), 2, replace=False)
        words[i], words[j] = words[j], words[i]
    return " ".join(words)


hyps = [de if rng.random() < 0.4 else corrupt(de, rng) for de in refs]
ours = corpus_bleu(hyps, refs)
reference = BLEU(tokenize="none", smooth_method="none", force=True).corpus_score(hyps, [refs]).score
print(f"BLEU from scratch {ours:.4f}, sacreBLEU (tokenize=none, no smoothing) {reference:.4f}")

# %% CHECK
assert abs(ours - reference) < 1e-9, "from-scratch corpus BLEU must equal sacreBLEU's"
assert corpus_bleu(refs, refs) == 100.0, "a perfect output scores 100"
assert corpus_bleu([" ".join(r.split()[:-2]) for r in refs], refs) < corpus_bleu(refs, refs), "brevity penalty"
assert corpus_bleu(["der der der der"], ["der Tisch und der Stuhl"]) == 0.0, "clipping: repeated words count once"

# %% [markdown]
# ## 2. sacreBLEU vs the paper's tokenized, compound-split BLEU
#
# sacreBLEU takes plain (detokenized) text and tokenizes the hypotheses and references
# itself with a fixed tokenizer (13a), so anyone can reproduce the score from
# plain text; its signature records every setting. The paper's recipe instead
# tokenizes, then splits hyphenated compounds ("Baden-Württemberg" becomes
# "Baden ##AT##-##AT## Württemberg"), which turns one hard token into three
# easier ones. On text with hyphens and punctuation the two differ; on our
# number task (no hyphens, no punctuation on the German side) they coincide.

# %%
wmt_like_refs = ["Die Baden-Württemberg-Stiftung hat 3,5 Millionen Euro zugesagt.",
                 "Das Max-Planck-Institut liegt in Heidelberg-Süd, sagte der Sprecher."]
wmt_like_hyps = ["Die Baden-Württemberg Stiftung hat 3,5 Millionen Euro versprochen.",
                 "Das Max-Planck Institut ist in Heidelberg-Süd, so der Sprecher."]
wmt = corpus_scores(wmt_like_hyps, wmt_like_refs)
ours_task = corpus_scores(hyps, refs)
print(paper_tokenize(wmt_like_refs[0]))
print(f"WMT-like sample: sacreBLEU {wmt.bleu:.2f}, paper-comparable {wmt.paper_bleu:.2f}")
print(f"number task:     sacreBLEU {ours_task.bleu:.2f}, paper-comparable {ours_task.paper_bleu:.2f}")
print(wmt.bleu_signature)

# %% CHECK
assert "##AT##-##AT##" in paper_tokenize(wmt_like_refs[0]), "the paper's recipe splits hyphenated compounds"
assert wmt.paper_bleu > wmt.bleu + 1.0, "compound splitting rewards partly-right compounds"
assert abs(ours_task.bleu - ours_task.paper_bleu) < 0.5, "without hyphens or punctuation the two nearly agree"
assert wmt.bleu_signature.startswith("nrefs:1|case:mixed|eff:no|tok:13a"), "report the signature with the score"
assert abs(paper_bleu(hyps, refs) - ours) < 1e-9, "on this task the paper recipe is plain tokenized BLEU"

# %% [markdown]
# ## 3. Checkpoint averaging
#
# Late in training the weights wander around a minimum with the noise of each
# batch; their average sits closer to its centre. §6.1 averages the last 5
# (base) or 20 (big) checkpoints. Averaging is element-wise, name by name; it
# only makes sense for checkpoints of one run (the same basin). We train a
# small model with a deliberately high learning rate on a reversal task, save
# a checkpoint every few steps, and compare the last checkpoint, each of the
# last five, and their average on held-out data.

# %%
PAD, BOS, EOS, V, L = 0, 2, 3, 14, 7


def reverse_batch(n, rng):
    lengths = rng.integers(3, L + 1, size=n)
    src, tgt_in, tgt_out = (np.zeros((n, L + e), dtype=np.int64) for e in (0, 1, 1))
    for row, length in enumerate(lengths):
        seq = rng.integers(4, V, size=length)
        src[row, :length] = seq
        tgt_in[row, 0], tgt_in[row, 1:length + 1] = BOS, seq[::-1]
        tgt_out[row, :length], tgt_out[row, length] = seq[::-1], EOS
    return src, tgt_in, tgt_out


config = TransformerConfig.tiny(vocab_size=V, N=1, d_model=32, d_ff=64, h=4, p_drop=0.0, eps_ls=0.0, max_len=32)
model = Transformer(config, np.random.default_rng(0))
opt = optim.Adam(model.named_parameters(), lr=3e-3)                 # constant and high: noisy weights
loss_fn, train_rng = LabelSmoothingLoss(0.0, PAD), np.random.default_rng(1)
valid = reverse_batch(300, np.random.default_rng(9))


def valid_loss(m):
    with mt.no_grad():
        return LabelSmoothingLoss(0.0, PAD)(m(valid[0], valid[1]), valid[2]).loss.item()


ckpt_dir = OUT / "13_checkpoints"                                 # files are replaced on every run
ckpt_dir.mkdir(parents=True, exist_ok=True)
n_steps, every = (250, 10) if FAST else (1000, 25)
paths = []
for step in range(1, n_steps + 1):
    s, ti, to = reverse_batch(32, train_rng)
    opt.zero_grad()
    loss_fn(model(s, ti), to).loss.backward()
    opt.step()
    if step % every == 0:
        paths.append(ckpt_dir / f"ckpt_{step:08d}.safetensors")
        save_checkpoint(paths[-1], model.state_dict(), {"step": step})
last5 = paths[-5:]
averaged, _ = average_checkpoints(last5)
states = [load_checkpoint(p)[0] for p in last5]
by_hand = {name: np.mean([s[name].astype(np.float64) for s in states], axis=0).astype(np.float32) for name in states[0]}
losses = []
for state in states:
    model.load_state_dict(state)
    losses.append(valid_loss(model))
model.load_state_dict(averaged)
avg_loss = valid_loss(model)
print("held-out loss of the last 5 checkpoints:", [f"{x:.4f}" for x in losses], f"-> averaged {avg_loss:.4f}")
fig, ax = plt.subplots(figsize=(5, 3))
ax.bar([f"step {int(p.stem[5:])}" for p in last5] + ["average"], losses + [avg_loss],
       color=["tab:blue"] * len(losses) + ["tab:orange"])
ax.set_ylim(min(losses + [avg_loss]) * 0.9, max(losses) * 1.05)
ax.set_ylabel("held-out loss")
ax.tick_params(axis="x", rotation=30)
show(fig, "13_checkpoint_averaging")

# %% CHECK
for name in by_hand:
    mt.assert_close(averaged[name], by_hand[name], name=f"averaged {name}")
assert avg_loss < np.mean(losses), f"the average should beat the typical checkpoint: {avg_loss:.4f} vs {losses}"

# %% [markdown]
# A training checkpoint can also hold integers and booleans (a step counter,
# a mask). Their mean means nothing (and a mean of step counts, rounded back
# to an integer, would look plausible): `average_checkpoints` takes them from
# the last checkpoint, unaveraged, in their own dtype.

# %%
counted = [ckpt_dir / f"counted_{i}.safetensors" for i in range(3)]
for i, path in enumerate(counted):
    save_checkpoint(path, {"w": np.full(3, float(i), np.float32), "step": np.array([10 * (i + 1)], np.int64),
                           "mask": np.array([i == 0, i == 2])}, {"step": 10 * (i + 1)})
counted_average, _ = average_checkpoints(counted)

# %% CHECK
mt.assert_close(counted_average["w"], np.full(3, 1.0, np.float32), name="averaged float tensor beside integers")
assert counted_average["step"].dtype == np.int64 and counted_average["step"].tolist() == [30], \
    f"integer tensors are taken from the last checkpoint, never averaged: step {counted_average['step']}"
assert counted_average["mask"].dtype == bool and counted_average["mask"].tolist() == [False, True], \
    f"bool tensors are taken from the last checkpoint, never averaged: mask {counted_average['mask']}"

# %% [markdown]
# ## Summary
# - BLEU = geometric mean of clipped 1-4-gram precisions × brevity penalty, summed over the corpus first.
# - Report sacreBLEU with its signature; label the tokenized, compound-split score as "paper-comparable" (≈ +1.5 on WMT En-De).
# - §6.1 evaluates the element-wise average of the last 5 (base) / 20 (big) checkpoints.
#
# ## Exercises
# 1. **Predict, then run.** A hypothesis equal to its 10-word reference except that the last word is missing:
#    what is its BLEU? (Which n-gram precisions change, and what does the brevity penalty do?)
#    (Answer key: `PREDICT` in `chapters/solutions/13_bleu_and_checkpoint_averaging.py`.)
# 2. Write `bleu_stats(hyp_tokens, ref_tokens, max_n)` returning `(matches, totals)` lists of clipped n-gram
#    matches and hypothesis n-gram counts. `check_bleu_stats(fn)` sums them over a corpus and compares with sacreBLEU.
# 3. Section 3 held all five checkpoints in memory at once. The big model averages 20 (§6.1), about 0.85 GB
#    each in fp32: 17 GB. Write `running_average(checkpoints)`: the same average from an iterator that hands
#    out one {name: array} checkpoint at a time, keeping only a float64 running mean (the mean of k + 1 from
#    the mean of k and one more), returned in each array's dtype. `check_running_average(fn)` feeds it this
#    chapter's checkpoints through a reader that refuses to load the next one while an older one is still held.

# %%
def check_bleu_stats(bleu_stats) -> None:
    """Exercise 2: corpus BLEU from your statistics must equal sacreBLEU's; counted by hand, not by sacreBLEU's
    statistics, its n-gram extraction or this project's BLEU."""
    matches, totals, c, r = np.zeros(4), np.zeros(4), 0, 0
    library = (BLEU.corpus_score, BLEU.sentence_score, BLEU._extract_corpus_statistics, BLEU._compute_segment_statistics,
               extract_all_word_ngrams, corpus_scores, paper_bleu, corpus_bleu)
    for hyp, ref in zip(hyps, refs):
        with calls_to(*library) as calls:
            m, t = bleu_stats(hyp.split(), ref.split(), 4)
        assert not calls, f"count the clipped n-grams yourself: the answer called {dict(calls)}"
        matches, totals = matches + np.asarray(m), totals + np.asarray(t)
        c, r = c + len(hyp.split()), r + len(ref.split())
    score = 100 * np.exp(np.log(matches / totals).mean() + min(0.0, 1 - r / c))
    assert abs(score - reference) < 1e-9, f"BLEU from your statistics {score:.4f} vs sacreBLEU {reference:.4f}"
    assert list(bleu_stats("a a a".split(), "a b".split(), 2)[0]) == [1, 0], "clip counts by the reference"


class _Checkpoint(dict):
    """A loaded checkpoint (a dict that a weak reference can watch)."""


def _one_at_a_time(paths):
    """Load each checkpoint in turn; refuse to load another while one before the current is still referenced."""
    held = []
    for path in paths:
        alive = [ref for ref in held[:-1] if ref() is not None]
        assert not alive, f"{len(alive)} older checkpoints are still in memory: keep a running mean, not them"
        state = _Checkpoint(load_checkpoint(path)[0])
        held.append(weakref.ref(state))
        yield state
        del state


def check_running_average(running_average) -> None:
    """Exercise 3: against transformer.checkpoint.average_checkpoints, holding one checkpoint at a time."""
    got = running_average(_one_at_a_time(last5))
    assert sorted(got) == sorted(averaged), "same names"
    for name in averaged:
        assert np.asarray(got[name]).dtype == averaged[name].dtype, f"{name}: keep the dtype"
        mt.assert_close(got[name], averaged[name], name=name)


# %% CHECK the checks: a wrong answer must fail them
def _unclipped(h, rf, max_n):
    out_m, out_t = [], []
    for n in range(1, max_n + 1):
        ref_grams = ngrams(rf, n)
        out_m.append(sum(k for g, k in ngrams(h, n).items() if g in ref_grams))
        out_t.append(max(len(h) - n + 1, 0))
    return out_m, out_t


assert fails(check_bleu_stats, _unclipped), "check_bleu_stats accepted unclipped counts"


def _stats_from_sacrebleu(h, rf, max_n):                            # the right counts, by sacreBLEU
    score = BLEU(tokenize="none", max_ngram_order=max_n).corpus_score([" ".join(h)], [[" ".join(rf)]])
    return score.counts, score.totals


assert fails(check_bleu_stats, _stats_from_sacrebleu), "check_bleu_stats accepted sacreBLEU's own statistics"
def _all_in_memory(checkpoints):                                # right numbers, but all five held at once
    everything = list(checkpoints)
    return {name: (sum(c[name].astype(np.float64) for c in everything) / len(everything)).astype(c[name].dtype)
            for name, c in ((n, everything[0]) for n in everything[0])}


assert fails(check_running_average, lambda checkpoints: dict(list(checkpoints)[-1])), "accepted the last checkpoint"
assert fails(check_running_average, _all_in_memory), "check_running_average accepted holding every checkpoint"

# %%
finish("13_bleu_and_checkpoint_averaging", {check_bleu_stats: "bleu_stats", check_running_average: "running_average"})
