# ---
# jupyter:
#   jupytext:
#     formats: py:percent
#     text_representation:
#       extension: .py
#       format_name: percent
# ---

# %% [markdown]
# # 12 · Decoding: the key/value cache, greedy decoding and beam search
#
# > We used beam search with a beam size of 4 and length penalty α = 0.6. These
# > hyperparameters were chosen after experimentation on the development set. We
# > set the maximum output length during inference to input length + 50, but
# > terminate early when possible. (§6.1)
#
# The model gives p(y_t | y_<t, x). Decoding looks for the output with the
# highest score. **Greedy** takes the single most probable token at each step
# (chapter 10 wrote it from its definition); cheap, but one early choice that
# looks good can lead nowhere. **Beam search** keeps the k best partial
# outputs. Because every extra token multiplies in a probability < 1, raw log P
# favours short outputs; the paper's "length penalty" (from GNMT, Wu et al.
# 2016, which the paper cites but does not spell out) divides by
# lp(|Y|) = ((5 + |Y|)/6)^α.
#
# We test search on a **stand-in model** whose probabilities we know exactly,
# so the right answer can be found by brute force. Then a real Transformer:
# first the **key/value cache** that makes each decoding step cost one position
# instead of the whole prefix, then a task where beam search measurably beats
# greedy decoding, and one where it cannot. Shapes: B sentences, k beam, V vocab.
#
# The library code this chapter builds:
# [`transformer/search.py`](../transformer/search.py).

# %%
import itertools
import time
from types import SimpleNamespace

import matplotlib.pyplot as plt
import numpy as np

import minitensor as mt
from _common import FAST, fails, finish, load_solutions, one_cpu_thread, show
from minitensor import optim
from transformer import LabelSmoothingLoss, Transformer, TransformerConfig, beam_search, fast_search, greedy_decode
from transformer.masks import subsequent_mask
from transformer.search import beam_search_nbest, length_penalty

THREADS = one_cpu_thread()
PAD, UNK, BOS, EOS = 0, 1, 2, 3

# %% [markdown]
# ## 1. A model whose answer we know
#
# `transformer/search.py` (the library's `greedy_decode` and `beam_search`) needs only a small interface from the model: `config` (ids,
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
assert sequence_log_prob(trap, beam_out) > sequence_log_prob(trap, greedy_out), \
    "beam search must find a more probable output than greedy on the trap"

# %% [markdown]
# ## 3. Beam search from scratch
#
# At each step: extend every live hypothesis by every token, score by total
# log P, and walk down the best 2k candidates. An EOS candidate ranked among
# the first k **finishes** a hypothesis (its score is log P / lp(|Y|), EOS
# counted); the best k others stay live. Stop when k hypotheses have finished
# or at the maximum length (live ones are then finished as they are). Return
# the best finished one. Beam 1 is greedy. (Stopping at k finished is the
# simplest rule, the library's `early_stop=True`; section 7 shows why the
# library by default decodes on, as the paper's code does.)

# %%
def k_finished(finished, live, t, k, alpha, max_len):
    return len(finished) >= k                                       # the stopping rule of this section


def beam_search_scratch(table, max_len, k, alpha, stop=k_finished):
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
        if t == max_len or stop(finished, live, t, k, alpha, max_len):
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
            assert beam_search(model, src_trial, beam=k, alpha=alpha, max_len_b=2, early_stop=True)[0] == \
                beam_search_scratch(table, 4, k, alpha), f"trial {trial} α={alpha} k={k}: library vs scratch"
    assert beam_search(model, src_trial, beam=1, max_len_b=2, early_stop=True) == \
        greedy_decode(model, src_trial, max_len_b=2), "beam 1 is greedy"

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
show(fig, "12_length_penalty")

len_rng = np.random.default_rng(1)
mean_length = {a: [] for a in alphas}
for _ in range(20 if FAST else 60):
    table = random_table(V, len_rng, sharpness=1.0)
    for a in alphas:
        mean_length[a].append(len(exhaustive_best(table, 4, a)[0]))
mean_length = {a: float(np.mean(v)) for a, v in mean_length.items()}
print("mean length of the best output by α:", mean_length)

