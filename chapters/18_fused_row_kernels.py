# ---
# jupyter:
#   jupytext:
#     formats: py:percent
#     text_representation:
#       extension: .py
#       format_name: percent
# ---

# %% [markdown]
# # 18 · Fused row kernels: softmax and LayerNorm, measured in bytes
#
# > We compute the dot products of the query with all keys, divide each by √d_k,
# > and apply a softmax function to obtain the weights on the values. (§3.2.1)
#
# $$\mathrm{Attention}(Q, K, V) = \mathrm{softmax}\left(\frac{QK^\top}{\sqrt{d_k}}\right)V \tag{1}$$
#
# > That is, the output of each sub-layer is LayerNorm(x + Sublayer(x)), where
# > Sublayer(x) is the function implemented by the sub-layer itself. (§3.1)
#
# Softmax and LayerNorm are **row** operations: each output row depends on one
# input row (of Tk scores, or of d_model features) and nothing else. They do a
# handful of FLOPs per number, so a GPU spends their time moving bytes, not
# computing: a row kernel is as fast as the bytes it moves. Chapter 17 made a
# matmul cheaper in loads; this chapter makes row kernels cheaper in bytes:
#
# 1. softmax with the max subtracted, then the **online** max-and-sum of
#    Milakov & Gimelshein (2018), which needs one pass over the row instead of two;
# 2. LayerNorm's variance: why E[x²] − E[x]² fails in float32, two-pass and Welford;
# 3. the bytes an unfused chain of kernels moves against one fused kernel, and
#    why 16-byte loads matter.
#
# Kernels run with `numba.cuda` on a GPU, or on the CUDA simulator (chapter 17)
# without one; the library's own numba.cuda kernels and NumPy references
# (`minitensor/kernels/{softmax,layernorm}_forward/`) are the yardsticks.
#
# Shapes: R rows, d the row length (Tk for softmax, d_model for LayerNorm), N = R·d.
#
# The library code this chapter builds:
# [`minitensor/kernels/softmax_forward/numba_cuda.py`](../minitensor/kernels/softmax_forward/numba_cuda.py),
# [`minitensor/kernels/layernorm_forward/numba_cuda.py`](../minitensor/kernels/layernorm_forward/numba_cuda.py).

# %%
import math
from collections import Counter

import matplotlib.pyplot as plt
import numpy as np

import minitensor as mt
from _common import FAST, OnePass, fails, finish, numba_cuda, show
from minitensor.backends.counting import CountingBackend
from minitensor.functions.composed import layer_norm_composed, softmax_composed
from minitensor.kernels.layernorm_forward.reference import layernorm_forward_ref
from minitensor.kernels.softmax_forward.reference import softmax_forward_ref

cuda, ON_GPU = numba_cuda()                  # before the kernels below import numba.cuda
from minitensor.kernels.layernorm_forward import numba_cuda as layernorm_cuda  # noqa: E402
from minitensor.kernels.softmax_forward import numba_cuda as softmax_cuda  # noqa: E402

rng = np.random.default_rng(0)
print("running the kernels on", "the GPU" if ON_GPU else "the CUDA simulator (no GPU here)")

# %% [markdown]
# ## 1. Softmax: subtract the max
#
# softmax(z)_j = e^{z_j} / Σ_i e^{z_i} overflows float32 as soon as a score
# passes 88.7 (e^{88.7} ≈ 3.4·10³⁸): inf / inf is NaN. Softmax does not change
# when the same constant is added to every entry (the e^c cancels), so every
# kernel computes e^{z_j − m} with m the row max: every exponent is ≤ 0, and the
# largest term is exactly 1, so the sum is at least 1.

# %%
scores = np.array([[1000.0, 999.0, 0.0], [1.0, 2.0, 3.0]], dtype=np.float32)
with np.errstate(over="ignore", invalid="ignore"):
    unshifted = np.exp(scores) / np.exp(scores).sum(axis=-1, keepdims=True)
