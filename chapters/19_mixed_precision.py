# ---
# jupyter:
#   jupytext:
#     formats: py:percent
#     text_representation:
#       extension: .py
#       format_name: percent
# ---

# %% [markdown]
# # 19 · Mixed precision: fp16, bf16, master weights and loss scaling
#
# > We trained our models on one machine with 8 NVIDIA P100 GPUs. (§5.2)
#
# > We used the Adam optimizer with β₁ = 0.9, β₂ = 0.98 and ε = 10⁻⁹. (§5.3)
#
# **Beyond the paper.** The paper never says in which number format it
# computed; its P100s ran the model in 32-bit floats. Today's GPUs do most of
# their arithmetic in 16-bit formats, several times faster and with half the
# memory traffic, so `Transformer(..., precision="fp16" | "bf16")` runs the
# forward and backward passes in half precision while the weights and Adam stay
# in float32 (a `DEVIATION(§5.2)` in `transformer/model.py`). This chapter takes
# the formats apart bit by bit, finds what underflows in a Transformer step, and
# shows the two tricks that make 16 bits train like 32: **fp32 master weights**
# and **dynamic loss scaling**, ending with a run where fp16 without scaling
# learns nothing and with it learns like fp32. Everything runs on the CPU:
# NumPy has float16; bf16 is stored as uint16 bits, as the library does.
#
# Shapes: B pairs, S source length, T target length, V vocab.
#
# The library code this chapter builds:
# [`train/run/loss_scaler.py`](../train/run/loss_scaler.py),
# [`minitensor/dtypes.py`](../minitensor/dtypes.py).

# %%
import matplotlib.pyplot as plt
import numpy as np

from _common import FAST, fails, finish, one_cpu_thread, show
from minitensor.dtypes import BF16
from minitensor.kernels.bf16_cast.reference import bf16_to_float32, float_to_bf16
from minitensor.optim import Adam
from train.run.loss_scaler import DynamicLossScaler
from train.run.step import train_step
from transformer import LabelSmoothingLoss, Transformer, TransformerConfig

THREADS = one_cpu_thread()
FORMATS = {"fp32": (8, 23), "fp16": (5, 10), "bf16": (8, 7)}     # (exponent bits, mantissa bits); 1 sign bit each

# %% [markdown]
# ## 1. Three bit layouts, decoded by hand
#
# An IEEE-754 binary float is a sign bit s, e exponent bits E and m mantissa
# (fraction) bits M, with bias b = 2^(e−1) − 1:
#
# $$\begin{array}{lll} E = 0 & \text{subnormal} & (-1)^s \cdot (M / 2^m) \cdot 2^{1 - b} \quad \text{(no implicit 1; includes } \pm 0\text{)} \\ 0 < E < 2^e - 1 & \text{normal} & (-1)^s \cdot (1 + M / 2^m) \cdot 2^{E - b} \\ E = 2^e - 1 & & \pm\infty \text{ when } M = 0, \text{ NaN otherwise} \end{array}$$
#
#     fp32   s | 8 exponent bits | 23 mantissa bits
#     fp16   s | 5 exponent bits | 10 mantissa bits     (IEEE half)
#     bf16   s | 8 exponent bits |  7 mantissa bits     (the top 16 bits of an fp32)
#
# `decode` below is that table, vectorised. We check it on **all 65,536** fp16
# patterns against NumPy's float16, on all 65,536 bf16 patterns against the
# library's `bf16_to_float32` (a 16-bit shift, `minitensor/kernels/bf16_cast`),
# and on random fp32 patterns against NumPy's float32.

# %%
def decode(bits, exp_bits, man_bits):
    """Values (float64, exact) of the bit patterns `bits` (integers) of a 1/exp_bits/man_bits float."""
    bits = np.asarray(bits, dtype=np.int64)
    sign = np.where(bits >> (exp_bits + man_bits) & 1, -1.0, 1.0)
    exponent = bits >> man_bits & ((1 << exp_bits) - 1)
    mantissa = (bits & ((1 << man_bits) - 1)).astype(np.float64)
    bias = 2 ** (exp_bits - 1) - 1
    normal = np.ldexp(1.0 + mantissa / 2 ** man_bits, exponent - bias)
    subnormal = np.ldexp(mantissa / 2 ** man_bits, 1 - bias)
    special = np.where(mantissa == 0, np.inf, np.nan)
    value = np.where(exponent == 0, subnormal, np.where(exponent == (1 << exp_bits) - 1, special, normal))
    return sign * value


def fields(bits, exp_bits, man_bits):
    """'s|eeeee|mmmmmmmmmm': a bit pattern with its three fields apart."""
    text = format(int(bits), f"0{1 + exp_bits + man_bits}b")
    return f"{text[0]}|{text[1:1 + exp_bits]}|{text[1 + exp_bits:]}"