# %% CHECK
assert np.isclose(length_penalty(1, 0.6), 1.0) and np.isclose(length_penalty(10, 0.6), (15 / 6) ** 0.6), \
    f"length_penalty must be GNMT's ((5 + |Y|)/6)^α: got lp(1) = {length_penalty(1, 0.6):.4f} (expected 1), " \
    f"lp(10) = {length_penalty(10, 0.6):.4f} (expected {(15 / 6) ** 0.6:.4f})"
values = [mean_length[a] for a in alphas]
assert all(b >= a for a, b in zip(values, values[1:])) and values[-1] > values[0], \
    f"a larger α must favour longer outputs: {mean_length}"

# %% [markdown]
# ## 5. The key/value cache
#
# Decoding runs the decoder once per output token. Run naively (chapter 10's
# `greedy_from_scratch`), step t recomputes all t positions of the prefix:
# O(T²) positions for a T-token output. But in the decoder nothing at position
# i ever depends on a later position (the causal mask), so the keys and values
# that position i's tokens produce in every self-attention layer are final once
# computed. Keep them, and each step only has to push the **one new token**
# through the layers: project its query, key and value, append the key and value
# to the cache, and attend over the whole cache. The encoder-decoder keys and
# values come from the memory, fixed for the sentence: projected once.
#
# Chapter 06's `MultiHeadAttention` is three steps, exposed as methods:
# `project_q`, `project_kv` and `attend(q, k, v, mask)`. Here is the cache for
# one self-attention layer, from scratch: one position at a time, it must give
# what causal attention over the whole sequence gives.

# %%
Vt = 26
demo_config = TransformerConfig.tiny(vocab_size=Vt, N=2, d_model=32, d_ff=64, h=4, p_drop=0.0, eps_ls=0.0,
                                     max_len=32)
net = Transformer(demo_config, np.random.default_rng(0))
attn = net.decoder.layers[0].self_attn                              # a MultiHeadAttention (chapter 06)
xs = mt.tensor(np.random.default_rng(1).standard_normal((2, 6, 32)).astype(np.float32))
full, _ = attn(xs, None, subsequent_mask(6))                        # every position at once, causal mask
cache_k = cache_v = None
steps_out = []
for t in range(6):
    new = xs[:, t:t + 1]                                            # (B, 1, D): the newest position only
    k_new, v_new = attn.project_kv(new)                             # (B, 1, H·K)
    cache_k = k_new if cache_k is None else mt.concat([cache_k, k_new], axis=1)   # (B, t, H·K) -> (B, t+1, H·K)
    cache_v = v_new if cache_v is None else mt.concat([cache_v, v_new], axis=1)
    out, _ = attn.attend(attn.project_q(new), cache_k, cache_v)     # no mask: the cache holds only the past
    steps_out.append(out.numpy())

# %% CHECK
mt.assert_close(np.concatenate(steps_out, axis=1), full.numpy(), name="cached attention, one position at a time",
                atol=1e-5)

# %% [markdown]
# The library keeps one such cache per decoder layer (`transformer.layers.LayerCache`,
# heads packed H·K wide) in a `DecoderCache`: `model.init_cache(src, memory, beam)`
# projects the encoder-decoder keys and values once, `model.decode_step(cache,
# tokens)` runs one step and appends, and `cache.reorder(rows)` lets beam search
# keep, drop and copy hypotheses (each row's cache follows its hypothesis). The
# check that matters: at every step, the cached logits equal the logits of a full
# forward pass over the prefix. Then the cost, in decoder positions processed
# and in time (printed only: timings depend on the machine; on a model this
# small, per-step overhead hides much of the saving, which grows with T and size).

# %%
def cached_vs_recomputed(model, src, prefix):
    """Largest difference between decode_step logits and full-forward logits at every position of prefix."""
    model.eval()
    with mt.no_grad():
        memory = model.encode(src)
        cache = model.init_cache(src, memory, 1)
        worst = 0.0
        for t in range(prefix.shape[1]):
            cached = model.decode_step(cache, prefix[:, t]).numpy()             # (B, V), one new position
            recomputed = model(src, prefix[:, :t + 1]).numpy()[:, -1]         # (B, V), the whole prefix again
            worst = max(worst, float(np.abs(cached - recomputed).max()))
    return worst


