# ---
# jupyter:
#   jupytext:
#     formats: py:percent
#     text_representation:
#       extension: .py
#       format_name: percent
# ---

# %% [markdown]
# # 11 · Greedy decoding and beam search with a length penalty
#
# > "we used beam search with a beam size of 4 and length penalty α = 0.6 ...
# > We set the maximum output length during inference to input length + 50,
# > but terminate early when possible." (§6.1)
#
# The model gives p(y_t | y_<t, x). Decoding looks for the output with the
# highest score. **Greedy** takes the single most probable token at each step;
# cheap, but one early choice that looks good can lead nowhere. **Beam search**
# keeps the k best partial outputs. Because every extra token multiplies in a
# probability < 1, raw log P favours short outputs; the paper's "length
# penalty" (from GNMT, Wu et al. 2016, which the paper cites but does not spell
# out) divides by lp(|Y|) = ((5 + |Y|)/6)^α.
#
# We test search on a **stand-in model** whose probabilities we know exactly,
# so the right answer can be found by brute force, then run it on a real
# trained Transformer. Shapes: B sentences, k beam, V vocab.

# %%
import contextlib
import itertools
import sys
from pathlib import Path
from types import SimpleNamespace

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt
import numpy as np

import minitensor as mt
from minitensor import optim
from train.threads import cpu_threads
from transformer import LabelSmoothingLoss, Transformer, TransformerConfig, beam_search, greedy_decode
from transformer.search import length_penalty

FAST = "--fast" in sys.argv
CHECK_SOLUTIONS = "--check-solutions" in sys.argv
HERE = Path(__file__).resolve().parent if "__file__" in globals() else Path.cwd()
OUT = HERE / "_out"
OUT.mkdir(exist_ok=True)
THREADS = contextlib.ExitStack()       # held until the script ends
THREADS.enter_context(cpu_threads(1))  # tiny matrices: extra BLAS/Numba threads only add overhead
PAD, UNK, BOS, EOS = 0, 1, 2, 3

# %% [markdown]
# ## 1. A model whose answer we know
#
# `search.py` needs only a small interface from the model: `config` (ids,
# max_len), `encode`, `init_cache`, `decode_step(cache, tokens) -> logits`, and
# `cache.reorder(rows)`. A *bigram* model, where the next token's log-probs
# depend only on the previous token (a (V, V) table), fits that interface in a
# few lines, and for short outputs we can score **every** possible output.

# %%
class BigramModel:
    """Next-token log-probs = table[previous token]; specials other than EOS are never produced."""

    def __init__(self, table, max_len=64):
        self.table = table                                          # (V, V) log-probs
        self.config = SimpleNamespace(pad_id=PAD, bos_id=BOS, eos_id=EOS, max_len=max_len)

    def encode(self, src_ids):
        return None                                                 # no encoder: the source only sets lengths

    def init_cache(self, src_ids, memory, beam):
        return self                                                 # nothing to cache: the token is the state

    def reorder(self, rows):
        pass                                                        # the token is the whole state: nothing to move

    def decode_step(self, cache, tokens):
        return self.table[np.asarray(tokens)]                       # (n,) -> (n, V)


def random_table(V, rng, sharpness=2.0):
    logits = rng.standard_normal((V, V)) * sharpness
    logits[:, [PAD, UNK, BOS]] = -1e9
    z = logits - logits.max(axis=1, keepdims=True)
    return z - np.log(np.exp(z).sum(axis=1, keepdims=True))        # each row a log-distribution


def sequence_log_prob(table, tokens, finished=True):
    """log P(tokens [+ EOS]) under the bigram table."""
    prev, total = BOS, 0.0
    for tok in list(tokens) + ([EOS] if finished else []):
        total, prev = total + table[prev, tok], tok
    return total