all16 = np.arange(2 ** 16)
fp16_by_hand, bf16_by_hand = decode(all16, *FORMATS["fp16"]), decode(all16, *FORMATS["bf16"])
random32 = np.random.default_rng(0).integers(0, 2 ** 32, 200_000, dtype=np.uint64)
for x in (1.0, -2.5, 0.1, 65504.0):
    print(f"{x:>8}: fp16 {fields(np.float16(x).view(np.uint16), 5, 10):20s} "
          f"bf16 {fields(float_to_bf16(np.float32(x)), 8, 7):18s} fp32 {fields(np.float32(x).view(np.uint32), 8, 23)}")

# %% CHECK
with np.errstate(invalid="ignore"):                              # NaN patterns with any payload: no warning
    np.testing.assert_array_equal(fp16_by_hand, all16.astype(np.uint16).view(np.float16).astype(np.float64),
                                  err_msg="decode must agree with NumPy's float16 on every pattern")
    np.testing.assert_array_equal(bf16_by_hand, bf16_to_float32(all16.astype(BF16)).astype(np.float64),
                                  err_msg="decode must agree with the library's bf16 widening on every pattern")
    np.testing.assert_array_equal(decode(random32, *FORMATS["fp32"]),
                                  random32.astype(np.uint32).view(np.float32).astype(np.float64))
assert BF16 == np.uint16, "bf16 lives in uint16 arrays: NumPy has no bfloat16 dtype"

# %% [markdown]
# ## 2. Range and precision, read off the layout
#
# From the table: the largest finite number has the largest normal exponent
# 2^e − 2 (that is b after the bias) and all mantissa bits set; the smallest
# normal has E = 1; the smallest subnormal has M = 1; the **machine epsilon**
# (the gap after 1.0) is 2^−m. Relative precision is set by m alone, range by
# e alone: bf16 keeps fp32's 8 exponent bits (the same range, 10^±38) and pays
# with 7 mantissa bits (2-3 significant digits); fp16 keeps 10 mantissa bits
# and has a tiny range: nothing above 65,504, nothing below 6·10⁻⁸.

# %%
def limits(exp_bits, man_bits):
    """max, smallest normal, smallest subnormal, epsilon of a 1/exp_bits/man_bits float, from its layout."""
    bias = 2 ** (exp_bits - 1) - 1
    return {"max": (2 - 2.0 ** -man_bits) * 2.0 ** bias, "min normal": 2.0 ** (1 - bias),
            "min subnormal": 2.0 ** (1 - bias - man_bits), "eps": 2.0 ** -man_bits}


LIMITS = {name: limits(*layout) for name, layout in FORMATS.items()}
for name, lim in LIMITS.items():
    print(f"{name}: " + ", ".join(f"{key} {value:.4g}" for key, value in lim.items()))

# %% CHECK
for name, dtype in (("fp16", np.float16), ("fp32", np.float32)):
    info = np.finfo(dtype)
    assert LIMITS[name] == {"max": float(info.max), "min normal": float(info.smallest_normal),
                            "min subnormal": float(info.smallest_subnormal), "eps": float(info.eps)}, name
finite_bf16 = bf16_by_hand[np.isfinite(bf16_by_hand)]
assert LIMITS["bf16"]["max"] == finite_bf16.max(), "bf16's largest finite number read off the layout"
assert LIMITS["bf16"]["min subnormal"] == finite_bf16[finite_bf16 > 0].min(), \
    "bf16's smallest subnormal read off the layout"
assert LIMITS["bf16"]["min normal"] == LIMITS["fp32"]["min normal"], "bf16 has fp32's exponent, so fp32's range"

# %% [markdown]
# ## 3. Rounding to nearest, ties to even
#
# Casting to a narrower format picks the **nearest** representable number; on
# an exact tie, the one whose last mantissa bit is 0 ("even"), so that ties do
# not all round the same way and bias sums. Positive floats sort like their
# bit patterns read as integers, so the definition can be written literally: a
# table of all non-negative values, a search for the two neighbours of |x|, the
# nearer one, the even one on a tie. Past the largest finite number IEEE
# rounds as if the exponent went on: the next value up, 2^(b+1), is inf.
#
# The library narrows float32 to bf16 with integer arithmetic on the bits
# instead, `(u + 0x7FFF + ((u >> 16) & 1)) >> 16` (`float_to_bf16`, the spec of
# the GPU cast kernel); NumPy narrows to float16 in C. Both must equal the
# definition, ties included.