def time_decoding(model, src, T):
    """Seconds for T steps with the cache vs by recomputing the prefix (the same tokens fed)."""
    tokens = np.full((src.shape[0], T), 8)
    with mt.no_grad():
        start = time.perf_counter()
        cache = model.init_cache(src, model.encode(src), 1)
        for t in range(T):
            model.decode_step(cache, tokens[:, t])
        cached = time.perf_counter() - start
        start = time.perf_counter()
        for t in range(T):
            model(src, tokens[:, :t + 1])
        recomputed = time.perf_counter() - start
    return cached, recomputed


probe_src = np.random.default_rng(2).integers(4, 8, size=(4, 5))
probe_prefix = np.concatenate([np.full((4, 1), BOS), np.random.default_rng(3).integers(4, Vt, size=(4, 7))], axis=1)
T_long = 24 if FAST else 30
fast_s, slow_s = time_decoding(net.eval(), probe_src, T_long)
print(f"{T_long} decoding steps: cached {fast_s * 1e3:.0f} ms ({T_long} positions through the decoder), "
      f"recomputed {slow_s * 1e3:.0f} ms ({T_long * (T_long + 1) // 2} positions)")

# %% CHECK
assert cached_vs_recomputed(net, probe_src, probe_prefix) < 1e-4, "cached decoding must give the full forward's logits"

# %% [markdown]
# Every config decodes with `impl = "fused"`: its cache holds keys and values
# time-major, position by position, as the fused model computes them, and
# beam search's `reorder` moves them in that layout. Hold it to the model
# above: in float64, the fused model's cached logits must be the full forward's,
# and beam search (which reorders the cache at every step) must find the same
# outputs as on the composed model with the same weights.

# %%
fused_net = Transformer(demo_config.replace(impl="fused"), np.random.default_rng(0), backend="numba",
                        precision="fp64").eval()
composed_net = Transformer(demo_config, np.random.default_rng(0), precision="fp64").eval()
composed_net.load_state_dict(fused_net.state_dict())
fused_beams = beam_search_nbest(fused_net, probe_src, beam=4, alpha=0.6, max_len_b=6, nbest=4)
composed_beams = beam_search_nbest(composed_net, probe_src, beam=4, alpha=0.6, max_len_b=6, nbest=4)

# %% CHECK
assert cached_vs_recomputed(fused_net, probe_src, probe_prefix) < 1e-9, \
    "the fused model's KV cache (impl='fused', time-major): cached logits must be the full forward's"
for row, (fused_row, composed_row) in enumerate(zip(fused_beams, composed_beams)):
    assert [t for _, t in fused_row] == [t for _, t in composed_row], \
        f"the fused model's KV cache under beam search (reorder every step): sentence {row}'s 4 best differ " \
        f"from the composed model's: {fused_row} vs {composed_row}"
    mt.assert_close(np.array([sc for sc, _ in fused_row]), np.array([sc for sc, _ in composed_row]),
                    name="the fused model's KV cache under beam search: scores vs the composed model's")

# %% [markdown]
# ## 6. Where beam search beats greedy, and where it cannot
#
# On a task where every source has one right output and the model has learned
# it (the copy task of chapter 10, the number task of chapter 15), the most
# probable next token is right at every step, greedy already finds the best
# output, and beam search changes nothing. Beam search earns its cost when
# the model is *uncertain* in a way a single step cannot resolve, as in the
# trap of section 2. Here is a task with that trap built in. Each source symbol
# s becomes a two-token target phrase:
#
# - "ambiguous" symbols (4, 5): with probability 0.6 the phrase A_s followed by
#   one of 6 filler tokens (0.1 each), with probability 0.4 the fixed phrase B_s C_s;
# - "sure" symbols (6, 7): always B_s C_s.
#
# The single most probable phrase is B_s C_s (0.4 against 0.1), but its first
# token is the less probable one (0.4 against 0.6): greedy takes A_s and ends up
# with an output of probability 0.1 per ambiguous symbol, beam search keeps B_s
# alive. We train a Transformer on samples of this distribution (it has to
# learn the probabilities, not just one answer), then compare the two searches
# by the model's own log-probability of their outputs and by how often they
# produce the most probable output.

# %%
AMBIGUOUS, SURE = (4, 5), (6, 7)
A_OF, B_OF, C_OF = {s: 4 + s for s in range(4, 8)}, {s: 8 + s for s in range(4, 8)}, {s: 12 + s for s in range(4, 8)}
FILLERS = list(range(20, 26))


