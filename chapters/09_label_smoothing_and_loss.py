# ---
# jupyter:
#   jupytext:
#     formats: py:percent
#     text_representation:
#       extension: .py
#       format_name: percent
# ---

# %% [markdown]
# # 09 · Label smoothing and the loss
#
# > During training, we employed label smoothing of value ε_ls = 0.1. This
# > hurts perplexity, as the model learns to be more unsure, but improves
# > accuracy and BLEU score. (§5.4)
#
# The plain loss is cross-entropy against a one-hot target: −log p(gold). Label
# smoothing replaces the one-hot with a softer distribution q that keeps 1 − ε
# on the gold token and spreads ε over the others, so the model is never
# rewarded for pushing p(gold) all the way to 1. The paper does not say how ε
# is spread; our convention (minitensor/kernels/README.md) is:
#
# $$q(\text{gold}) = 1 - \varepsilon, \quad q(\text{pad}) = 0, \quad q(j) = \frac{\varepsilon}{V - 2} \text{ for the other } V - 2 \text{ tokens},$$
# $$\text{loss per token} = -\sum_j q_j \log p_j, \quad \text{averaged over the non-padding tokens.}$$
#
# Shapes: B batch, T target length, V vocab, N = B·T rows.
#
# The library code this chapter builds:
# [`transformer/loss.py`](../transformer/loss.py).

# %%
import matplotlib.pyplot as plt
import numpy as np

import minitensor as mt
from _common import calls_to, fails, finish, hold_training_path, show
from transformer.loss import LabelSmoothingLoss, closed_form_smoothed_loss

rng = np.random.default_rng(0)
PAD = 0

# %% [markdown]
# ## 1. The smoothed target, built densely
#
# The direct way: build q as a (N, V) matrix, take −Σ q log softmax(z) per
# row, zero the padding rows, divide by the number of real tokens. This is
# what the fused kernel avoids (it never materialises q), and what it must
# agree with.

# %%
def smoothed_targets(targets, V, eps, pad):
    """(N,) gold ids -> (N, V) q: 1−ε on gold, 0 on pad, ε/(V−2) elsewhere; padding rows all 0."""
    q = np.full((len(targets), V), eps / (V - 2))
    q[np.arange(len(targets)), targets] = 1 - eps
    q[:, pad] = 0.0
    q[targets == pad] = 0.0
    return q


def log_softmax(z):
    z = z - z.max(axis=-1, keepdims=True)
    return z - np.log(np.exp(z).sum(axis=-1, keepdims=True))


def smoothed_loss_dense(logits, targets, eps, pad):
    """Mean over non-pad tokens of −Σ_j q_j log p_j, logits (B, T, V), targets (B, T)."""
    V = logits.shape[-1]
    z, t = logits.reshape(-1, V), targets.reshape(-1)                 # (N, V), (N,)
    per_row = -(smoothed_targets(t, V, eps, pad) * log_softmax(z)).sum(axis=1)   # (N,)
    return per_row.sum() / (t != pad).sum()


B, T, V, eps = 3, 5, 11, 0.1
logits = rng.standard_normal((B, T, V)) * 2
targets = rng.integers(1, V, size=(B, T))
targets[0, 3:] = PAD                                                  # a shorter sentence
targets[2, 4:] = PAD
lib = LabelSmoothingLoss(eps_ls=eps, pad_id=PAD)(mt.tensor(logits, dtype="float64"), targets)
dense = smoothed_loss_dense(logits, targets, eps, PAD)
closed, nll_sum, n_tokens = closed_form_smoothed_loss(logits, targets, eps, PAD)
print(f"loss: library {lib.loss.item():.6f}, dense {dense:.6f}, closed form {closed:.6f}; tokens {lib.n_tokens}")

# %% CHECK
q_check = smoothed_targets(targets.reshape(-1), V, eps, PAD)
real = targets.reshape(-1) != PAD
mt.assert_close(q_check[real].sum(axis=1), np.ones(real.sum()), name="q sums to 1 on real tokens")
assert lib.n_tokens == n_tokens == int(real.sum()) == 12, "normalise by non-pad tokens only"
mt.assert_close(lib.loss, np.float64(dense), name="library loss vs dense q", atol=1e-6)
mt.assert_close(np.float64(closed), np.float64(dense), name="closed form vs dense q")
gold_logp = np.take_along_axis(log_softmax(logits), targets[..., None], axis=-1)[..., 0]
mt.assert_close(float(lib.nll_sum), -gold_logp[targets != PAD].sum(), name="true NLL (for perplexity)", atol=1e-6)