# %%
def round_by_definition(x, exp_bits, man_bits):
    """Bit patterns (int64) of the 1/exp_bits/man_bits floats nearest to finite float32 x, ties to even."""
    bias = 2 ** (exp_bits - 1) - 1
    inf_bits = ((1 << exp_bits) - 1) << man_bits                   # patterns 0 .. inf_bits - 1: 0 and the finite > 0
    table = decode(np.arange(inf_bits + 1), exp_bits, man_bits)
    table[-1] = 2.0 ** (bias + 1)                                   # where rounding meets inf
    a = np.abs(np.asarray(x, dtype=np.float64))
    below = np.minimum(np.searchsorted(table, a, side="right") - 1, inf_bits - 1)
    down, up = a - table[below], table[below + 1] - a
    nearest = np.where((up < down) | ((up == down) & (below % 2 == 1)), below + 1, below)
    return nearest | (np.signbit(x).astype(np.int64) << (exp_bits + man_bits))


samples = random32.astype(np.uint32).view(np.float32)
samples = samples[np.isfinite(samples)]
ties_bf16 = ((random32[:5000] & 0xFFFF0000) | 0x8000).astype(np.uint32).view(np.float32)   # exactly halfway
ties_bf16 = ties_bf16[np.isfinite(ties_bf16)]
small16 = fp16_by_hand[np.isfinite(fp16_by_hand)]
small16 = np.sort(small16[small16 >= 0])
ties_fp16 = ((small16[:-1] + small16[1:]) / 2).astype(np.float32)                  # exact: 12 significant bits
to_bf16 = {"samples": samples, "ties": ties_bf16, "max fp32": np.array([3.4028235e38], np.float32)}
to_fp16 = {"samples": samples[np.abs(samples) < 1e6], "ties": ties_fp16, "65520": np.array([65520.0], np.float32)}
with np.errstate(over="ignore"):                                   # rounding up to inf is the point here
    print(f"bf16 of fp32's max: {bf16_to_float32(float_to_bf16(np.float32(3.4028235e38)))}; "
          f"fp16 of 65520 (halfway to the next power of two): {np.float16(np.float32(65520.0))}")

# %% CHECK
for what, x in to_bf16.items():
    np.testing.assert_array_equal(float_to_bf16(x).astype(np.int64), round_by_definition(x, 8, 7),
                                  err_msg=f"float_to_bf16 must round to nearest even ({what})")
for what, x in to_fp16.items():
    with np.errstate(over="ignore"):
        numpy16 = x.astype(np.float16).view(np.uint16).astype(np.int64)
    np.testing.assert_array_equal(numpy16, round_by_definition(x, 5, 10),
                                  err_msg=f"NumPy's float16 must round to nearest even ({what})")
assert (round_by_definition(ties_fp16, 5, 10) % 2 == 0).all(), "every tie lands on an even pattern"

# %% [markdown]
# ## 4. What underflows in a Transformer step
#
# Take one real fp32 training step of a small Transformer and look at the
# gradients it produces: the gradient of the mean loss with respect to each
# logit, (softmax − q) / N per token (chapter 09), and every parameter's
# gradient. Which of them survive a cast to fp16, and which become 0?
#
# Our toy has N = 224 target tokens in a batch and V = 16. The paper's batches
# have N ≈ 25,000 tokens (§5.1) and V ≈ 37,000: a typical logit gradient there
# is ~1/(N·V) ≈ 10⁻⁹, far below fp16's smallest subnormal 6·10⁻⁸. To see that
# regime at toy size we also multiply our loss by c = (224·16)/(25,000·37,000),
# a **stand-in** that puts our logit gradients where the paper's are (every
# gradient upstream shrinks by the same factor). Then we count what flushes to
# zero at loss scale s = 1 and at larger powers of two, and what overflows.

# %%
V, B, L = 16, 32, 6
config = TransformerConfig.tiny(vocab_size=V, N=1, d_model=32, d_ff=64, h=2, p_drop=0.0, eps_ls=0.1, max_len=32)
PAPER_N, PAPER_V = 25_000, 37_000                                # §5.1 tokens per batch, BPE vocabulary


def reverse_batch(rng):
    """(src (B,S), tgt_in (B,T), tgt_out (B,T)): the target is the source reversed, then EOS (3); BOS is 2."""
    src = rng.integers(4, V, (B, L))
    tgt = np.concatenate([np.full((B, 1), 2), src[:, ::-1], np.full((B, 1), 3)], axis=1)
    return src, tgt[:, :-1], tgt[:, 1:]