def phrase_batch(n, rng, symbols=(4, 5, 6, 7)):
    """Sources of 1-3 symbols and targets sampled from the phrase distribution; also the most probable target."""
    src, tgt_in, tgt_out, modes = np.zeros((n, 3), np.int64), np.zeros((n, 7), np.int64), np.zeros((n, 7), np.int64), []
    for row in range(n):
        seq = rng.choice(symbols, size=rng.integers(1, 4))
        target, mode = [], []
        for s in seq:
            ambiguous_draw = s in AMBIGUOUS and rng.random() < 0.6
            target += [A_OF[s], int(rng.choice(FILLERS))] if ambiguous_draw else [B_OF[s], C_OF[s]]
            mode += [B_OF[s], C_OF[s]]
        src[row, :len(seq)] = seq
        tgt_in[row, 0], tgt_in[row, 1:len(target) + 1] = BOS, target
        tgt_out[row, :len(target)], tgt_out[row, len(target)] = target, EOS
        modes.append(mode)
    return src, tgt_in, tgt_out, modes


def model_log_prob(model, src, outputs):
    """log P(output + EOS | src) under the model, one output per source row."""
    rows = []
    with mt.no_grad():
        for s_row, out in zip(src, outputs):
            tokens = [BOS] + list(out) + [EOS]
            logits = model(s_row[None], np.array([tokens[:-1]])).numpy()[0].astype(np.float64)   # (T, V)
            logp = logits - np.logaddexp.reduce(logits, axis=-1, keepdims=True)
            rows.append(float(logp[np.arange(len(tokens) - 1), tokens[1:]].sum()))
    return np.array(rows)


opt = optim.Adam(net.named_parameters(), lr=optim.NoamSchedule(32, warmup=100, factor=1.0))
loss_fn, train_rng = LabelSmoothingLoss(0.0, PAD), np.random.default_rng(4)
net.train()
for step in range(300 if FAST else 1000):
    s, ti, to, _ = phrase_batch(64, train_rng)
    opt.zero_grad()
    loss_fn(net(s, ti), to).loss.backward()
    opt.step()
test_src, _, _, test_modes = phrase_batch(150, np.random.default_rng(7))
greedy_out = greedy_decode(net, test_src, max_len_b=5)
beam_out = beam_search(net, test_src, beam=4, alpha=0.6, max_len_b=5)
mode_match = {name: float(np.mean([o == m for o, m in zip(outs, test_modes)]))
              for name, outs in [("greedy", greedy_out), ("beam 4", beam_out)]}
log_p = {"greedy": model_log_prob(net, test_src, greedy_out), "beam 4": model_log_prob(net, test_src, beam_out)}
sure_src, _, _, sure_modes = phrase_batch(60, np.random.default_rng(8), symbols=SURE)
sure_greedy, sure_beam = greedy_decode(net, sure_src, max_len_b=5), beam_search(net, sure_src, beam=4, max_len_b=5)
print(f"most probable output found: {mode_match}; mean model log P: "
      f"greedy {log_p['greedy'].mean():.2f}, beam 4 {log_p['beam 4'].mean():.2f}")
print(f"sources with sure symbols only: greedy = beam on {np.mean([g == b for g, b in zip(sure_greedy, sure_beam)]):.0%}")

fig, ax = plt.subplots(figsize=(5, 4))
ax.scatter(log_p["greedy"], log_p["beam 4"], s=12)
lims = [min(log_p["greedy"].min(), log_p["beam 4"].min()) - 0.3, 0.1]
ax.plot(lims, lims, "k--", lw=1, label="beam = greedy")
ax.set_xlabel("log P(greedy output)")
ax.set_ylabel("log P(beam-4 output)")
ax.legend()
show(fig, "12_beam_vs_greedy")

# %% [markdown]
# Beam search moves hypotheses between rows at every step, and `cache.reorder`
# must move their cached keys and values with them. The test: beam search over a
# wrapper that has no cache at all and recomputes every row's whole prefix must
# find outputs just as probable (fillers tie at 0.1 each, so the outputs
# themselves may differ where two are equally good).