# %% [markdown]
# ## 2. The closed form
#
# Since Σ_j q_j = 1, with lse = log Σ_j exp z_j and log p_j = z_j − lse:
#
# $$-\sum_j q_j \log p_j = \mathrm{lse} - (1 - \varepsilon)\, z_{\text{gold}} - \frac{\varepsilon}{V - 2}\left(\sum_j z_j - z_{\text{gold}} - z_{\text{pad}}\right)$$
#
# One pass over the row (a max, a sum of exps, a plain sum) and no q: that is
# what `closed_form_smoothed_loss` and the fused cross-entropy kernel compute
# (`LabelSmoothingLoss(..., impl="fused")`; the default `impl="composed"` builds q
# as above, with Tensor ops). From chapter 10 on, `transformer.LabelSmoothingLoss`
# is the loss every training loop calls.
# The gradient with respect to the logits is just `softmax(z) − q` per token,
# divided by the token count; autograd through the library loss must say so.

# %%
leaf = mt.tensor(logits, requires_grad=True, dtype="float64")
LabelSmoothingLoss(eps_ls=eps, pad_id=PAD)(leaf, targets).loss.backward()
p = np.exp(log_softmax(logits))
expected_grad = (p - q_check.reshape(B, T, V)) * real.reshape(B, T, 1) / real.sum()

# %% CHECK
mt.assert_close(leaf.grad, expected_grad, name="d loss / d logits = (softmax − q)/n_tokens")
assert np.all(leaf.grad[targets == PAD] == 0), "padding positions get no gradient"

# %% [markdown]
# ## 3. What smoothing does to the optimum
#
# With ε = 0 the loss keeps falling as the gold logit's margin grows: the model
# is pushed to infinite confidence. With ε > 0 the loss is minimised at p = q,
# where (with padding's logit at −∞, since padding is never a target) the
# margin between the gold logit and the others is log((1−ε)(V−2)/ε),
# and the minimum is the entropy of q, not 0. That is the "hurts perplexity"
# of §5.4: the model is trained to keep probability ε on the alternatives.

# %%
V_demo = 100
margins = np.linspace(0, 15, 301)


def loss_at_margin(margin, eps):
    z = np.zeros((1, 1, V_demo))
    z[..., 5] = margin                                              # gold = 5, the other tokens 0
    z[..., PAD] = -1e9                                              # padding is never a target: p(pad) → 0
    return smoothed_loss_dense(z, np.array([[5]]), eps, PAD)


curves = {e: np.array([loss_at_margin(m, e) for m in margins]) for e in (0.0, 0.1, 0.2)}
best_margin = np.log((1 - 0.1) * (V_demo - 2) / 0.1)
q_demo = smoothed_targets(np.array([5]), V_demo, 0.1, PAD)[0]
entropy_q = -(q_demo[q_demo > 0] * np.log(q_demo[q_demo > 0])).sum()

fig, ax = plt.subplots(figsize=(6, 3.5))
for e, curve in curves.items():
    ax.plot(margins, curve, label=f"ε_ls = {e}")
ax.axvline(best_margin, color="gray", ls="--", label="optimum for ε_ls = 0.1")
ax.set_xlabel("gold logit − other logits")
ax.set_ylabel("loss per token")
ax.legend()
show(fig, "09_label_smoothing_optimum")
print(f"ε=0.1: best margin {margins[curves[0.1].argmin()]:.2f} (closed form {best_margin:.2f}), "
      f"min loss {curves[0.1].min():.4f} (entropy of q {entropy_q:.4f})")

# %% CHECK
assert np.all(np.diff(curves[0.0]) < 0), "without smoothing the loss falls forever as the margin grows"
assert abs(margins[curves[0.1].argmin()] - best_margin) <= margins[1] - margins[0], "optimum at p = q"
assert abs(curves[0.1].min() - entropy_q) < 1e-3, "the minimum smoothed loss is H(q), not 0"

# %% [markdown]
# ## 4. The path that trains
#
# Every config trains with `impl = "fused"`: the loss is one `CrossEntropy`
# Function whose kernel computes the closed form of section 2, the NLL and the
# gradient softmax − q in one pass over each row (compiled with Numba on the
# CPU, a CUDA kernel on a GPU). Never building q, it must still put nothing on
# padding, neither in the loss nor in the gradient. We hold it to our dense q
# of section 1, with a random cotangent r on the loss (the gradient is then
# r·(softmax − q)/n_tokens, section 2), on every backend.