C_PAPER = B * (L + 1) * V / (PAPER_N * PAPER_V)
src, tgt_in, tgt_out = reverse_batch(np.random.default_rng(5))
model = Transformer(config, np.random.default_rng(0))                      # fp32
loss_fn = LabelSmoothingLoss(config.eps_ls, config.pad_id)
logits_tensor = model(src, tgt_in)                                         # (B, T, V)
out = loss_fn(logits_tensor, tgt_out)
out.loss.backward()
logits = logits_tensor.numpy().reshape(-1, V)                               # (B·T, V)
p = np.exp(logits - logits.max(-1, keepdims=True))
p /= p.sum(-1, keepdims=True)
q = np.full_like(p, config.eps_ls / (V - 2))
q[:, config.pad_id] = 0
q[np.arange(len(q)), tgt_out.reshape(-1)] = 1 - config.eps_ls
grads = {"logits": ((p - q) / out.n_tokens).ravel(),                         # (B·T·V,) d mean loss / d logit
         "parameters": np.concatenate([prm.grad.ravel() for _, prm in model.named_parameters()])}


def flushed(g, scale):
    """Fraction of the nonzero g that become 0 in fp16 after multiplying by `scale`, and the fraction that overflow."""
    g = g[g != 0].astype(np.float64) * scale
    with np.errstate(over="ignore"):
        half = g.astype(np.float16)
    return float((half == 0).mean()), float(np.isinf(half).mean())


SCALES = [1.0, 2.0 ** 8, 2.0 ** 16, 2.0 ** 24]
table = {(what, size): [flushed(g * c, s) for s in SCALES]
         for what, g in grads.items() for size, c in (("toy", 1.0), ("paper-sized", C_PAPER))}
print(f"fraction flushed to zero in fp16 / overflowed, at loss scale {[f'2^{int(np.log2(s))}' for s in SCALES]}:")
for (what, size), row in table.items():
    print(f"  {what:10s} {size:11s} " + "  ".join(f"{z:6.1%} / {o:5.1%}" for z, o in row))
fig, ax = plt.subplots(figsize=(7, 3.5))
for what, g in grads.items():
    for size, c in (("toy", 1.0), ("paper-sized", C_PAPER)):
        ax.hist(np.log2(np.abs(g[g != 0]) * c), bins=80, histtype="step", label=f"{what}, {size}")
for value, name in ((LIMITS["fp16"]["min subnormal"], "fp16 min subnormal"),
                    (LIMITS["fp16"]["min normal"], "fp16 min normal"), (LIMITS["fp16"]["max"], "fp16 max")):
    ax.axvline(np.log2(value), color="gray", ls="--")
    ax.text(np.log2(value), ax.get_ylim()[1] * 0.9, name, rotation=90, ha="right", fontsize=8)
ax.set_xlabel("log2 |gradient|  (scale 1; bf16's range starts at 2^-133, off this plot)")
ax.set_ylabel("count")
ax.legend(fontsize=8)
show(fig, "19_gradient_magnitudes")

# %% CHECK
assert table[("logits", "toy")][0][0] < 0.01, "at toy size almost nothing underflows"
assert table[("logits", "paper-sized")][0][0] > 0.9, "at the paper's size most logit gradients flush to zero in fp16"
assert table[("logits", "paper-sized")][2][0] < 0.01, "a loss scale of 2^16 brings them back"
assert table[("parameters", "toy")][3][1] > 0, "too large a scale overflows to inf: the scale must be able to fall"
bf16_lost = (bf16_to_float32(float_to_bf16((grads["logits"] * C_PAPER).astype(np.float32))) == 0)
assert not bf16_lost[grads["logits"] != 0].any(), "bf16 has fp32's range: nothing flushes"

# %% [markdown]
# ## 5. Why the master weights stay in fp32
#
# An update smaller than half the gap between a weight and its neighbour is
# rounded away: the weight never moves, however many steps you take. In fp16
# the gap just below 1.0 is 2⁻¹¹ ≈ 4.9·10⁻⁴, so an update of 10⁻⁴ (a typical
# lr·Adam step late in training) vanishes; in bf16 (gap 2⁻⁸ there) even more
# does. In fp32 the same thousand updates add up. Adam's ε = 10⁻⁹ (§5.3) is not
# even an fp16 number, and its second moment (squared gradients) underflows
# long before the gradients do.
#
# So `minitensor.optim.Adam` keeps the **master** weights, the moments and the
# update in float32, and with `half_dtype` its kernel also writes each updated
# weight rounded to the half format into one more flat buffer: the forward pass
# reads those half copies, and no weight is ever accumulated in 16 bits.

# %%
w16, wbf, w32, update = np.float16(1.0), float_to_bf16(np.float32(1.0)), np.float32(1.0), 1e-4
for _ in range(1000):
    w16 = np.float16(w16 - np.float16(update))
    wbf = float_to_bf16(bf16_to_float32(wbf) - np.float32(update))
    w32 = np.float32(w32 - np.float32(update))