# %%
class Recompute:
    """The search interface with no cache: each step runs the full model on every row's whole prefix."""

    def __init__(self, model):
        self.model, self.config = model, model.config

    def eval(self):
        self.model.eval()

    def encode(self, src):
        return None

    def init_cache(self, src, memory, beam):
        self.src, self.prefix = np.repeat(src, beam, axis=0), np.zeros((len(src) * beam, 0), np.int64)
        return self

    def decode_step(self, cache, tokens):
        self.prefix = np.concatenate([self.prefix, np.asarray(tokens)[:, None]], axis=1)   # (n, t) -> (n, t+1)
        return self.model(self.src, self.prefix).numpy()[:, -1]                       # (n, V)

    def reorder(self, rows):
        self.prefix = self.prefix[rows]                                                # follow the hypotheses


recomputed_beam = beam_search(Recompute(net), test_src[:40], beam=4, alpha=0.6, max_len_b=5)

# %% CHECK
assert beam_search(net, test_src, beam=1, max_len_b=5, early_stop=True) == greedy_out, \
    "beam search with k = 1 (stopped at the first finished hypothesis) is greedy decoding"
mt.assert_close(model_log_prob(net, test_src[:40], beam_out[:40]), model_log_prob(net, test_src[:40], recomputed_beam),
                name="beam search with the cache vs recomputing every prefix (log P of the outputs)", atol=1e-3)
assert mode_match["beam 4"] > mode_match["greedy"] + 0.3, f"beam 4 must find the most probable output far more often: {mode_match}"
assert (log_p["beam 4"] >= log_p["greedy"] - 1e-4).mean() > 0.95, "beam's outputs are (almost) never less probable"
assert log_p["beam 4"].mean() > log_p["greedy"].mean() + 0.5, f"beam 4 must score clearly higher: {log_p}"
assert sure_greedy == sure_beam == sure_modes, "where the model is sure, greedy already finds the best output"

# %% [markdown]
# ## 7. When to stop
#
# Section 3 stops a sentence as soon as k hypotheses have finished. That is
# quick, and on the demo's number task it is wrong once in 500 sentences:
# "twelve" is four subword pieces in German (zw·ö·l·f) and "twenty" one
# (zwanzig), so on test sentence 92 four poor hypotheses, each a piece or more
# shorter, finish while the right one, by far the most probable (log P = −0.91),
# is still live. The search stops and returns "zwanzig" (score −3.78) where
# greedy decoding found "zwölf" (−0.43).
#
# tensor2tensor, the code behind the paper's numbers ("terminate early when
# possible", §6.1), stops only when no live hypothesis can still win. The bound
# is cheap: every further token multiplies in a probability ≤ 1, so log P only
# falls, and lp grows with length up to lp(L) at the length limit L. A live
# hypothesis with log P = ℓ (≤ 0) can therefore at best score ℓ / lp(L) (for
# α ≥ 0). Once the worst finished hypothesis we keep scores at least that much,
# decoding more cannot change the answer. The library does this by default;
# `early_stop=True` keeps section 3's rule for speed. In section 3's
# `beam_search_scratch` the rule is the `stop` argument; here is the bound as one.
#
# The same trap in a bigram table: after BOS, the right path 4 4 4 4 4 is likely
# at every step (0.9 each, then EOS), and at each step token 5 branches off
# (0.1) and ends at once. Each of those short outputs ranks among the best four
# candidates and finishes, so four have finished before the right one ends.

# %%
def no_live_one_can_win(finished, live, t, k, alpha, max_len):
    """Stop when the best live hypothesis, at its best possible score, cannot beat a finished one."""
    if not live:
        return True
    best_possible = live[0][0] / max(length_penalty(t + 1, alpha), length_penalty(max_len, alpha))
    return max(score for score, _ in finished or [(-np.inf, None)]) >= best_possible


late = np.full((V, V), 1e-12)
late[BOS, 4], late[BOS, 5] = 0.9, 0.1                               # the right path: 4 (0.9 each step)
late[4, 4], late[4, 5] = 0.9, 0.1                                   # ... and 5 branches off every time
late[5, EOS], late[5, 6] = 0.9, 0.1                                 # 5 ends at once: a short, poor output
late[6, EOS], late[EOS, EOS] = 1.0, 1.0
late = np.log(late / late.sum(1, keepdims=True))


