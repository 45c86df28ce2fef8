"""Solutions to chapter 23's exercises (checked by `check_scale_variant`, `check_count_parameters`) and the answer
key PREDICT."""
import dataclasses

from transformer import TransformerConfig

PAPER_BASE = TransformerConfig.base()
SIZES = ("N", "d_model", "d_ff", "h", "d_k", "d_v")


def scale_variant(base, changes):
    """Each size: the paper's value x ours / the paper base's, rounded, at least 1. A d_k or d_v the paper
    sets to d_model/h (rows A, C's d_model, big) is derived again from our d_model and h; everything else
    (P_drop, eps_ls, the positional encoding) is taken as the paper has it."""
    paper = dataclasses.replace(PAPER_BASE, **changes)
    ours = {}
    for name, value in changes.items():
        if name in ("d_k", "d_v") and value * paper.h == paper.d_model:
            continue
        ours[name] = max(1, round(value * getattr(base, name) / getattr(PAPER_BASE, name))) if name in SIZES \
            else value
    for name in ("d_k", "d_v"):
        if name in changes and name not in ours:
            ours[name] = max(1, round(ours.get("d_model", base.d_model) / ours.get("h", base.h)))
    return dataclasses.replace(base, **ours)


def count_parameters(c):
    """Per attention sub-layer W^Q, W^K (D x h*d_k), W^V (D x h*d_v), W^O (h*d_v x D) with biases; per FFN two
    matrices and two biases (Eq. (2)); a gain and a bias per LayerNorm (2 per encoder layer, 3 per decoder layer,
    plus one final LayerNorm per stack with pre-norm); V x D once when tied (§3.4), three times untied; learned
    positions: one max_len x D table in each stack (sinusoids have no weights)."""
    D, qk, v = c.d_model, c.h * c.d_k, c.h * c.d_v
    attention = 2 * (D * qk + qk) + (D * v + v) + (v * D + D)
    ffn = D * c.d_ff + c.d_ff + c.d_ff * D + D
    norm = 2 * D
    layers = c.N * (attention + ffn + 2 * norm) + c.N * (2 * attention + ffn + 3 * norm)
    final_norms = 2 * norm if c.norm == "pre" else 0
    embeddings = c.vocab_size * D * (1 if c.tie_embeddings else 3)
    positions = 2 * c.max_len * D if c.positional == "learned" else 0
    return layers + final_norms + embeddings + positions


PREDICT = """Exercise 1. Exactly as many as base, 63,082,496 with our 37,000-piece vocabulary: rows (A) keep
h x d_k = h x d_v = d_model = 512 ("keeping the amount of computation constant", §6.2), and every projection
matrix is d_model x h*d_k, so the weights do not depend on how they are cut into heads. Rows (D) change only
rates (dropout, label smoothing), and row (E) replaces the sinusoids (no weights) by a learned table of
max_len x d_model per stack, small next to 63M. So rows (A), (D) and (E) all have base's ~65M, and Table 3
leaves their cells blank, as it leaves every cell that equals base's."""