print(f"1.0 minus 1000 updates of 1e-4: fp16 {w16}, bf16 {bf16_to_float32(wbf)}, fp32 {w32:.5f}; "
      f"fp16(1e-9) = {np.float16(1e-9)}")
half_model = Transformer(config, np.random.default_rng(0), precision="fp16")
half_adam = Adam(list(half_model.named_parameters()), lr=1e-3, half_dtype=half_model.compute_dtype)

# %% CHECK
assert w16 == 1.0 and bf16_to_float32(wbf) == 1.0, "in 16 bits the weight never changes"
assert abs(w32 - 0.9) < 1e-4, "in fp32 the updates add up"
assert np.float16(1e-9) == 0, "Adam's ε underflows in fp16"
assert all(prm.dtype == np.float32 for _, prm in half_model.named_parameters()), "masters are float32"
assert half_adam.flat.dtype == np.float32 and half_adam.half.dtype == np.float16, \
    "Adam keeps float32 masters and writes float16 copies"
np.testing.assert_array_equal(half_adam.half, half_adam.flat.astype(np.float16), err_msg="half copy = masters rounded")

# %% [markdown]
# ## 6. Dynamic loss scaling
#
# Section 4 showed the fix for underflow: multiply the loss by s before the
# backward pass, so every gradient is s times larger in fp16, then divide the
# float32 gradient by s before Adam sees it. The right s is unknown and drifts
# as training goes, so `train/run/loss_scaler.py` finds it as it goes:
#
# - `scale_loss`: backward runs on loss · s (s starts at 2¹⁶);
# - `unscale_and_check`: the flat fp32 gradient is multiplied by 1/s, and one
#   sum tells whether any element is inf or NaN (an overflow somewhere);
# - `update`: after an overflow the step is **skipped** (the weights do not
#   move) and s is halved; after `growth_interval` good steps in a row s
#   doubles, to creep back up to the largest scale that does not overflow.
#
# `train_step` calls the three when given a scaler. We start at s = 2²⁴, where
# the toy's gradients overflow (section 4), and watch it back off and grow.

# %%
scaler = DynamicLossScaler(init_scale=2.0 ** 24, growth_interval=4)
rng = np.random.default_rng(6)
trace = []
for _ in range(8):
    before = half_adam.flat.copy()
    with np.errstate(over="ignore", invalid="ignore"):                # the overflowing steps make inf and NaN
        stats = train_step(half_model, [reverse_batch(rng)], half_adam, loss_fn, scaler)
    trace.append((scaler.scale, stats.stepped, bool(np.array_equal(before, half_adam.flat))))
print("scale after each step, stepped?:", [(f"2^{int(np.log2(s))}", st) for s, st, _ in trace])

# %% CHECK
assert not trace[0][1] and trace[0][2] and trace[0][0] == 2.0 ** 23, "an overflow skips the step and halves s"
assert all(unchanged == (not stepped) for _, stepped, unchanged in trace), "the weights move only on good steps"
first_good = next(i for i, (_, stepped, _) in enumerate(trace) if stepped)
assert trace[first_good + 3][0] == 2 * trace[first_good][0], "growth_interval good steps in a row double s"
assert scaler.skipped_steps == first_good >= 1, \
    "every overflowing step before the first good one was counted as skipped"

# %% [markdown]
# Two things those eight steps cannot show. The scaler's rule, step by step,
# for a fixed pattern of overflows: the count of good steps starts again at
# every overflow (and at every doubling), and s never falls below its floor.
# And the half-precision copies the forward pass reads: after every update
# Adam's kernel rewrites them from the float32 masters, and they must be the
# masters rounded to nearest even, by section 3's definition, in each
# parameter's own slice, for fp16 and bf16 alike.

# %%
def scale_sequence(pattern, scale, interval, floor):
    """Our rule: (s after the step, whether the step is taken) for each step of `pattern` (True: finite)."""
    good, out = 0, []
    for finite in pattern:
        if finite:
            good += 1
            if good == interval:
                scale, good = scale * 2.0, 0
        else:
            scale, good = max(scale / 2.0, floor), 0
        out.append((scale, finite))
    return out


overflows = [True, True, False, True, True, True, True, False, False, False, True, True, True, True, True, True]
library_scaler, library_scales = DynamicLossScaler(init_scale=8.0, growth_interval=3, min_scale=2.0), []
for finite in overflows:
    stepped = library_scaler.update(finite)
    library_scales.append((library_scaler.scale, stepped))
bf16_model = Transformer(config, np.random.default_rng(0), precision="bf16")
bf16_adam = Adam(list(bf16_model.named_parameters()), lr=1e-3, half_dtype=BF16)
for _ in range(2):
    train_step(bf16_model, [reverse_batch(rng)], bf16_adam, loss_fn)