ending = np.full(V, 1e-12)
ending[EOS], ending[4:] = 0.9, 0.1 / (V - 4)
ending = np.log(ending / ending.sum())                              # after the 5th 4: EOS (0.9)


class LateEnd(BigramModel):
    """The table above, except that the 5th token 4 in a row is followed by `ending`: the right output ends."""

    def init_cache(self, src_ids, memory, beam):
        self.run = np.zeros(len(src_ids) * beam, dtype=int)        # how many 4s each row has in a row
        return self

    def reorder(self, rows):
        self.run = self.run[rows]

    def decode_step(self, cache, tokens):
        tokens = np.asarray(tokens)
        self.run = np.where(tokens == 4, self.run + 1, 0)
        logp = self.table[tokens].copy()                            # (n, V)
        logp[self.run == 5] = ending
        return logp


late_model, late_src = LateEnd(late), np.array([[4, 4, 4, 4, 4]])
outputs = {"greedy": greedy_decode(late_model, late_src)[0],
           "beam 4, stop at 4 finished": beam_search(late_model, late_src, beam=4, early_stop=True)[0],
           "beam 4, stop when no live one can win": beam_search(late_model, late_src, beam=4)[0]}
for name, out in outputs.items():
    print(f"{name:38s} {out}")

# %% CHECK
assert outputs["greedy"] == [4] * 5, "greedy follows the likely path to its end"
assert outputs["beam 4, stop at 4 finished"] != [4] * 5, "four short outputs finish first: the old rule stops"
assert outputs["beam 4, stop when no live one can win"] == [4] * 5, "the bound keeps decoding until it ends"
bound_rng = np.random.default_rng(5)
for trial in range(3 if FAST else 10):
    table = random_table(V, bound_rng)
    for k in (1, 2, 4):
        assert beam_search(BigramModel(table), np.array([[4, 5]]), beam=k, alpha=0.6, max_len_b=2)[0] == \
            beam_search_scratch(table, 4, k, 0.6, stop=no_live_one_can_win), f"trial {trial} k={k}: library vs scratch"

# %% [markdown]
# A wrong bound rarely changes the output on short outputs: it must be checked
# where it bites, on outputs long enough, and α large enough, for lp(L) to
# differ much from lp(t + 1). There it changes *when* the search stops far
# more often than what it returns, so we count the steps: the library must
# decode exactly as many as our search with the bound, and return the same
# output. And a beam wider than every prefix, with the bound, must find the
# output that enumerating all of them finds, at up to 6 tokens.

# %%
class CountingBigram(BigramModel):
    """BigramModel that counts its decoding steps."""

    def init_cache(self, src_ids, memory, beam):
        self.steps = 0
        return self

    def decode_step(self, cache, tokens):
        self.steps += 1
        return super().decode_step(cache, tokens)


def scratch_with_bound(table, max_len, k, alpha):
    """(output, steps decoded) of section 3's search with the bound as its stop rule."""
    stops = []

    def stop(*state):
        stops.append(no_live_one_can_win(*state))
        return stops[-1]

    return beam_search_scratch(table, max_len, k, alpha, stop=stop), (len(stops) if stops and stops[-1] else max_len)


long_rng, disagreements = np.random.default_rng(11), []
for trial in range(8 if FAST else 30):
    table = random_table(V, long_rng, sharpness=1.0)
    for alpha in (0.6, 1.5):
        for k in (2, 4):
            counting = CountingBigram(table)
            library_out = beam_search(counting, np.array([[4, 5, 6, 4]]), beam=k, alpha=alpha, max_len_b=6)[0]
            ours_out, ours_steps = scratch_with_bound(table, 10, k, alpha)
            if (library_out, counting.steps) != (ours_out, ours_steps):
                disagreements.append((trial, alpha, k, library_out, counting.steps, ours_out, ours_steps))
wide_rng = np.random.default_rng(12)
wide_misses = []
for trial in range(2 if FAST else 6):
    table = random_table(V, wide_rng, sharpness=1.0)
    table[:, 4] = -1e9                                              # 3 words (5, 6, 7): 3⁵ prefixes < 300
    table = table - np.logaddexp.reduce(table, axis=1, keepdims=True)
    for alpha in (0.6, 2.0):
        best, _ = exhaustive_best(table, 6, alpha)
        wide = beam_search(BigramModel(table), np.array([[5, 6, 7, 5]]), beam=300, alpha=alpha, max_len_b=2)[0]
        if wide != best:
            wide_misses.append((trial, alpha, wide, best))