shifted = np.exp(scores - scores.max(axis=-1, keepdims=True))
shifted /= shifted.sum(axis=-1, keepdims=True)
print("without the max:", unshifted[0], " with it:", shifted[0])

# %% CHECK
assert np.isnan(unshifted[0, :2]).all(), "e^1000 overflows float32: inf / inf"
mt.assert_close(shifted, softmax_forward_ref(scores, 1.0, None), name="max-subtracted softmax vs reference")
mt.assert_close(softmax_forward_ref(scores + 50, 1.0, None), softmax_forward_ref(scores, 1.0, None),
                name="softmax is shift-invariant")

# %% [markdown]
# ## 2. The online max and sum (Milakov & Gimelshein 2018)
#
# Subtracting the max costs a pass: read the row once for m, again for
# Σ e^{z_i − m}, and a third time to write e^{z_j − m} / Σ. The library's
# numba.cuda kernel does exactly these three passes. The online trick folds the
# first two into one. Keep a running max m and a running sum d **relative to it**:
#
# $$m_j = \max(m_{j-1}, z_j), \qquad d_j = d_{j-1} \cdot e^{m_{j-1} - m_j} + e^{z_j - m_j}$$
#
# By induction d_j = Σ_{i≤j} e^{z_i − m_j}: if d_{j−1} = Σ_{i<j} e^{z_i − m_{j−1}},
# multiplying by e^{m_{j−1} − m_j} moves every term to the new max, and the new
# entry adds its own. More useful still, the same formula merges **any two**
# partial states (m₁, d₁), (m₂, d₂) of disjoint pieces of the row:
#
# $$m = \max(m_1, m_2), \qquad d = d_1 e^{m_1 - m} + d_2 e^{m_2 - m}$$
#
# and one element z is the state (z, 1), so the running update *is* a merge. A
# merge is associative, so the threads of a block can each run over their own
# slice of the row and combine their states in any tree: a parallel one-pass
# reduction. (The library's CUDA v2 does this across a warp with shuffles,
# `online_merge` in common.cuh.) An empty state is (−∞, 0).

# %%
def merge(m1, d1, m2, d2):
    """(max, sum of e^(z - max)) of two disjoint pieces of a row, from each piece's own (max, sum)."""
    m = max(m1, m2)
    if m == -math.inf:                                      # two empty pieces: nothing to rescale
        return m, 0.0
    return m, d1 * math.exp(m1 - m) + d2 * math.exp(m2 - m)


def online_stats(row):
    """One pass: (m, d) = (max z, Σ e^(z - max z)), updating with each element as the state (z, 1)."""
    m, d = -math.inf, 0.0
    for z in row:
        m, d = merge(m, d, float(z), 1.0)
    return m, d


row = rng.standard_normal(50) * 5
two_pass = (row.max(), np.exp(row - row.max()).sum())
split = rng.integers(1, 49)
halves = merge(*online_stats(row[:split]), *online_stats(row[split:]))
pieces = [online_stats(piece) for piece in np.array_split(row, 8)]
while len(pieces) > 1:                                       # a tree of merges, as a block would do it
    pieces = [merge(*pieces[i], *pieces[i + 1]) if i + 1 < len(pieces) else pieces[i]
              for i in range(0, len(pieces), 2)]

# %% CHECK
for name, (m, d) in (("one pass", online_stats(row)), (f"two halves split at {split}", halves),
                     ("a tree of 8 pieces", pieces[0])):
    assert m == two_pass[0] and abs(d - two_pass[1]) < 1e-12 * two_pass[1], f"online stats, {name}: {(m, d)}"

# %% [markdown]
# ### As a kernel: one block per row
#
# Each of the block's threads runs the online update over a strided slice of the
# row (thread t takes entries t, t + 32, …: neighbouring threads read
# neighbouring entries), the 32 states are merged by a tree in shared memory
# (5 steps), and a second pass writes e^{z_j − m} / d. That is 2 reads of x and
# 1 write of y per entry, against the library's 3 reads. `reads` counts the
# global loads per row, as chapter 17 counted them.