copies = {"fp16": (half_model, np.float16, 5, 10), "bf16": (bf16_model, BF16, 8, 7)}

# %% CHECK
assert library_scales == scale_sequence(overflows, 8.0, 3, 2.0), \
    f"the loss scale for a fixed overflow pattern (halve on overflow, double after 3 good steps in a row, floor 2): " \
    f"{library_scales} vs ours {scale_sequence(overflows, 8.0, 3, 2.0)}"
for name, (model_, dtype, exp_bits, man_bits) in copies.items():
    for pname, prm in model_.named_parameters():
        copy = prm.half(dtype)
        assert copy is not None, f"the {name} copy of {pname} after updates: the forward pass has none to read"
        np.testing.assert_array_equal(np.asarray(copy).view(np.uint16).astype(np.int64),
                                      round_by_definition(prm.numpy(), exp_bits, man_bits),
                                      err_msg=f"the {name} weight copy after updates must be the float32 master "
                                              f"rounded to nearest even ({pname})")

# %% [markdown]
# ## 7. A run where fp16 without scaling fails, and with it works
#
# The same tiny model on the reverse task, five ways, every loss multiplied by
# the paper-sized stand-in c of section 4 (and divided out again for the
# plot): fp32; fp32 without c (Adam divides by the gradient's own size, so c
# changes almost nothing in fp32, which is what makes it a fair stand-in; only
# Adam's ε = 10⁻⁹ is no longer negligible next to gradients this small); fp16
# without loss scaling; fp16 with `DynamicLossScaler`; bf16 without scaling.

# %%
steps = 30 if FAST else 120


def shrunk(c):
    """The label-smoothed loss times c (section 4's paper-sized stand-in), as train_step calls a loss."""
    base = LabelSmoothingLoss(config.eps_ls, config.pad_id)

    def shrunk_loss(logits_, target):
        result = base(logits_, target)
        result.loss = result.loss * c
        return result
    return shrunk_loss


def run(precision, scaled, c=C_PAPER):
    """Per-token losses of `steps` updates (Adam, lr 3e-3) of a fresh model;
    the fraction of zero gradients at the end."""
    net = Transformer(config, np.random.default_rng(0), precision=precision)
    adam = Adam(list(net.named_parameters()), lr=3e-3, half_dtype=net.compute_dtype)
    data, scale, losses, loss_fn_c = np.random.default_rng(1), DynamicLossScaler() if scaled else None, [], shrunk(c)
    for _ in range(steps):
        st = train_step(net, [reverse_batch(data)], adam, loss_fn_c, scale)
        losses.append(float(st.loss_sum) / st.tgt_tokens / c)
    return np.array(losses), float((adam.gather_grads() == 0).mean())


runs = {"fp32": run("fp32", False), "fp32, c = 1": run("fp32", False, c=1.0), "fp16, no scaling": run("fp16", False),
        "fp16, dynamic scaling": run("fp16", True), "bf16, no scaling": run("bf16", False)}
fig, ax = plt.subplots(figsize=(6.5, 3.5))
for name, (curve, _) in runs.items():
    ax.plot(curve, label=name, ls=":" if name == "fp32, c = 1" else "-")
ax.set_xlabel("update")
ax.set_ylabel("loss per target token")
ax.set_title("reverse task, gradients at the paper's size (loss × c)")
ax.legend(fontsize=8)
show(fig, "19_fp16_with_and_without_scaling")
for name, (curve, zeros) in runs.items():
    print(f"{name:22s} loss {curve[0]:.3f} -> {curve[-5:].mean():.3f} (last 5), zero gradients at the end {zeros:.1%}")

# %% CHECK
final = {name: curve[-5:].mean() for name, (curve, _) in runs.items()}
drop = {name: curve[0] - final[name] for name, (curve, _) in runs.items()}
assert drop["fp32"] > 0.5, f"fp32 must learn the task (loss fell by {drop['fp32']:.3f})"
assert runs["fp16, no scaling"][1] > 0.99, "fp16 without scaling: every gradient flushes to zero"
assert drop["fp16, no scaling"] < 0.25 * drop["fp32"], "fp16 without scaling must not learn"
for name in ("fp32, c = 1", "fp16, dynamic scaling", "bf16, no scaling"):  # the curves part in the noise: compare ends
    assert abs(final[name] - final["fp32"]) < 0.05 * drop["fp32"], \
        f"{name} must train like fp32: final loss {final[name]:.3f} vs {final['fp32']:.3f}"