# %%
r_loss = rng.standard_normal(())
dense_answer = {"output": np.float64(dense), "logits": r_loss * expected_grad}

# %% CHECK
hold_training_path("label-smoothed cross-entropy with padding (fused CrossEntropy)",
                   lambda z: LabelSmoothingLoss(eps_ls=eps, pad_id=PAD, impl="fused")(z, targets).loss,
                   {"logits": logits}, dense_answer, r_loss)

# %% [markdown]
# On a CPU the fused model goes one step further (`Transformer.loss`): the logits z = x Eᵀ (§3.4) are
# never made whole. `LinearCrossEntropy` projects 256 rows at a time, scores them with the same kernel,
# and turns their gradient dz into dx = dz E and dE += dzᵀ x at once, while the block is still in cache
# (Multi30k's 2,048 × 8,000 logits are 64 MB, and so is their gradient); backward only scales those by
# the cotangent. The chapter's own answer is the chain rule through the product: section 2's dz, times E
# for x and transposed onto x for E. Blocks of 4 rows here, so the sum over blocks is tested too.

# %%
from minitensor.functions import LinearCrossEntropy  # noqa: E402

D = 4
x_rows, table = rng.standard_normal((B * T, D)), rng.standard_normal((V, D))
projected = x_rows @ table.T                                          # z = x Eᵀ, (N, V)
real_rows = targets.reshape(-1) != PAD
dz = (np.exp(log_softmax(projected)) - smoothed_targets(targets.reshape(-1), V, eps, PAD)) * real_rows[:, None]
dz = r_loss * dz / real_rows.sum()                                    # section 2's gradient, times the cotangent
projection_answer = {"output": np.float64(smoothed_loss_dense(projected, targets, eps, PAD)),
                     "x": dz @ table, "E": dz.T @ x_rows}


def blocked_loss(x, e):
    rows, LinearCrossEntropy.ROWS = LinearCrossEntropy.ROWS, 4
    try:
        return LabelSmoothingLoss(eps_ls=eps, pad_id=PAD, impl="fused").of_projection(x, e, targets.reshape(-1)).loss
    finally:
        LinearCrossEntropy.ROWS = rows


# %% CHECK
hold_training_path("the projection and the loss in blocks (LinearCrossEntropy)", blocked_loss,
                   {"x": x_rows, "E": table}, projection_answer, r_loss)

# %% [markdown]
# ## Summary
# - Smoothed target: 1 − ε on gold, ε/(V − 2) on every token but gold and padding; padding rows count for nothing.
# - Closed form lse − (1−ε) z_gold − ε/(V−2)(Σz − z_gold − z_pad) needs no (N, V) matrix; its gradient is softmax − q.
# - The loss is minimised at p = q with value H(q) > 0: report the true NLL (nll_sum) for perplexity, not the smoothed loss.
#
# ## Exercises
# 1. **Predict, then run.** For the base model's vocabulary (V = 37,000) and ε = 0.1, what is the smallest
#    smoothed loss per token any model can reach? Estimate it, then compute H(q).
#    (Answer key: `PREDICT` in `chapters/solutions/09_label_smoothing_and_loss.py`.)
# 2. Many libraries spread ε differently: q_j = ε/V on **every** token, the gold one included, plus 1 − ε on
#    gold (no special case for padding as a class; padding *targets* still count for nothing). Derive the
#    closed form of −Σ_j q_j log p_j under this rule (no q matrix) and write
#    `uniform_smoothed_loss(logits, targets, eps, pad)`, the mean over non-pad tokens.
#    `check_uniform_smoothed_loss(fn)` compares it with a dense q.
# 3. Under that rule, what is the smallest loss per token a model can reach, as a closed form in ε and V?
#    Write `uniform_min_loss(eps, V)`. `check_uniform_min_loss(fn)` minimises the loss directly.

# %%
def _uniform_q(targets, V, eps):
    """The other spreading rule, built densely: ε/V everywhere, plus 1 − ε on gold."""
    q = np.full((len(targets), V), eps / V)
    q[np.arange(len(targets)), targets] += 1 - eps
    return q


