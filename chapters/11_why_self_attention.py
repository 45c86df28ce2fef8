# ---
# jupyter:
#   jupytext:
#     formats: py:percent
#     text_representation:
#       extension: .py
#       format_name: percent
# ---

# %% [markdown]
# # 11 · Why self-attention: Table 1, measured
#
# > Motivating our use of self-attention we consider three desiderata. One is the
# > total computational complexity per layer. Another is the amount of computation
# > that can be parallelized, as measured by the minimum number of sequential
# > operations required. The third is the path length between long-range
# > dependencies in the network. (§4)
#
# §4 compares a self-attention layer with the layers it replaced, each mapping n
# vectors of size d to n vectors of size d. Table 1 (n sequence length, d
# representation size, k kernel width, r neighbourhood size):
#
# | layer type | complexity per layer | sequential operations | maximum path length |
# | --- | --- | --- | --- |
# | self-attention | O(n²·d) | O(1) | O(1) |
# | recurrent | O(n·d²) | O(n) | O(n) |
# | convolutional | O(k·n·d²) | O(1) | O(log_k(n)) |
# | self-attention (restricted) | O(r·n·d) | O(1) | O(n/r) |
#
# We build one layer of each kind in NumPy and measure the three columns:
# multiply-adds and memory as n grows (time too, but only printed and plotted:
# timings depend on the machine), the sequential steps, and the longest path
# between an input and an output position.

# %%
import math
import time
import tracemalloc

import matplotlib.pyplot as plt
import numpy as np

from _common import FAST, calls_to, fails, finish, one_cpu_thread, show

THREADS = one_cpu_thread()
rng = np.random.default_rng(0)

# %% [markdown]
# ## 1. Three layers, n × d in, n × d out
#
# - **self-attention** (chapter 05, one head, projections left out: they are
#   the position-wise part every layer type has): scores X Xᵀ (n × n, d
#   multiply-adds each), a softmax per row, then the weighted sum (n × n × d);
# - **recurrent** (an Elman RNN): h_t = tanh(x_t W + h_{t−1} U), two d × d
#   products per position, and step t cannot start before step t − 1 is done;
# - **convolutional** (width k, centred, zero-padded): y_t = Σ_j x_{t+j−k//2} W_j,
#   k products of d × d per position, all positions at once.
#
# Each returns its output and the number of multiply-adds it did, counted from
# the shapes of its products.

# %%
def self_attention(x):
    n, d = x.shape
    scores = x @ x.T / math.sqrt(d)                                # (n, d) @ (d, n) -> (n, n): n²·d
    weights = np.exp(scores - scores.max(axis=1, keepdims=True))
    weights /= weights.sum(axis=1, keepdims=True)
    return weights @ x, 2 * n * n * d                              # (n, n) @ (n, d) -> (n, d): n²·d


def recurrent(x, W, U, cell=np.tanh):
    n, d = x.shape
    h, out = np.zeros(d), np.empty_like(x)
    for t in range(n):                                             # n sequential steps: t needs t − 1
        h = cell(x[t] @ W + h @ U)                                  # two (d,) @ (d, d): 2·d²
        out[t] = h
    return out, 2 * n * d * d