def exhaustive_best(table, max_len, alpha):
    """The output maximising log P / lp(|Y|) over every output of at most max_len tokens (EOS counted)."""
    words = [t for t in range(table.shape[0]) if t not in (PAD, UNK, BOS, EOS)]
    best, best_score = None, -np.inf
    for n in range(max_len + 1):
        for seq in itertools.product(words, repeat=n):
            if n < max_len:                                         # finished by EOS: n + 1 tokens
                score = sequence_log_prob(table, seq) / length_penalty(n + 1, alpha)
            else:                                                   # cut at the maximum length, no EOS
                score = sequence_log_prob(table, seq, finished=False) / length_penalty(n, alpha)
            if score > best_score:
                best, best_score = list(seq), score
    return best, best_score


# %% [markdown]
# ## 2. Greedy can miss the best output
#
# A table built to trap greedy: after BOS, token 4 has p = 0.55 and token 5 has
# p = 0.45; after 5, EOS is nearly certain; after 4 everything is uniform.
# Greedy commits to 4 and never recovers; a beam of 2 keeps 5 alive.

# %%
V = 7
trap = np.full((V, V), 1e-12)
trap[BOS, 4], trap[BOS, 5] = 0.55, 0.45
trap[4, 3:] = 0.25
trap[5, EOS], trap[5, 6] = 0.95, 0.05
trap[6, EOS], trap[EOS, EOS] = 1.0, 1.0
trap = np.log(trap / trap.sum(1, keepdims=True))
src = np.array([[4, 4]])                                            # 2 source tokens: max output 2 + 2
stub = BigramModel(trap)
greedy_out = greedy_decode(stub, src, max_len_b=2)[0]
beam_out = beam_search(stub, src, beam=2, alpha=0.0, max_len_b=2)[0]
print("greedy:", greedy_out, f"log P {sequence_log_prob(trap, greedy_out):.3f}",
      "| beam 2:", beam_out, f"log P {sequence_log_prob(trap, beam_out):.3f}")

# %% CHECK
assert greedy_out[0] == 4, "greedy takes the locally best first token"
assert beam_out == [5], "beam search keeps the second-best prefix alive and finds the better output"
assert sequence_log_prob(trap, beam_out) > sequence_log_prob(trap, greedy_out)

# %% [markdown]
# ## 3. Beam search from scratch
#
# At each step: extend every live hypothesis by every token, score by total
# log P, and walk down the best 2k candidates. An EOS candidate ranked among
# the first k **finishes** a hypothesis (its score is log P / lp(|Y|), EOS
# counted); the best k others stay live. Stop when k hypotheses have finished
# or at the maximum length (live ones are then finished as they are). Return
# the best finished one. Beam 1 is greedy.

# %%
def beam_search_scratch(table, max_len, k, alpha):
    live = [(0.0, [])]                                              # (log P, tokens)
    finished = []                                                   # (score, tokens)
    for t in range(1, max_len + 1):                                 # t = length after this step
        candidates = sorted(((lp + table[toks[-1] if toks else BOS, tok], toks, tok)
                             for lp, toks in live for tok in range(table.shape[0])), key=lambda c: -c[0])
        live = []
        for rank, (value, toks, tok) in enumerate(candidates[:2 * k]):
            if tok == EOS:
                if rank < k:
                    finished.append((value / length_penalty(t, alpha), toks))
            elif len(live) < k:
                live.append((value, toks + [tok]))
        if t == max_len:                                            # §6.1 maximum length reached
            finished += [(value / length_penalty(t, alpha), toks) for value, toks in live]
        if len(finished) >= k or t == max_len:
            break
    return max(finished, key=lambda f: f[0])[1]


# %% CHECK
check_rng = np.random.default_rng(0)
for trial in range(3 if FAST else 10):
    table = random_table(V, check_rng)
    model = BigramModel(table)
    src_trial = np.array([[4, 5]])                                  # max output length 2 + 2 = 4
    for alpha in (0.0, 0.6, 1.5):
        best, _ = exhaustive_best(table, 4, alpha)
        lib_wide = beam_search(model, src_trial, beam=300, alpha=alpha, max_len_b=2)[0]
        assert lib_wide == best, f"trial {trial} α={alpha}: a beam wider than all prefixes must find the optimum"
        for k in (1, 2, 4):
            assert beam_search(model, src_trial, beam=k, alpha=alpha, max_len_b=2)[0] == \
                beam_search_scratch(table, 4, k, alpha), f"trial {trial} α={alpha} k={k}: library vs scratch"
    assert beam_search(model, src_trial, beam=1, max_len_b=2) == greedy_decode(model, src_trial, max_len_b=2), \
        "beam 1 is greedy"