def check_uniform_smoothed_loss(uniform_smoothed_loss) -> None:
    """Exercise 2: against −Σ q log p with a dense q, on random logits with padding, drawn afresh each call; the
    answer is the closed form, without building q (neither this chapter's dense q nor its own smoothed_targets)."""
    check_rng = np.random.default_rng()
    for e in (0.0, 0.1, float(check_rng.uniform(0.05, 0.5))):
        Vc = int(check_rng.integers(5, 40))
        z = check_rng.standard_normal((2, 6, Vc)) * 3
        t = check_rng.integers(1, Vc, size=(2, 6))
        t[1, int(check_rng.integers(1, 6)):] = PAD
        keep = t.reshape(-1) != PAD
        with calls_to(_uniform_q, smoothed_targets, smoothed_loss_dense) as calls:
            got = float(uniform_smoothed_loss(z, t, e, PAD))
        assert not calls, f"derive the closed form, no q matrix: the answer called {dict(calls)}"
        rows = -(_uniform_q(t.reshape(-1), Vc, e) * log_softmax(z.reshape(-1, Vc))).sum(axis=1)
        assert np.isclose(got, rows[keep].mean(), rtol=1e-9), f"ε = {e}, V = {Vc}"


def check_uniform_min_loss(uniform_min_loss) -> None:
    """Exercise 3: the loss at p = q (its minimum) for ε and V drawn afresh each call, to float64's precision
    (a minimum searched for numerically does not reach it), and no lower value on a grid of margins."""
    check_rng = np.random.default_rng()
    for e, Vc in [(0.1, 100)] + list(zip(check_rng.uniform(0.01, 0.4, size=3), check_rng.integers(3, 50_000, size=3))):
        e, Vc = float(e), int(Vc)
        q = _uniform_q(np.array([1]), Vc, e)[0]
        at_q = -(q * np.log(q)).sum()
        margins = np.linspace(0, 25, 2001)
        lse = np.logaddexp(margins, np.log(Vc - 1))                 # gold logit = margin, the other V − 1 at 0
        grid = lse - (1 - e + e / Vc) * margins                    # −Σ q log p with Σ_j q_j z_j = (1 − ε + ε/V)·margin
        got = float(uniform_min_loss(e, Vc))
        assert abs(got - at_q) < 1e-9, f"ε = {e}, V = {Vc}: {got:.6f}, the loss at p = q is {at_q:.6f}"
        assert grid.min() >= got - 1e-9, f"ε = {e}, V = {Vc}: a margin reaches {grid.min():.6f} < {got:.6f}"


# %% CHECK the checks: a wrong answer must fail them
def _uniform_loss_forgets_gold_share(z, t, e, pad):                # the ε/V on gold left out
    Vz = z.shape[-1]
    flat, tt = z.reshape(-1, Vz), t.reshape(-1)
    lse = np.logaddexp.reduce(flat, axis=1)
    gold = flat[np.arange(len(tt)), tt]
    rows = lse - (1 - e) * gold - e / Vz * (flat.sum(axis=1) - gold)
    return rows[tt != pad].mean()


assert fails(check_uniform_smoothed_loss, _uniform_loss_forgets_gold_share), "accepted ε/V missing on gold"
assert fails(check_uniform_smoothed_loss, lambda z, t, e, pad: smoothed_loss_dense(z, t, e, pad)), \
    "accepted this chapter's ε/(V − 2) rule"
assert fails(check_uniform_min_loss, lambda e, Vc: -(1 - e) * np.log(1 - e) - e * np.log(e / (Vc - 1))), \
    "accepted the entropy of a q without the gold share"


def _uniform_loss_dense(z, t, e, pad):                             # the right numbers, by building q
    Vz = z.shape[-1]
    rows = -(_uniform_q(t.reshape(-1), Vz, e) * log_softmax(z.reshape(-1, Vz))).sum(axis=1)
    return rows[t.reshape(-1) != pad].mean()


def _min_loss_by_search(e, Vc):                                     # the minimum found on a fine grid of margins
    margins = np.linspace(0, 25, 20_001)
    return float((np.logaddexp(margins, np.log(Vc - 1)) - (1 - e + e / Vc) * margins).min())


assert fails(check_uniform_smoothed_loss, _uniform_loss_dense), "check_uniform_smoothed_loss accepted a dense q"
assert fails(check_uniform_min_loss, _min_loss_by_search), "check_uniform_min_loss accepted a grid search"

# %%
finish("09_label_smoothing_and_loss", {check_uniform_smoothed_loss: "uniform_smoothed_loss", check_uniform_min_loss: "uniform_min_loss"})