# %%
THREADS = 32
merge_d = cuda.jit(device=True)(merge)


@cuda.jit
def softmax_online(y, x, reads):
    row, tid = cuda.blockIdx.x, cuda.threadIdx.x
    ms = cuda.shared.array(THREADS, np.float64)             # every thread's running max ...
    ds = cuda.shared.array(THREADS, np.float64)             # ... and its sum relative to that max
    m, d = -math.inf, 0.0
    for j in range(tid, x.shape[1], THREADS):               # pass 1: read x once, online (m, d)
        m, d = merge_d(m, d, x[row, j], 1.0)
        cuda.atomic.add(reads, row, 1)
    ms[tid], ds[tid] = m, d
    cuda.syncthreads()
    half = THREADS // 2
    while half > 0:                                         # tree merge: log2(THREADS) steps
        if tid < half:
            ms[tid], ds[tid] = merge_d(ms[tid], ds[tid], ms[tid + half], ds[tid + half])
        cuda.syncthreads()
        half //= 2
    m, d = ms[0], ds[0]
    for j in range(tid, x.shape[1], THREADS):               # pass 2: read x again, write y once
        y[row, j] = math.exp(x[row, j] - m) / d
        cuda.atomic.add(reads, row, 1)


R, d_row = (4, 80) if FAST else (16, 300)                   # 80 > 2·32: strided loops, idle-free tree
x = (rng.standard_normal((R, d_row)) * 4).astype(np.float32)
y_online, reads = np.zeros_like(x), np.zeros(R, dtype=np.int64)
softmax_online[R, THREADS](y_online, x, reads)
y_library = softmax_cuda.softmax_forward(x, 1.0, None)      # the library's numba.cuda kernel: 3 passes
y_ref = softmax_forward_ref(x, 1.0, None)

# %% CHECK
mt.assert_close(y_online, y_ref, name="online softmax kernel vs reference")
mt.assert_close(y_library, y_ref, name="library numba.cuda softmax vs reference")
assert (reads == 2 * d_row).all(), f"online softmax reads each entry twice: {reads} loads for rows of {d_row}"

# %% [markdown]
# ## 3. LayerNorm: the variance, in one pass or two
#
# LayerNorm (§3.1, chapter 08) needs the row's mean μ and variance σ². The
# tempting one-pass formula σ² = E[x²] − μ² subtracts two large, nearly equal
# numbers when |μ| ≫ σ, and float32 keeps only 7 digits: the difference can be
# garbage, even negative. The **two-pass** way (μ first, then the mean of
# (x − μ)²) is exact enough, and it is what the library's kernels do; with the row
# in registers (cuda.cu v3) the second pass reads registers, not memory.
# **Welford's** update gets the same accuracy in one streaming pass, keeping the
# count n, the mean and M₂ = Σ (x − mean)²:
#
# $$n \leftarrow n + 1, \quad \delta = x - \mathit{mean}, \quad \mathit{mean} \leftarrow \mathit{mean} + \delta / n, \quad M_2 \leftarrow M_2 + \delta \cdot (x - \mathit{mean}_{\text{new}}), \quad \sigma^2 = M_2 / n$$
#
# Like the online softmax, two Welford states can be merged (exercise 2), so a
# block can reduce it as a tree.

# %%
def welford(row, dtype=np.float32):
    """(n, mean, M2) of row in one pass, in `dtype` arithmetic."""
    n, mean, m2 = 0, dtype(0.0), dtype(0.0)
    for value in row.astype(dtype):
        n += 1
        delta = value - mean
        mean = mean + delta / dtype(n)
        m2 = m2 + delta * (value - mean)
    return n, mean, m2