# %% [markdown]
# ## 4. The length penalty
#
# lp(|Y|) = ((5 + |Y|)/6)^α is 1 for a one-token output and grows slowly with
# length; dividing a negative log P by it shrinks long outputs' penalty. α = 0
# is raw log P (short outputs win); larger α favours longer outputs. The paper
# tuned α = 0.6 on the development set (§6.2: "beam search as described in the
# previous section").

# %%
lengths = np.arange(1, 51)
alphas = [0.0, 0.6, 1.0, 2.0]
fig, ax = plt.subplots(figsize=(6, 3.5))
for a in alphas:
    ax.plot(lengths, length_penalty(lengths, a), label=f"α = {a}")
ax.set_xlabel("|Y| (tokens, EOS included)")
ax.set_ylabel("lp(|Y|)")
ax.legend()
fig.tight_layout()
fig.savefig(OUT / "11_length_penalty.png", dpi=100)
plt.close(fig)

len_rng = np.random.default_rng(1)
mean_length = {a: [] for a in alphas}
for _ in range(20 if FAST else 60):
    table = random_table(V, len_rng, sharpness=1.0)
    for a in alphas:
        mean_length[a].append(len(exhaustive_best(table, 4, a)[0]))
mean_length = {a: float(np.mean(v)) for a, v in mean_length.items()}
print("mean length of the best output by α:", mean_length)

# %% CHECK
assert np.isclose(length_penalty(1, 0.6), 1.0) and np.isclose(length_penalty(10, 0.6), (15 / 6) ** 0.6)
values = [mean_length[a] for a in alphas]
assert all(b >= a for a, b in zip(values, values[1:])) and values[-1] > values[0], \
    f"a larger α must favour longer outputs: {mean_length}"

# %% [markdown]
# ## 5. On a trained Transformer
#
# A small model trained to reverse sequences for a few hundred steps. The
# library's `greedy_decode` and `beam_search` use the decoder's key/value cache
# (one new position per step). Beam 1 must reproduce greedy exactly, and a
# beam of 4 must do at least as well on held-out sequences.

# %%
Vt, L = 14, 7


def reverse_batch(n, rng):
    lengths = rng.integers(3, L + 1, size=n)
    src, tgt_in, tgt_out = (np.zeros((n, L + e), dtype=np.int64) for e in (0, 1, 1))
    for row, length in enumerate(lengths):
        seq = rng.integers(4, Vt, size=length)
        src[row, :length] = seq
        tgt_in[row, 0], tgt_in[row, 1:length + 1] = BOS, seq[::-1]
        tgt_out[row, :length], tgt_out[row, length] = seq[::-1], EOS
    return src, tgt_in, tgt_out


config = TransformerConfig.tiny(vocab_size=Vt, N=2, d_model=32, d_ff=64, h=4, p_drop=0.0, eps_ls=0.0, max_len=32)
net = Transformer(config, np.random.default_rng(0))
opt = optim.Adam(net.named_parameters(), lr=optim.NoamSchedule(32, warmup=100, factor=0.7))
loss_fn, train_rng = LabelSmoothingLoss(0.0, PAD), np.random.default_rng(1)
for step in range(300 if FAST else 1200):
    s, ti, to = reverse_batch(64, train_rng)
    opt.zero_grad()
    loss_fn(net(s, ti), to).loss.backward()
    opt.step()