# %% CHECK
assert not disagreements, \
    "the stopping bound (§6.1, stop when no live hypothesis can still win) on outputs of up to 10 tokens: " \
    f"the library's (output, steps) differ from ours: {disagreements[:3]}"
assert not wide_misses, \
    f"the stopping bound: a beam wider than every prefix must find the exhaustive optimum (6 tokens): {wide_misses[:3]}"

# %% [markdown]
# PAD and BOS are never outputs (`transformer/search.py`): a model may give
# them probability (an untrained one does), and the search must not take them.
# A table that prefers them at every step must still give the best output over
# the real words.

# %%
specials_first = random_table(V, np.random.default_rng(13), sharpness=1.0)
specials_first[:, [PAD, BOS]] = np.log(0.45)                       # the two likeliest tokens at every step
specials_first[:, 4:] -= 3.0
specials_first = specials_first - np.logaddexp.reduce(specials_first, axis=1, keepdims=True)
specials_outputs = {"greedy": greedy_decode(BigramModel(specials_first), np.array([[4, 5]]), max_len_b=2)[0],
                    "beam 4": beam_search(BigramModel(specials_first), np.array([[4, 5]]), beam=4, alpha=0.6,
                                          max_len_b=2)[0]}
no_specials = specials_first.copy()
no_specials[:, [PAD, BOS]] = -np.inf

# %% CHECK
for name, out in specials_outputs.items():
    assert PAD not in out and BOS not in out, f"PAD and BOS are never outputs of the search: {name} gave {out}"
assert specials_outputs["beam 4"] == beam_search_scratch(no_specials, 4, 4, 0.6, stop=no_live_one_can_win), \
    "PAD and BOS kept out of the search: beam 4 must find our search's output over the real words"

# %% [markdown]
# The bound does not make beam search exact: a hypothesis that leaves the beam
# is gone, so beam k can still lose to greedy when k other prefixes crowd the
# greedy one out (as the decoys of exercise 2 crowd out the key). What it removes
# is the one loss that was not the beam's fault: a hypothesis still in the beam,
# dropped because others finished first.
#
# `python -m train translate` runs these searches on a CPU as
# `transformer/fast_search.py`: the same decisions on the same numbers, with the
# keys and values written once into an arena and hypotheses moved by copying
# index rows instead of section 5's per-step concatenation and `reorder` copies,
# the beams of a sentence sharing its encoder-decoder keys, and finished
# sentences leaving the batch. On section 6's network it must find outputs
# exactly as probable as the searches of this chapter.

# %%
fast_greedy = fast_search.greedy_decode(net, test_src, max_len_b=5)
fast_beam = fast_search.beam_search(net, test_src, beam=4, alpha=0.6, max_len_b=5)

# %% CHECK
mt.assert_close(model_log_prob(net, test_src, fast_greedy), log_p["greedy"], atol=1e-4,
                name="log P of the fast greedy outputs vs this chapter's")
mt.assert_close(model_log_prob(net, test_src, fast_beam), log_p["beam 4"], atol=1e-4,
                name="log P of the fast beam-4 outputs vs this chapter's")

# %% [markdown]
# ## Summary
# - The key/value cache makes a decoding step cost one position: earlier positions' keys and values never change under the causal mask.
# - Greedy commits to each token; beam search keeps k candidates and wins when the best output starts with a less likely token; where the model is sure they agree.
# - Finished hypotheses are compared by log P / ((5 + |Y|)/6)^α (§6.1, α = 0.6); stop only when no live one can still win; test search on a model you can solve by brute force.
#
# ## Exercises
# 1. **Predict, then run.** With α = 0.6, which scores higher: a 10-token output with log P = −3.0 or a
#    2-token output with log P = −1.5? Compute both with `length_penalty`.
#    (Answer key: `PREDICT` in `chapters/solutions/12_greedy_beam_search_and_kv_cache.py`.)
# 2. The trap of section 2 fools greedy (beam 1) but not beam 2. Generalise it: write `beam_trap(k)`
#    returning a (V, V) bigram log-prob table (rows are log-distributions, V ≤ 12) on which beam k **misses**
#    the exhaustive optimum (α = 0, outputs of at most 4 tokens) but beam k + 1 finds it.
#    `check_beam_trap(fn)` tests k = 1, 2, 3.
# 3. Write `rerank(hypotheses, alpha)`: given `(tokens, log_p)` pairs where log_p includes the EOS step,
#    return the tokens with the best length-normalised score (|Y| counts EOS). `check_rerank(fn)` tests it.