far = (rng.standard_normal(512) * 0.1 + 3000.0).astype(np.float32)   # |μ| / σ = 30000
true_var = float(np.var(far.astype(np.float64)))
one_pass = float(np.mean(far * far) - np.mean(far) ** 2)            # float32 throughout
two_pass_var = float(np.mean((far - far.mean()) ** 2))
n_w, _, m2_w = welford(far)
welford_var = float(m2_w / n_w)
print(f"variance: true {true_var:.5f}, E[x²] − μ² {one_pass:.5f}, two-pass {two_pass_var:.5f}, "
      f"Welford {welford_var:.5f} (all float32)")

x_ln = (rng.standard_normal((R, d_row)) * 2 + 1).astype(np.float32)
gamma, beta = rng.standard_normal(d_row).astype(np.float32), rng.standard_normal(d_row).astype(np.float32)
library_ln = layernorm_cuda.layernorm_forward(x_ln, gamma, beta, 1e-6)   # numba.cuda: one block per row

# %% CHECK
assert abs(one_pass - true_var) > 0.5 * true_var, "E[x²] − μ² in float32 loses the variance far from zero"
for name, value in (("two-pass", two_pass_var), ("Welford", welford_var)):
    assert abs(value - true_var) < 1e-3 * true_var, f"{name} float32 variance {value} vs {true_var}"
for name, got, ref in zip(("y", "mean", "rstd"), library_ln, layernorm_forward_ref(x_ln, gamma, beta, 1e-6)):
    mt.assert_close(got, ref, name=f"library numba.cuda layernorm {name} vs reference", atol=1e-5)

# %% [markdown]
# ## 4. Bytes moved: the unfused chain against one kernel
#
# Written op by op, as `minitensor/functions/composed.py` writes them (the
# twins that tests check the fused Functions against), softmax and LayerNorm
# are chains of elementwise ops and reductions. On a GPU each op is a kernel,
# and each kernel reads its inputs from global memory and writes its output back.
# We replay those chains in NumPy and tally the bytes each op reads and writes;
# `CountingBackend` (which counts what CuPy would launch) confirms that the
# library's composed twins launch exactly these kernels. (The softmax chain
# includes the `equal` kernel that autograd's max runs to remember where the
# maximum was, for the backward; the LayerNorm chain takes a mean as a sum and
# a multiply by 1/d, as CuPy does.)
#
# A fused kernel reads x once and writes y once (LayerNorm also reads γ, β and
# writes μ and 1/σ for the backward). `transformer/fused.py` goes one step further
# for §3.1's sub-layer connection: `DropoutAddLayerNorm` does dropout, the residual
# add and LayerNorm in one op, and regenerates the dropout mask from its seed in
# the backward instead of storing it.

# %%
def traced(steps, kind, out, *inputs):
    """Record one kernel of a chain: its kind (as CountingBackend names it), bytes read, bytes written."""
    steps.append((kind, sum(a.nbytes for a in inputs), out.nbytes))
    return out


def softmax_chain(x, scale):
    """softmax_composed's kernels: (y, steps)."""
    s = []
    z = traced(s, "ufunc multiply", x * np.float32(scale), x)
    m = traced(s, "reduce maximum", z.max(axis=-1, keepdims=True), z)
    traced(s, "ufunc equal", z == m, z, m)                                  # autograd's record of the argmax
    z = traced(s, "ufunc subtract", z - m, z, m)
    e = traced(s, "ufunc exp", np.exp(z), z)
    total = traced(s, "reduce add", e.sum(axis=-1, keepdims=True), e)
    return traced(s, "ufunc divide", e / total, e, total), s


def layernorm_chain(x, gamma, beta, eps):
    """layer_norm_composed's kernels: (y, steps)."""
    s, inv_d = [], np.float32(1.0 / x.shape[-1])
    total = traced(s, "reduce add", x.sum(axis=-1, keepdims=True), x)
    mean = traced(s, "ufunc multiply", total * inv_d, total)
    centered = traced(s, "ufunc subtract", x - mean, x, mean)
    square = traced(s, "ufunc multiply", centered * centered, centered, centered)
    total = traced(s, "reduce add", square.sum(axis=-1, keepdims=True), square)
    var = traced(s, "ufunc multiply", total * inv_d, total)
    var_eps = traced(s, "ufunc add", var + np.float32(eps), var)
    std = traced(s, "ufunc sqrt", np.sqrt(var_eps), var_eps)
    normed = traced(s, "ufunc divide", centered / std, centered, std)
    scaled = traced(s, "ufunc multiply", normed * gamma, normed, gamma)
    return traced(s, "ufunc add", scaled + beta, scaled, beta), s