def convolution(x, W):
    n, d = x.shape
    k = W.shape[0]
    padded = np.pad(x, ((k // 2, k // 2), (0, 0)))                 # (n + k − 1, d)
    out = sum(padded[j:j + n] @ W[j] for j in range(k))            # k × (n, d) @ (d, d): k·n·d²
    return out, k * n * d * d


d, k = 64, 3
W, U = rng.standard_normal((d, d)) / np.sqrt(d), rng.standard_normal((d, d)) / np.sqrt(d)
W_conv = rng.standard_normal((k, d, d)) / np.sqrt(k * d)
x = rng.standard_normal((10, d))
conv_out, _ = convolution(x, W_conv)

# %% CHECK
assert self_attention(x)[0].shape == recurrent(x, W, U)[0].shape == conv_out.shape == (10, d), \
    "all three layers map (n, d) to (n, d)"
assert np.allclose(conv_out[4], sum(x[3 + j] @ W_conv[j] for j in range(k))), "position 4 mixes positions 3, 4, 5"

# %% [markdown]
# ## 2. Complexity per layer: work and memory as n grows
#
# > In terms of computational complexity, self-attention layers are faster than
# > recurrent layers when the sequence length n is smaller than the
# > representation dimensionality d, which is most often the case with sentence
# > representations used by state-of-the-art models in machine translations, such
# > as word-piece and byte-pair representations. (§4)
#
# 2n²·d against 2n·d² multiply-adds: the two cross at n = d. Memory tells the
# same story more sharply: attention holds an n × n weight matrix, the others
# only n × d activations. We measure peak memory with `tracemalloc` (NumPy
# reports its allocations to it) and time with `perf_counter`, for d = 64.

# %%
def measure(layer, n, repeats=3):
    """(multiply-adds, peak bytes allocated, best of `repeats` wall-clock seconds) for one layer on (n, d)."""
    xs = rng.standard_normal((n, d))
    seconds = []
    for _ in range(repeats):
        start = time.perf_counter()
        layer(xs)
        seconds.append(time.perf_counter() - start)
    tracemalloc.start()                                             # counts NumPy's allocations too
    _, flops = layer(xs)
    peak = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    return flops, peak, min(seconds)


layers = {"self-attention": self_attention, "recurrent": lambda xs: recurrent(xs, W, U),
          "convolution (k = 3)": lambda xs: convolution(xs, W_conv)}
ns = [16, 32, 64, 128, 256, 512, 1024, 2048]
results = {name: np.array([measure(layer, n) for n in ns]) for name, layer in layers.items()}   # (len(ns), 3)

fig, axes = plt.subplots(1, 3, figsize=(12, 3.5))
for name, rows in results.items():
    for ax, column, label in zip(axes, range(3), ("multiply-adds", "peak memory (bytes)", "time (s)")):
        ax.loglog(ns, rows[:, column], "o-", label=name)
        ax.set_xlabel("sequence length n")
        ax.set_ylabel(label)
axes[0].axvline(d, color="gray", ls="--", label="n = d")
axes[0].legend(fontsize=8)
show(fig, "11_table1_cost")
for name, rows in results.items():
    print(f"{name:20s} time at n = {ns[-1]}: {rows[-1, 2] * 1e3:7.1f} ms, peak memory {rows[-1, 1] / 1e6:6.2f} MB")


def slope(values):
    """Exponent p in values ∝ n^p, fitted over the larger half of the n's."""
    half = len(ns) // 2
    return float(np.polyfit(np.log(ns[half:]), np.log(values[half:]), 1)[0])


# %% CHECK
flops = {name: rows[:, 0] for name, rows in results.items()}
assert np.array_equal(flops["self-attention"] < flops["recurrent"], np.array(ns) < d), \
    "self-attention does fewer multiply-adds than the recurrent layer exactly when n < d"
memory = {name: slope(rows[:, 1]) for name, rows in results.items()}
print("memory grows like n^p with p =", {name: round(p, 2) for name, p in memory.items()})
assert 1.7 < memory["self-attention"] < 2.2, f"attention memory ∝ n² (the weight matrix), slope {memory}"
assert 0.8 < memory["recurrent"] < 1.2 and 0.8 < memory["convolution (k = 3)"] < 1.2, f"the others ∝ n: {memory}"

# %% [markdown]
# ## 3. Sequential operations
#
# > As noted in Table 1, a self-attention layer connects all positions with a
# > constant number of sequentially executed operations, whereas a recurrent
# > layer requires O(n) sequential operations. (§4)
#
# In `recurrent` the loop body at step t reads h from step t − 1: however many
# processors you have, the n steps run one after another. The attention and
# convolution layers are a handful of matrix products over all positions at
# once, which is what GPUs are built for. The time panel shows the consequence
# even on one CPU core: the recurrent layer pays a Python-level step per
# position, while the others hand whole matrices to BLAS. We count the
# dependent steps by handing the layer a cell that counts its calls.

# %%
class CountingTanh:
    """tanh that counts its calls: each call of the recurrent cell needs the previous call's output."""

    def __init__(self):
        self.calls = 0

    def __call__(self, z):
        self.calls += 1
        return np.tanh(z)


counter = CountingTanh()
recurrent(rng.standard_normal((37, d)), W, U, cell=counter)

# %% CHECK
assert counter.calls == 37, f"a recurrent layer over n = 37 positions runs 37 dependent steps, counted {counter.calls}"

# %% [markdown]
# ## 4. Maximum path length
#
# > The shorter these paths between any combination of positions in the input
# > and output sequences, the easier it is to learn long-range dependencies.
# > Hence we also compare the maximum path length between any two input and
# > output positions in networks composed of the different layer types. (§4)
#
# A signal from input position j reaches output position i along a chain of
# "hops", each one a layer (or a recurrent step) in which one position feeds
# another. Write one hop as a boolean n × n matrix `hop[i, j]` (position j
# feeds position i). After h hops, position j reaches i if some chain of h hops
# does: the boolean matrix power. The maximum path length is the number of hops
# after which every output position is reached from every input position.
#
# - self-attention: every position feeds every position in one hop;
# - recurrent: the input enters at its own position (one hop), then each
#   recurrent step moves it one position on (both directions, as in a
#   bidirectional RNN, else most pairs are never connected at all);
# - contiguous convolution of width k: one layer moves a signal k // 2 positions.
#
# > A single convolutional layer with kernel width k < n does not connect all
# > pairs of input and output positions. Doing so requires a stack of O(n/k)
# > convolutional layers in the case of contiguous kernels, or O(log_k(n)) in the
# > case of dilated convolutions, increasing the length of the longest paths
# > between any two positions in the network. (§4)

# %%
def max_path_length(hops, n):
    """Hops until every input position reaches every output position; hops(h, n) gives hop h+1 as a bool (n, n)."""
    reach, h = np.eye(n, dtype=bool), 0
    while not reach.all():
        reach = (hops(h, n).astype(np.int64) @ reach.astype(np.int64)) > 0   # one more hop
        h += 1
        if h > 10 * n:
            raise RuntimeError("these hops never connect every pair")
    return h


def band(n, width):
    """Position j feeds position i when |i − j| ≤ width."""
    offsets = np.arange(n)
    return np.abs(offsets[:, None] - offsets[None, :]) <= width


attention_hop = lambda h, n: np.ones((n, n), dtype=bool)                    # noqa: E731
recurrent_hop = lambda h, n: np.eye(n, dtype=bool) if h == 0 else band(n, 1)   # noqa: E731 - input, then steps
conv_hop = lambda h, n: band(n, k // 2)                                     # noqa: E731 - one layer of width k
path_ns = [4, 8, 16, 32, 64] + ([] if FAST else [128, 256])
paths = {name: [max_path_length(hop, n) for n in path_ns]
         for name, hop in [("self-attention", attention_hop), ("recurrent", recurrent_hop),
                           (f"convolution, k = {k}", conv_hop)]}

fig, ax = plt.subplots(figsize=(6, 3.5))
for name, values in paths.items():
    ax.plot(path_ns, values, "o-", label=name)
ax.set_xscale("log", base=2)
ax.set_yscale("log", base=2)
ax.set_xlabel("sequence length n")
ax.set_ylabel("maximum path length (hops)")
ax.legend()
show(fig, "11_path_length")
print({name: values for name, values in paths.items()})

# %% CHECK
assert paths["self-attention"] == [1] * len(path_ns), "self-attention: one hop between any two positions"
assert paths["recurrent"] == path_ns, "recurrent: n hops from the first input to the last output (1 + n − 1)"
assert paths[f"convolution, k = {k}"] == [math.ceil((n - 1) / (k // 2)) for n in path_ns], \
    "contiguous convolution: ⌈(n − 1)/(k // 2)⌉ layers, O(n/k)"

# %% [markdown]
# ## Summary
# - Self-attention costs O(n²·d) per layer against a recurrent layer's O(n·d²): cheaper while n < d, and it holds an n × n matrix (memory ∝ n²).
# - A recurrent layer needs n dependent steps; attention and convolution are a few big matrix products, all positions at once.
# - Any two positions are one attention hop apart; a recurrent layer needs up to n hops, a stack of width-k convolutions ⌈(n − 1)/(k // 2)⌉.
#
# ## Exercises
# 1. **Predict, then run.** The base model has d = 512 and WMT sentences of about n = 30 subword tokens. How
#    many times fewer multiply-adds does self-attention's 2n²·d need than a recurrent layer's 2n·d²? Above
#    which n would attention cost more? (Answer key: `PREDICT` in `chapters/solutions/11_why_self_attention.py`.)
# 2. §4 proposes restricting self-attention to a neighbourhood of size r centred on each output position.
#    Work out its maximum path length and write `restricted_path_length(n, r)` (r even: r/2 positions on
#    each side). `check_restricted_path_length(fn)` compares it with `max_path_length` on the right hops.
# 3. A dilated causal convolution (ByteNet, WaveNet) of width k uses dilation k^ℓ in layer ℓ = 0, 1, ...: output
#    t reads inputs t, t − k^ℓ, ..., t − (k − 1)·k^ℓ. Write `dilated_path_length(n, k)`: the number of layers
#    after which the last output reads every input. `check_dilated_path_length(fn)` simulates it.

# %%
def check_restricted_path_length(restricted_path_length) -> None:
    """Exercise 2: against the hop simulation for a neighbourhood of r/2 positions each side, for n and r drawn
    afresh each call; a formula, not this chapter's simulation."""
    check_rng = np.random.default_rng()
    for n, r in [(8, 2), (33, 4), (100, 10)] + [(int(n), 2 * int(h)) for n, h in zip(check_rng.integers(2, 120, size=4),
                                                                                     check_rng.integers(1, 12, size=4))]:
        with calls_to(max_path_length, band) as calls:
            got = int(restricted_path_length(n, r))
        assert not calls, "count the hops with a formula: the answer ran this chapter's simulation"
        expected = max_path_length(lambda h, n_, r_=r: band(n_, r_ // 2), n)
        assert got == expected, f"n = {n}, r = {r}: expected {expected} hops, got {got}"


def _dilated_layers(n, k):
    """Layers until output n − 1 of a causal dilated stack reads input 0 (and so every input)."""
    reach, layer = np.eye(n, dtype=bool)[n - 1], 0                 # which inputs output n − 1 reads so far
    while not reach.all():
        step = k ** layer
        reach = np.any([np.roll(reach, -m * step) & (np.arange(n) + m * step < n) for m in range(k)], axis=0)
        layer += 1
    return layer


def check_dilated_path_length(dilated_path_length) -> None:
    """Exercise 3: against a simulation of the causal dilated stack, for n and k also drawn afresh each call;
    counted from k^L ≥ n, not by this chapter's simulation."""
    check_rng = np.random.default_rng()
    cases = [(n, k_) for n in (2, 8, 9, 10, 27, 28, 100, 1000) for k_ in (2, 3)]
    for n, k_ in cases + [(int(n), int(k_)) for n, k_ in zip(check_rng.integers(2, 1500, size=4),
                                                             check_rng.integers(2, 6, size=4))]:
        with calls_to(_dilated_layers) as calls:
            got = int(dilated_path_length(n, k_))
        assert not calls, "count the layers from k^L ≥ n: the answer ran this chapter's simulation"
        expected = _dilated_layers(n, k_)
        assert got == expected, f"n = {n}, k = {k_}: expected {expected} layers, got {got}"


# %% CHECK the checks: a wrong answer must fail them
assert fails(check_restricted_path_length, lambda n, r: math.ceil(n / r)), "accepted n/r (off by one hop)"
assert fails(check_dilated_path_length, lambda n, k_: math.floor(math.log(n, k_))), "accepted ⌊log_k n⌋"
assert fails(check_restricted_path_length, lambda n, r: max_path_length(lambda h, n_: band(n_, r // 2), n)), \
    "check_restricted_path_length accepted this chapter's simulation"
assert fails(check_dilated_path_length, _dilated_layers), "check_dilated_path_length accepted this chapter's simulation"

# %%
finish("11_why_self_attention", {check_restricted_path_length: "restricted_path_length",
                                 check_dilated_path_length: "dilated_path_length"})
