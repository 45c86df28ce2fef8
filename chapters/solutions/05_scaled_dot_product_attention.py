"""Solutions to chapter 05's exercises (checked by `check_attention`, `check_attention_backward`)."""
import math

import numpy as np


def attention(q, k, v, mask=None):
    """§3.2.1, Eq. (1): softmax(QKᵀ/√d_k) V; mask True = blocked; a fully blocked row gives zeros."""
    scores = q @ k.swapaxes(-1, -2) / math.sqrt(q.shape[-1])         # (..., Tq, Tk)
    if mask is not None:
        scores = np.where(mask, -np.inf, scores)
    top = scores.max(axis=-1, keepdims=True)
    top = np.where(np.isfinite(top), top, 0.0)                        # all −∞: avoid −∞ − (−∞)
    weights = np.exp(scores - top)
    total = weights.sum(axis=-1, keepdims=True)
    weights = weights / np.where(total == 0, 1.0, total)              # blocked rows stay 0
    return weights @ v, weights


def attention_backward(q, k, v, dout):
    """Gradients of Eq. (1) (no mask) given dL/dout; returns (dq, dk, dv)."""
    scale = 1.0 / math.sqrt(q.shape[-1])
    _, w = attention(q, k, v)                                         # (..., Tq, Tk)
    dv = w.swapaxes(-1, -2) @ dout                                    # out = W V
    dw = dout @ v.swapaxes(-1, -2)
    ds = w * (dw - (dw * w).sum(axis=-1, keepdims=True))             # softmax backward
    dq = ds @ k * scale                                               # S = scale · Q Kᵀ
    dk = ds.swapaxes(-1, -2) @ q * scale
    return dq, dk, dv


PREDICT = """Exercise 1. Adding the same constant c to every score of a row changes nothing: softmax(s + c) =
e^c e^s / (e^c Σ e^s) = softmax(s) (that is also why subtracting the row max is safe). If every key is
identical, every score in the row is the same, so the weights are uniform, 1/Tk each, and the output is the
plain average of the values."""