def launched_kernels(fn, *arrays):
    """Kernels CountingBackend counts for fn on these arrays, scalar fills left out: {kind: count}."""
    backend = CountingBackend()
    fn(*(mt.tensor(a, backend=backend) for a in arrays))
    return {kind: n for kind, n in backend.counts.by_kind.items() if kind != "fill"}


def fused_bytes(kind, rows, d, itemsize=4):
    """One fused kernel: read x (and γ, β), write y (and μ, 1/σ)."""
    extra = 2 * d + 2 * rows if kind == "layernorm" else 0
    return (2 * rows * d + extra) * itemsize


y_chain, softmax_steps = softmax_chain(x, 0.5)
ln_chain, ln_steps = layernorm_chain(x_ln, gamma, beta, 1e-6)
softmax_launched = launched_kernels(lambda t: softmax_composed(t, scale=0.5), x)
ln_launched = launched_kernels(lambda t, g, b: layer_norm_composed(t, g, b, 1e-6), x_ln, gamma, beta)
chain_bytes = sum(r + w for _, r, w in softmax_steps)
for kind, r, w in softmax_steps:
    print(f"  {kind:15s} reads {r:6d} B, writes {w:6d} B")
print(f"softmax of {R} rows of {d_row}: chain {chain_bytes} B, fused {fused_bytes('softmax', R, d_row)} B")

# %% CHECK
mt.assert_close(y_chain, softmax_forward_ref(x, 0.5, None), name="the softmax chain computes softmax")
mt.assert_close(ln_chain, layernorm_forward_ref(x_ln, gamma, beta, 1e-6)[0], name="the LayerNorm chain", atol=1e-5)
assert Counter(kind for kind, _, _ in softmax_steps) == softmax_launched, f"softmax_composed launches {softmax_launched}"
assert Counter(kind for kind, _, _ in ln_steps) == ln_launched, f"layer_norm_composed launches {ln_launched}"
N = R * d_row                                                   # float32 x, bool mask: 4 and 1 bytes
assert chain_bytes == 4 * (7 * N + 3 * R) + 4 * (4 * N + 2 * R) + 1 * N, \
    "softmax chain: reads 7N + 3R floats; writes 4N + 2R floats and N booleans"

# %% [markdown]
# ### Bytes per row as d grows
#
# Per row, the softmax chain moves about 11.25 d floats' worth (11 reads and
# writes of d floats, one write of d booleans) where the fused kernel moves 2 d:
# a factor of 5.6, for every d. The library's numba.cuda kernel reads the row
# three times (4 d), the online kernel above twice (3 d); cuda.cu v3, which holds
# the row in registers, reaches the 2 d floor. LayerNorm's chain is worse, about 13 d against
# 2 d. A row op's time on a GPU is its bytes divided by the bandwidth, so
# fusing is worth these factors directly.

# %%
widths = [64, 128, 256, 512, 1024, 2048, 4096]
rows_per_width = 64
per_row = {"softmax chain": [], "LayerNorm chain": []}
for width in widths:
    xs = rng.standard_normal((rows_per_width, width)).astype(np.float32)
    ones, zeros = np.ones(width, dtype=np.float32), np.zeros(width, dtype=np.float32)
    per_row["softmax chain"].append(sum(r + w for _, r, w in softmax_chain(xs, 1.0)[1]) / rows_per_width)
    per_row["LayerNorm chain"].append(sum(r + w for _, r, w in layernorm_chain(xs, ones, zeros, 1e-6)[1])
                                      / rows_per_width)