test_src, _, test_out = reverse_batch(100, np.random.default_rng(7))
refs = [[t for t in row if t not in (PAD, EOS)] for row in test_out]
greedy_hyps = greedy_decode(net, test_src, max_len_b=5)
beam1 = beam_search(net, test_src, beam=1, max_len_b=5)
beam4 = beam_search(net, test_src, beam=4, alpha=0.6, max_len_b=5)
exact = {name: float(np.mean([h == r for h, r in zip(hyps, refs)]))
         for name, hyps in [("greedy", greedy_hyps), ("beam 4", beam4)]}
print("exact match on held-out reversals:", exact)

# %% CHECK
assert beam1 == greedy_hyps, "beam search with k = 1 must reproduce greedy decoding"
assert exact["greedy"] > 0.5, f"the model should reverse most sequences after training, got {exact['greedy']:.2f}"
assert exact["beam 4"] >= exact["greedy"] - 0.02, f"beam 4 should not be worse than greedy: {exact}"

# %% [markdown]
# ## Summary
# - Greedy commits to each token; beam search keeps k candidates and can recover from a locally good, globally bad start.
# - Finished hypotheses are compared by log P / ((5 + |Y|)/6)^α; α = 0.6 (§6.1) counteracts the bias towards short outputs.
# - Test search on a model you can solve by brute force: a wide enough beam must find the exhaustive optimum.
#
# ## Exercises
# 1. **Predict, then run.** With α = 0.6, which scores higher: a 10-token output with log P = −3.0 or a
#    2-token output with log P = −1.5? Compute both with `length_penalty`.
# 2. Write `brute_force_decode(table, max_len, alpha)` returning the best token list (no EOS) of a bigram
#    table, like `exhaustive_best`. `check_brute_force(fn)` compares it with a very wide library beam.
# 3. Write `rerank(hypotheses, alpha)`: given `(tokens, log_p)` pairs where log_p includes the EOS step,
#    return the tokens with the best length-normalised score (|Y| counts EOS). `check_rerank(fn)` tests it.

# %%
def check_brute_force(brute_force_decode) -> None:
    """Exercise 2: must match the library's beam search when the beam covers every prefix."""
    check = np.random.default_rng(5)
    for _ in range(3):
        table = random_table(6, check)
        for alpha in (0.0, 1.0):
            expected = beam_search(BigramModel(table), np.array([[4, 4]]), beam=300, alpha=alpha, max_len_b=2)[0]
            assert list(brute_force_decode(table, 4, alpha)) == expected, f"α = {alpha}"


def check_rerank(rerank) -> None:
    """Exercise 3: the normalisation must count EOS in |Y|."""
    hyps = [([4, 5, 6, 7, 8, 9, 4, 5, 6], -3.0), ([4], -1.5), ([5, 6], -2.0)]
    assert list(rerank(hyps, 0.0)) == [4], "α = 0: raw log P"
    assert list(rerank(hyps, 0.6)) == [4], "α = 0.6: -1.5/lp(2) beats -3/lp(10)"
    assert list(rerank(hyps, 2.0)) == [4, 5, 6, 7, 8, 9, 4, 5, 6], "α = 2: long outputs win"
    assert list(rerank([([4, 4, 4], -1.96), ([4], -1.5)], 1.0)) == [4], "-1.96/lp(4) < -1.5/lp(2) with EOS counted"


# %% CHECK the checks: a wrong answer must fail them
def _fails(check, wrong) -> bool:
    try:
        check(wrong)
    except AssertionError:
        return True
    return False


assert _fails(check_brute_force, lambda table, n, a: beam_search_scratch(table, n, 1, a)), "accepted greedy"
assert _fails(check_rerank, lambda hyps, a: max(hyps, key=lambda h: h[1] / length_penalty(len(h[0]), a))[0]), \
    "accepted a length that leaves out EOS"

# %%
if CHECK_SOLUTIONS:
    import importlib
    solutions = importlib.import_module("solutions.11_greedy_and_beam_search")
    check_brute_force(solutions.brute_force_decode)
    check_rerank(solutions.rerank)
    print("solutions OK")
print("chapter 11 OK")