# %% [markdown]
# ## 8. Where a scaler bug shows: the gradient Adam is handed
#
# The curves above cannot catch a broken scaler. Adam divides each update by
# the gradient's own running size (m̂/√v̂), so multiplying every gradient by a
# constant changes almost nothing: the "fp32, c = 1" run showed it for c, and a
# scaler that **never divides by s** would hand Adam s × the gradient and still
# "train like fp32". Gradient clipping (chapter 16) is not scale-free: it
# compares the norm with a fixed bound, so the order of the step matters:
#
#     unscale (÷ s, in fp32) → check (inf/NaN: skip, lower s) → clip (at the true norm) → Adam step
#
# Clipping before unscaling compares s·‖g‖ with the bound and shrinks a gradient
# that did not need it; stepping before the check writes inf into the weights.
# So we look where it matters: an Adam that records the flat gradient each
# `step()` is handed. One batch, the same weights, the paper-sized loss of
# section 7: fp16 with the scaler must hand Adam fp32's gradient (to fp16's
# precision) and report fp32's norm; with clipping at half that norm it must
# hand over a gradient of exactly the bound in fp32's direction; and an
# overflowing step must hand Adam nothing at all.

# %%
class RecordingAdam(Adam):
    """Adam that keeps a copy of every flat gradient its step() is handed."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.seen = []

    def step(self):
        self.seen.append(self.gather_grads().copy())
        super().step()


def handed_to_adam(precision, clip_norm=0.0, init_scale=2.0 ** 16):
    """(gradients Adam was handed, StepStats) for one update of a fresh model on one batch, the loss × C_PAPER."""
    net = Transformer(config, np.random.default_rng(0), precision=precision)
    adam = RecordingAdam(list(net.named_parameters()), lr=1e-3, half_dtype=net.compute_dtype)
    scaler = DynamicLossScaler(init_scale=init_scale) if precision == "fp16" else None
    with np.errstate(over="ignore", invalid="ignore"):
        st = train_step(net, [reverse_batch(np.random.default_rng(11))], adam, shrunk(C_PAPER), scaler,
                        clip_norm=clip_norm, measure_grad_norm=True)
    return adam.seen, st


(g32,), st32 = handed_to_adam("fp32")
(g16,), st16 = handed_to_adam("fp16")
bound = 0.5 * float(st32.grad_norm)
(clipped,), st_clip = handed_to_adam("fp16", clip_norm=bound)
clipped_norm = float(st32.grad_norm) * bound / (float(st32.grad_norm) + 1e-6)   # chapter 16: × bound/(‖g‖ + 10⁻⁶)
overflow_seen, st_overflow = handed_to_adam("fp16", init_scale=2.0 ** 60)       # logit gradients ~1e9: inf in fp16
relative = float(np.linalg.norm(g16 - g32) / np.linalg.norm(g32))
cosine = float(clipped @ g32 / (np.linalg.norm(clipped) * np.linalg.norm(g32)))
print(f"‖g‖: fp32 {float(st32.grad_norm):.3e}, fp16 scaled and unscaled {float(st16.grad_norm):.3e}; "
      f"‖g16 − g32‖/‖g32‖ = {relative:.1e}; clipped at {bound:.3e} (→ {clipped_norm:.3e}): "
      f"Adam got ‖g‖ = {np.linalg.norm(clipped):.3e} "
      f"(cosine with fp32's {cosine:.4f}); an overflowing step handed Adam {len(overflow_seen)} gradients")

# %% CHECK
assert relative < 0.02, f"Adam must be handed the unscaled gradient, fp32's to fp16's precision: " \
                        f"off by {relative:.2e} " \
                        f"(a ratio of {np.linalg.norm(g16) / np.linalg.norm(g32):.3g}: is the ÷ s missing?)"
assert abs(float(st16.grad_norm) / float(st32.grad_norm) - 1) < 0.02, \
    f"the norm train_step reports (and clips by) must be fp32's: {float(st16.grad_norm):.3e} " \
    f"vs {float(st32.grad_norm):.3e}"
assert abs(np.linalg.norm(clipped) / clipped_norm - 1) < 0.02 and cosine > 0.99, \
    f"unscale, then clip: Adam must get fp32's gradient clipped to {clipped_norm:.3e}, got norm " \
    f"{np.linalg.norm(clipped):.3e} (clipped before unscaling?)"
assert not overflow_seen and not st_overflow.stepped, "check before step: an overflowing step must not reach Adam"

# %% [markdown]
# Why bf16 needs no scaler: underflow is a matter of **range**, and bf16 has
# fp32's exponent, so every gradient fp32 can hold, bf16 can hold (coarsely).
# Its 7-bit mantissa makes each value less precise (the curves differ from fp32
# in the second decimal), which the fp32 masters absorb. That is why
# `python -m train fit --set train.precision=bf16` runs without a scaler and
# `precision=fp16` always uses one; on GPUs with bf16 (A100, H100) it is the
# simpler choice.
#
# ## Summary
# - fp16 has 10 mantissa bits and a range of 6·10⁻⁸ … 65,504; bf16 keeps fp32's 8 exponent bits (its range) with 7 mantissa bits; casts round to nearest, ties to even.
# - Gradients of a paper-sized step are ~10⁻⁹ and flush to zero in fp16: dynamic loss scaling multiplies the loss by s, unscales in fp32, and skips and halves on overflow; bf16 needs none.
# - Updates below half a 16-bit gap are lost, so weights, Adam's moments and the update stay in fp32 (masters) and only a rounded copy feeds the forward pass.
#
# ## Exercises
# 1. **Predict, then run.** A weight of 512.0 receives +0.2 ten times. What is it afterwards if it is kept in
#    fp16, in bf16, in fp32? (Answer key: `PREDICT` in `chapters/solutions/19_mixed_precision.py`.)
# 2. Write `to_bits(values, exp_bits, man_bits)`, the inverse of `decode`: the bit patterns (integers) of
#    values that are exactly representable in the format (zeros of both signs, subnormals, ±inf included).
#    `check_to_bits(fn)` round-trips every fp16 and bf16 pattern.
# 3. Some bf16 optimizers keep no fp32 masters; they keep a 16-bit **compensation** term beside each weight
#    that carries what rounding lost (Kahan summation). Write `compensated_updates(w0, update, steps)` that
#    adds `update` to `w0` `steps` times using fp16 numbers only (np.float16 for every value you store), and
#    returns the final fp16 weight. `check_compensated_updates(fn)` wants it within one fp16 gap of the exact sum.

# %%
def check_to_bits(to_bits) -> None:
    """Exercise 2: decode then to_bits gives back every non-NaN pattern of fp16, bf16 and two 8-bit formats
    NumPy has no type for (E4M3 and E3M4: no cast can do the bit-level work)."""
    for name, (exp_bits, man_bits) in {**{n: FORMATS[n] for n in ("fp16", "bf16")}, "E4M3": (4, 3),
                                       "E3M4": (3, 4)}.items():
        patterns = np.arange(1 << (1 + exp_bits + man_bits), dtype=np.int64)
        values = decode(patterns, exp_bits, man_bits)
        keep = ~np.isnan(values)
        got = np.asarray(to_bits(values[keep], exp_bits, man_bits), dtype=np.int64)
        np.testing.assert_array_equal(got, patterns[keep], err_msg=f"{name}: to_bits(decode(bits)) must be bits")


def check_compensated_updates(compensated_updates) -> None:
    """Exercise 3: close to the exact sum, where plain fp16 addition is stuck."""
    for w0, update, n in ((1.0, -1e-4, 1000), (512.0, 0.2, 50), (3.0, 3e-4, 2000)):
        got = compensated_updates(np.float16(w0), np.float16(update), n)
        assert isinstance(got, np.float16), "return the fp16 weight"
        exact = w0 + n * float(np.float16(update))
        gap = float(np.spacing(np.float16(exact)))
        assert abs(float(got) - exact) <= gap, f"w0 {w0}, {n} × {update}: got {got}, the exact sum is {exact:.5f}"


# %% CHECK the checks: a wrong answer must fail them
def _to_bits_without_subnormals(values, exp_bits, man_bits):        # every number taken as normal
    bias = 2 ** (exp_bits - 1) - 1
    a = np.abs(values)
    with np.errstate(divide="ignore", invalid="ignore"):
        exponent = np.where(a > 0, np.floor(np.log2(np.where(a > 0, a, 1))), -bias) + bias
        mantissa = np.round((a / np.exp2(exponent - bias) - 1) * 2 ** man_bits)
        bits = (exponent.astype(np.int64) << man_bits) + np.nan_to_num(mantissa).astype(np.int64)
    return bits | (np.signbit(values).astype(np.int64) << (exp_bits + man_bits))


def _plain_fp16(w0, update, n):
    w = np.float16(w0)
    for _ in range(n):
        w = np.float16(w + update)
    return w


assert fails(check_to_bits, _to_bits_without_subnormals), "check_to_bits accepted an encoder without subnormals"


def _numpy_casts(values, exp_bits, man_bits):                       # NumPy's casts: float16, float32's top bits
    values = np.asarray(values)
    if (exp_bits, man_bits) == FORMATS["fp16"]:
        return values.astype(np.float16).view(np.uint16)
    return values.astype(np.float32).view(np.uint32) >> (23 - man_bits)


assert fails(check_to_bits, _numpy_casts), "check_to_bits accepted NumPy's casts for the bit-level work"
assert fails(check_compensated_updates, _plain_fp16), "check_compensated_updates accepted plain fp16 sums"

# %%
finish("19_mixed_precision", {check_to_bits: "to_bits", check_compensated_updates: "compensated_updates"})