three_reads = [4 * 4 * width for width in widths]                # numba.cuda v1: 3 reads + 1 write
fused = {kind: [fused_bytes(kind, rows_per_width, width) / rows_per_width for width in widths]
         for kind in ("softmax", "layernorm")}

fig, ax = plt.subplots(figsize=(6.5, 4))
ax.loglog(widths, per_row["LayerNorm chain"], "s-", base=2, label="LayerNorm, unfused chain")
ax.loglog(widths, per_row["softmax chain"], "o-", base=2, label="softmax, unfused chain")
ax.loglog(widths, three_reads, "^--", base=2, label="softmax, 3 reads + 1 write (numba.cuda v1)")
ax.loglog(widths, fused["layernorm"], "k:", base=2, label="LayerNorm fused")
ax.loglog(widths, fused["softmax"], "k-", base=2, lw=1, label="softmax fused: read x, write y")
ax.set_xlabel("row length d")
ax.set_ylabel("bytes moved per row (float32)")
ax.legend(fontsize=8)
show(fig, "18_bytes_per_row")
ratios = [c / f for c, f in zip(per_row["softmax chain"], fused["softmax"])]
print("softmax chain / fused:", [f"{r:.2f}" for r in ratios])

# %% CHECK
assert all(5.5 < r < 5.7 for r in ratios), f"the softmax chain moves about 5.6x the fused kernel's bytes: {ratios}"
assert all(c > 6 * f for c, f in zip(per_row["LayerNorm chain"], fused["layernorm"])), "LayerNorm chain > 6x fused"

# %% [markdown]
# ## 5. Why 16-byte loads matter
#
# Global memory moves in 32-byte **sectors**. When the 32 threads of a warp
# load 4 bytes each from 32 consecutive addresses, the one instruction touches 4
# sectors, 128 bytes, nothing wasted: a **coalesced** load. A row kernel that
# walks a row with such loads needs d/32 instructions per row; with 16-byte
# loads (`float4` in CUDA C, or 8 halves) each lane brings 16 bytes and a warp
# 512, so a quarter of the instructions (an eighth for fp16) for the same
# sectors. Bytes are the same; what changes is how many requests the SM must
# issue and keep in flight. Memory is far away (hundreds of nanoseconds): to
# keep 3.35 TB/s busy, an H100 needs about 2 MB in flight across its 132 SMs,
# some 15 KB per SM, and each load instruction in flight is one slot of that.
# Walking a **column** instead (lane l at row l) touches 32 sectors for 128
# useful bytes: 8 times the bytes. We count sectors per warp instruction.

