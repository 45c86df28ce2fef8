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
# > "Label Smoothing: During training, we employed label smoothing of value
# > ε_ls = 0.1. This hurts perplexity, as the model learns to be more unsure,
# > but improves accuracy and BLEU score." (§5.4)
#
# The plain loss is cross-entropy against a one-hot target: −log p(gold). Label
# smoothing replaces the one-hot with a softer distribution q that keeps 1 − ε
# on the gold token and spreads ε over the others, so the model is never
# rewarded for pushing p(gold) all the way to 1. The paper does not say how ε
# is spread; our convention (minitensor/kernels/README.md) is:
#
#     q(gold) = 1 − ε,  q(pad) = 0,  q(j) = ε / (V − 2) for the other V − 2 tokens,
#     loss per token = −Σ_j q_j log p_j,  averaged over the non-padding tokens.
#
# Shapes: B batch, T target length, V vocab, N = B·T rows.

# %%
import sys
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt
import numpy as np

import minitensor as mt
from transformer.loss import LabelSmoothingLoss, closed_form_smoothed_loss

FAST = "--fast" in sys.argv
CHECK_SOLUTIONS = "--check-solutions" in sys.argv
HERE = Path(__file__).resolve().parent if "__file__" in globals() else Path.cwd()
OUT = HERE / "_out"
OUT.mkdir(exist_ok=True)
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
#     −Σ_j q_j log p_j = lse − (1 − ε) z_gold − ε/(V − 2) · (Σ_j z_j − z_gold − z_pad)
#
# One pass over the row (a max, a sum of exps, a plain sum) and no q: that is
# what `closed_form_smoothed_loss` and the fused cross-entropy kernel compute.
# The gradient with respect to the logits is just `softmax(z) − q` per token,
# divided by the token count; autograd through the library loss must say so.

# %%
leaf = mt.tensor(logits, requires_grad=True, dtype="float64")
LabelSmoothingLoss(eps_ls=eps, pad_id=PAD)(leaf, targets).loss.backward()
p = np.exp(log_softmax(logits))
expected_grad = (p - q_check.reshape(B, T, V)) * real.reshape(B, T, 1) / real.sum()

# %% CHECK
mt.assert_close(leaf.grad, expected_grad, name="d loss / d logits = (softmax − q)/n_tokens", atol=1e-9)
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
fig.tight_layout()
fig.savefig(OUT / "09_label_smoothing_optimum.png", dpi=100)
plt.close(fig)
print(f"ε=0.1: best margin {margins[curves[0.1].argmin()]:.2f} (closed form {best_margin:.2f}), "
      f"min loss {curves[0.1].min():.4f} (entropy of q {entropy_q:.4f})")

# %% CHECK
assert np.all(np.diff(curves[0.0]) < 0), "without smoothing the loss falls forever as the margin grows"
assert abs(margins[curves[0.1].argmin()] - best_margin) <= margins[1] - margins[0], "optimum at p = q"
assert abs(curves[0.1].min() - entropy_q) < 1e-3, "the minimum smoothed loss is H(q), not 0"

# %% [markdown]
# ## Summary
# - Smoothed target: 1 − ε on gold, ε/(V − 2) on every token but gold and padding; padding rows count for nothing.
# - Closed form lse − (1−ε) z_gold − ε/(V−2)(Σz − z_gold − z_pad) needs no (N, V) matrix; its gradient is softmax − q.
# - The loss is minimised at p = q with value H(q) > 0: report the true NLL (nll_sum) for perplexity, not the smoothed loss.
#
# ## Exercises
# 1. **Predict, then run.** For the base model's vocabulary (V = 37,000) and ε = 0.1, what is the smallest
#    smoothed loss per token any model can reach? Estimate it, then compute H(q).
# 2. Write `smoothed_loss(logits, targets, eps, pad)` using the closed form only (no (N, V) q).
#    `check_smoothed_loss(fn)` compares it with the library.
# 3. Write `optimal_margin(eps, V)`: the gold-minus-others logit gap at which the smoothed loss is smallest
#    (all other logits equal, padding's at −∞). `check_optimal_margin(fn)` tests it by direct minimisation.

# %%
def check_smoothed_loss(smoothed_loss) -> None:
    """Exercise 2: against LabelSmoothingLoss on random logits with padding."""
    check_rng = np.random.default_rng(21)
    for e in (0.0, 0.1, 0.3):
        z = check_rng.standard_normal((2, 6, 9)) * 3
        t = check_rng.integers(1, 9, size=(2, 6))
        t[1, 2:] = PAD
        ref = LabelSmoothingLoss(eps_ls=e, pad_id=PAD)(mt.tensor(z, dtype="float64"), t).loss.item()
        assert np.isclose(float(smoothed_loss(z, t, e, PAD)), ref, rtol=1e-9), f"ε = {e}"


def check_optimal_margin(optimal_margin) -> None:
    """Exercise 3: compare with a grid search of the dense loss."""
    for e, Vc in [(0.1, 100), (0.2, 10), (0.05, 1000)]:
        grid = np.linspace(0, 20, 4001)
        values = []
        for m in grid:
            z = np.zeros((1, 1, Vc))
            z[..., 1], z[..., PAD] = m, -1e9
            values.append(smoothed_loss_dense(z, np.array([[1]]), e, PAD))
        assert abs(optimal_margin(e, Vc) - grid[int(np.argmin(values))]) < 0.01, f"ε = {e}, V = {Vc}"


# %% CHECK the checks: a wrong answer must fail them
def _fails(check, wrong) -> bool:
    try:
        check(wrong)
    except AssertionError:
        return True
    return False


assert _fails(check_smoothed_loss, lambda z, t, e, pad: smoothed_loss_dense(z, t, e, pad) * (t != pad).sum() / t.size), \
    "accepted a loss averaged over padding too"
assert _fails(check_optimal_margin, lambda e, Vc: np.log((1 - e) / e)), "accepted a margin that ignores V"

# %%
if CHECK_SOLUTIONS:
    import importlib
    solutions = importlib.import_module("solutions.09_label_smoothing_and_loss")
    check_smoothed_loss(solutions.smoothed_loss)
    check_optimal_margin(solutions.optimal_margin)
    print("solutions OK")
print("chapter 09 OK")