# %%
def check_beam_trap(beam_trap) -> None:
    """Exercise 2: beam k misses the exhaustive optimum, beam k + 1 finds it (α = 0, at most 4 output tokens), for
    k = 1 and two beam widths drawn afresh each call (one above 3): a construction, not a table of a few traps."""
    check_rng = np.random.default_rng()
    for k_ in (1, int(check_rng.integers(2, 4)), int(check_rng.integers(4, 6))):
        table = np.asarray(beam_trap(k_), dtype=np.float64)
        assert table.ndim == 2 and table.shape[0] == table.shape[1] <= 12, f"k = {k_}: a (V, V) table, V ≤ 12"
        assert np.allclose(np.logaddexp.reduce(table, axis=1), 0.0, atol=1e-6), "every row must be a log-distribution"
        stub_ = BigramModel(table)
        best, _ = exhaustive_best(table, 4, 0.0)
        src_ = np.array([[4, 4]])                                   # max output length 2 + 2 = 4
        assert beam_search(stub_, src_, beam=k_, alpha=0.0, max_len_b=2)[0] != best, f"beam {k_} finds the optimum"
        assert beam_search(stub_, src_, beam=k_ + 1, alpha=0.0, max_len_b=2)[0] == best, f"beam {k_ + 1} misses it"


def check_rerank(rerank) -> None:
    """Exercise 3: the normalisation must count EOS in |Y|, on the lists below and on lists drawn afresh each call."""
    hyps = [([4, 5, 6, 7, 8, 9, 4, 5, 6], -3.0), ([4], -1.5), ([5, 6], -2.0)]
    assert list(rerank(hyps, 0.0)) == [4], "α = 0: raw log P"
    assert list(rerank(hyps, 0.6)) == [4], "α = 0.6: -1.5/lp(2) beats -3/lp(10)"
    assert list(rerank(hyps, 2.0)) == [4, 5, 6, 7, 8, 9, 4, 5, 6], "α = 2: long outputs win"
    assert list(rerank([([4, 4, 4], -1.96), ([4], -1.5)], 1.0)) == [4], "-1.96/lp(4) < -1.5/lp(2) with EOS counted"
    check_rng = np.random.default_rng()
    for _ in range(20):
        drawn = [(list(check_rng.integers(4, 50, size=int(n))), float(-check_rng.uniform(0.1, 10)))
                 for n in check_rng.integers(0, 15, size=int(check_rng.integers(2, 8)))]
        a = float(check_rng.uniform(0, 2))
        best = max(drawn, key=lambda h: h[1] / length_penalty(len(h[0]) + 1, a))[0]
        assert list(rerank(drawn, a)) == best, f"α = {a:.2f}: the best of {drawn} (EOS counted) is {best}"


# %% CHECK the checks: a wrong answer must fail them
assert fails(check_beam_trap, lambda k_: trap), "accepted a trap that only fools greedy (k = 1)"
assert fails(check_rerank, lambda hyps, a: max(hyps, key=lambda h: h[1] / length_penalty(len(h[0]), a))[0]), \
    "accepted a length that leaves out EOS"


def _traps_for_the_fixed_widths(k_):                               # right for k = 1, 2, 3 only: a table of three traps
    return load_solutions("12_greedy_beam_search_and_kv_cache").beam_trap(k_) if k_ <= 3 else trap


def _rerank_for_the_fixed_lists(hyps, a):                           # right on the four fixed lists only
    return hyps[0][0] if a >= 2 else min(hyps, key=lambda h: len(h[0]))[0]


assert fails(check_beam_trap, _traps_for_the_fixed_widths), "check_beam_trap accepted traps for k ≤ 3 only"
assert fails(check_rerank, _rerank_for_the_fixed_lists), "check_rerank accepted answers for its fixed lists only"

# %%
finish("12_greedy_beam_search_and_kv_cache", {check_beam_trap: "beam_trap", check_rerank: "rerank"})