# %%
def sectors(byte_addresses, width):
    """32-byte sectors one warp load touches: lane l reads `width` bytes from byte_addresses[l]."""
    return len({s for start in byte_addresses for s in range(start // 32, (start + width - 1) // 32 + 1)})


def row_read_cost(d, itemsize, load_bytes, stride=1):
    """(instructions, sectors) for one warp to read d elements, `load_bytes` per lane per instruction;
    stride = elements between consecutive ones (1: a row, d_model: a column of a row-major matrix)."""
    per_lane = load_bytes // itemsize
    instructions = total = 0
    for first in range(0, d, 32 * per_lane):
        lanes = [(first + lane * per_lane) * stride * itemsize for lane in range(32) if first + lane * per_lane < d]
        instructions, total = instructions + 1, total + sectors(lanes, load_bytes if stride == 1 else itemsize)
    return instructions, total


d_model = 512
costs = {"fp32, 4-byte loads": row_read_cost(d_model, 4, 4), "fp32, 16-byte loads": row_read_cost(d_model, 4, 16),
         "fp16, 2-byte loads": row_read_cost(d_model, 2, 2), "fp16, 16-byte loads": row_read_cost(d_model, 2, 16),
         "fp32, a column": row_read_cost(d_model, 4, 4, stride=d_model)}
for name, (instructions, touched) in costs.items():
    print(f"{name:20s} {instructions:3d} warp instructions, {touched:4d} sectors = {32 * touched:6d} bytes")

# %% CHECK
assert costs["fp32, 4-byte loads"][1] * 32 == d_model * 4, "coalesced: exactly the row's bytes"
assert costs["fp32, 16-byte loads"] == (costs["fp32, 4-byte loads"][0] // 4, costs["fp32, 4-byte loads"][1]), \
    "16-byte loads: a quarter of the instructions, the same sectors"
assert costs["fp16, 16-byte loads"][0] * 16 == costs["fp16, 2-byte loads"][0] * 2, "fp16: an eighth"
assert costs["fp32, a column"][1] == 8 * costs["fp32, 4-byte loads"][1], "a column moves 8x the bytes"

# %% [markdown]
# The library's CUDA kernels (v3 of each) hold a row in registers and load it
# one element per lane per instruction; 16-byte loads are the next step, and
# this count is what that step would buy.
#
# ## 6. Bandwidth, on a GPU
#
# On a GPU we time the library's CUDA C softmax versions and the composed chain
# (CuPy, one kernel per op) and report the bandwidth each reaches: the fused
# kernel's bytes (read x, write y) over its time. For the chain we report the
# same useful bytes over its (longer) time, so the two numbers compare.

# %%
if ON_GPU:
    import cupy as cp
    from cupyx.profiler import benchmark

    from minitensor.kernels.softmax_forward import cupy_launch

    rows, width = (8192, 1024) if FAST else (65536, 1024)
    x_gpu = cp.asarray(rng.standard_normal((rows, width)), dtype=cp.float32)
    useful = 2 * x_gpu.nbytes                                   # read x, write y

    def composed(a):
        z = a * 0.5
        e = cp.exp(z - z.max(axis=-1, keepdims=True))
        return e / e.sum(axis=-1, keepdims=True)

    expected = composed(x_gpu)
    for name, fn in [(f"v{v}", lambda a, f=f: f(a, 0.5, None)) for v, f in cupy_launch.VERSIONS.items()] + \
            [("composed (CuPy ops)", composed)]:
        assert float(cp.abs(fn(x_gpu) - expected).max()) < 1e-5, f"softmax {name} disagrees with the chain"
        seconds = float(benchmark(fn, (x_gpu,), n_warmup=2, n_repeat=20).gpu_times.mean())
        print(f"softmax {name:20s} {useful / seconds / 1e9:7.0f} GB/s of useful traffic")
else:
    print("no GPU: bandwidth not measured (the simulator's times mean nothing); the byte counts above are the model")

# %% [markdown]
# ## Summary
# - Softmax subtracts the row max; the online update (m, d) ← merge((m, d), (z, 1)) gets max and sum in one pass, and merges of partial states make it a parallel reduction.
# - LayerNorm's variance: E[x²] − μ² fails in float32; two-pass or Welford (also mergeable) do not.
# - A row kernel is bound by bytes: the unfused softmax chain moves ~5.6x (LayerNorm ~6.4x) what one fused kernel moves; 16-byte loads cut the instructions, coalescing the bytes.
#
# ## Exercises
# 1. **Predict, then run.** The attention scores of a batch of 64 sentences, 8 heads, 128 × 128 positions are
#    8.4 M float32 numbers. Estimate the least time the fused softmax can take on an H100 (3.35 TB/s), and the
#    unfused chain. (Answer key: `PREDICT` in `chapters/solutions/18_fused_row_kernels.py`.)
# 2. Write `welford_merge(a, b)`: the (n, mean, M2) of two disjoint pieces of a row from each piece's own
#    (Chan et al. 1979). `check_welford_merge(fn)` merges random splits and compares with NumPy.
# 3. Write `online_logsumexp(row)`: log Σ e^{z_i} in **one** pass over the row (what a cross-entropy kernel
#    needs), right for huge scores, for −∞ entries (masked), and −∞ for a row with nothing else.
#    `check_online_logsumexp(fn)` tests those cases on rows you can iterate over only once (`OnePass`).

# %%
def check_welford_merge(welford_merge) -> None:
    """Exercise 2: merged states equal the whole row's (n, mean, M2), including an empty piece, on rows drawn
    afresh each call far from zero (mean ~1e8), where merging by sums of squares loses every digit of M2."""
    check_rng = np.random.default_rng()
    values = check_rng.standard_normal(40) * 3 + check_rng.uniform(1e7, 1e8)
    for cut in (0, 1, int(check_rng.integers(2, 39)), 39):
        left, right = values[:cut], values[cut:]
        states = [(len(p), p.mean() if len(p) else 0.0, ((p - p.mean()) ** 2).sum() if len(p) else 0.0)
                  for p in (left, right)]
        n, mean, m2 = welford_merge(*states)
        assert n == 40 and abs(mean - values.mean()) < 1e-12 * abs(values.mean()), f"cut at {cut}: n {n}, mean {mean}"
        exact = ((values - values.mean()) ** 2).sum()
        assert abs(m2 - exact) < 1e-6 * exact, f"cut at {cut}: M2 {m2}, expected {exact}"


def check_online_logsumexp(online_logsumexp) -> None:
    """Exercise 3: ordinary, huge, partly masked and fully masked rows, each handed over as a row that can be
    read once, front to back (`OnePass`): a max pass then a sum pass is refused, as a kernel would pay for it."""
    check_rng = np.random.default_rng(19)
    ordinary = check_rng.standard_normal(30)
    for name, row, expected in (("ordinary", ordinary, np.logaddexp.reduce(ordinary)),
                                ("huge", np.array([1e4, 1e4 - 1.0, -5.0]), 1e4 + math.log1p(math.exp(-1.0))),
                                ("masked", np.array([-np.inf, 0.0, -np.inf, 0.0]), math.log(2.0)),
                                ("all masked", np.full(5, -np.inf), -np.inf)):
        once = OnePass(row)
        got = float(online_logsumexp(once))
        assert once.passes == 1 and once.reads == len(row), \
            f"{name}: read {once.reads} of {len(row)} entries in {once.passes} passes; one pass reads each once"
        assert got == expected or abs(got - expected) < 1e-9 * max(1.0, abs(expected)), \
            f"{name}: {got} vs {expected}"


# %% CHECK the checks: a wrong answer must fail them
def _merge_without_the_cross_term(a, b):                        # adds the M2s, forgets δ² n_a n_b / n
    n = a[0] + b[0]
    return n, (a[0] * a[1] + b[0] * b[1]) / n, a[2] + b[2]


def _two_passes(row):                                           # the max first, then the sum: right, but two reads
    m = max(row)
    return m + math.log(sum(math.exp(z - m) for z in row)) if m > -math.inf else -math.inf


with np.errstate(over="ignore", divide="ignore"):
    assert fails(check_online_logsumexp, lambda row: np.log(np.exp(np.fromiter(row, float)).sum())), \
        "accepted an overflowing logsumexp"
assert fails(check_online_logsumexp, _two_passes), "check_online_logsumexp accepted a max pass then a sum pass"
assert fails(check_welford_merge, _merge_without_the_cross_term), "check_welford_merge accepted M2a + M2b"


def _merge_by_sums_of_squares(a, b):                            # right in exact arithmetic: Σx² − n·mean², cancelling
    n = a[0] + b[0]
    mean = (a[0] * a[1] + b[0] * b[1]) / n
    return n, mean, (a[2] + a[0] * a[1] ** 2) + (b[2] + b[0] * b[1] ** 2) - n * mean ** 2


assert fails(check_welford_merge, _merge_by_sums_of_squares), "check_welford_merge accepted a merge by sums of squares"

# %%
finish("18_fused_row_kernels", {check_welford_merge: "welford_merge", check_online_logsumexp: "online_logsumexp"})
