"""Per-layer activation and gradient norms, to see from inside how a stack trains or collapses (§3.1).

    norms = layer_norms(model, batch)          # after an update: {"enc.0.feed_forward.f": ..., ...}

With `train.log_norms = true` the loop writes this dict as a `{"kind": "norms"}` record of
metrics.jsonl at every log line; `python -m train plot` draws it (train/run/plots.py).

Every sub-layer connection of §3.1, LayerNorm(x + Sublayer(x)) (post-norm) or
x + Sublayer(LayerNorm(x)) (pre-norm), is measured on the update's first batch, over the
real (non-padding) positions, after the update (eval mode, so no dropout mask is drawn
and the run's random stream is untouched):

    <stack>.<i>.<sublayer>.x         rms of the residual stream x entering the connection
    <stack>.<i>.<sublayer>.f         rms of the sub-layer's output F (before residual dropout)
    <stack>.<i>.<sublayer>.f_const   rms of F's mean over a sentence's positions: the part every word gets
    <stack>.<i>.<sublayer>.f_spread  rms of F minus that mean: what differs from word to word (f² = const² + spread²)
    <stack>.<i>.<sublayer>.y_spread  the same word-to-word spread of the connection's output, over its rms
    <stack>.<i>.<sublayer>.grad      L2 norm of the gradient of the sub-layer's weights and its LayerNorm's γ, β
    memory.spread                    the encoder output's word-to-word spread over its rms (what the decoder reads)

stack is `enc` or `dec`; sublayer is `self_attn`, `cross_attn` (decoder) or `feed_forward`.
The gradients are the ones the update just used (before clipping; on many ranks, rank 0's
own, before they were summed). A collapsed encoder has memory.spread → 0: every word the same vector.

Shapes: B batch, L positions (S source or T target), D = d_model.
"""
from __future__ import annotations

import contextlib
import math

import numpy as np

import minitensor as mt
from minitensor.dtypes import BF16
from transformer.layers import SublayerConnection
from transformer.masks import padding_mask

SUBLAYERS = {"encoder": ("self_attn", "feed_forward"), "decoder": ("self_attn", "cross_attn", "feed_forward")}


def layer_norms(model, batch) -> dict[str, float]:
    """The norms above for `model` on one batch (src (B,S), tgt_in (B,T), tgt_out (B,T)) of token ids."""
    src, tgt_in, _ = batch
    pad = model.config.pad_id
    real = {"encoder": _host(src) != pad, "decoder": _host(tgt_in) != pad}      # (B, S), (B, T)
    seen: dict[str, list] = {}
    was_training = model.training
    model.eval()
    try:
        with mt.no_grad(), _watching(model, seen):
            memory = model.encode(src)                                            # (B, S, D); fused: (S, B, D)
            model.decode(tgt_in, memory, padding_mask(model.backend.asarray(src), pad))
    finally:
        model.train(was_training)
    norms = {}
    for name, activations in seen.items():
        x, f, y = (_batch_major(a, model.time_major) for a in activations)
        stack, _, i, _, position = name.split(".")                              # encoder.layers.0.sublayers.1
        sublayer = SUBLAYERS[stack][int(position)]
        key, mask = f"{stack[:3]}.{i}.{sublayer}", real[stack]
        norms[f"{key}.x"] = _parts(x, mask)[0]
        norms[f"{key}.f"], norms[f"{key}.f_const"], norms[f"{key}.f_spread"] = _parts(f, mask)
        norms[f"{key}.y_spread"] = _relative_spread(y, mask)
        norms[f"{key}.grad"] = _grad_norm(model, (f"{stack}.layers.{i}.{sublayer}.", f"{name}."))
    norms["memory.spread"] = _relative_spread(_batch_major(memory, model.time_major), real["encoder"])
    return norms


@contextlib.contextmanager
def _watching(model, seen: dict):
    """While the block runs, every SublayerConnection records [x, F, output] under its module name.

    The connection's own forward runs unchanged; an instance attribute `forward` shadows the
    class's for the block only, and passes it a sub-layer that also records F.
    """
    connections = [(name, m) for name, m in model.named_modules() if isinstance(m, SublayerConnection)]
    for name, connection in connections:
        connection.forward = _recording(connection, name.rstrip("."), seen)
    try:
        yield
    finally:
        for _, connection in connections:
            del connection.forward


def _recording(connection, name: str, seen: dict):
    forward = type(connection).forward

    def recorded(x, sublayer):
        def recorded_sublayer(y):
            out, aux = sublayer(y)
            seen[name] = [x, out]
            return out, aux

        y, aux = forward(connection, x, recorded_sublayer)
        seen[name].append(y)
        return y, aux

    return recorded


def _host(a) -> np.ndarray:
    a = a.data if isinstance(a, mt.Tensor) else a
    return np.asarray(a.get() if hasattr(a, "get") else a)                       # CuPy -> NumPy


def _batch_major(a, time_major: bool) -> np.ndarray:
    """An activation as float64 (B, L, D) on the host; impl "fused" runs the stacks time-major (L, B, D)."""
    a = a.astype(np.float32) if a.dtype == BF16 else a                            # bf16 bits are no numbers
    a = _host(a).astype(np.float64)
    return a.swapaxes(0, 1) if time_major else a


def _parts(a: np.ndarray, mask: np.ndarray) -> tuple[float, float, float]:
    """(rms, rms of the per-sentence mean, rms of the rest) of a (B, L, D) over the real positions of mask (B, L)."""
    a = a * mask[..., None]                                                       # (B, L, D), padding zeroed
    n = mask.sum(axis=1)[:, None, None]                                           # (B, 1, 1) real positions
    mean = a.sum(axis=1, keepdims=True) / np.maximum(n, 1)                        # (B, 1, D)
    rest = (a - mean) * mask[..., None]                                           # (B, L, D)
    count = max(mask.sum(), 1) * a.shape[-1]
    return (math.sqrt((a ** 2).sum() / count), math.sqrt((mean ** 2 * n).sum() / count),
            math.sqrt((rest ** 2).sum() / count))


def _relative_spread(a, mask: np.ndarray) -> float:
    rms, _, spread = _parts(a, mask)
    return spread / rms if rms > 0 else 0.0


def _grad_norm(model, prefixes: tuple[str, ...]) -> float:
    total = 0.0
    for name, p in model.named_parameters():
        if p.grad is not None and name.startswith(prefixes):
            g = _host(p.grad).astype(np.float64)
            total += float((g * g).sum())
    return math.sqrt(total)
