"""Encoder and decoder layers and stacks (§3.1, Figure 1), and the decoder's key/value cache.

Shapes: B batch (n = B·beam rows while searching), S source length, T target length,
P positions already decoded, D = d_model, H heads, K = d_k.

§3.1: each layer is a stack of sub-layers, each wrapped as LayerNorm(x + Sublayer(x))
with residual dropout on the sub-layer output (§5.4). The encoder layer has
self-attention and a feed-forward network; the decoder layer inserts
encoder-decoder attention between them, and masks its self-attention so that
position i sees only positions ≤ i (§3.2.3).
"""
from __future__ import annotations

import numpy as np

import minitensor as mt
from minitensor import nn

from .attention import MultiHeadAttention
from .config import TransformerConfig
from .feed_forward import PositionwiseFeedForward
from .fused import DropoutAddLayerNorm


class SublayerConnection(nn.Module):
    """Residual connection + dropout + LayerNorm around one sub-layer.

    post (the paper, §3.1): LayerNorm(x + Dropout(Sublayer(x)))   (§5.4 dropout "before it is added")
    pre:  x + Dropout(Sublayer(LayerNorm(x)))
    # DEVIATION(§3.1): "pre" normalises the sub-layer input instead of the sum (as the Annotated
    # Transformer and most later models do); it trains deeper stacks without warm-up tricks. The
    # stacks then end with one more LayerNorm. Default is the paper's "post".
    With config.impl = "fused", post-norm runs as one Function (fused.DropoutAddLayerNorm).
    """

    def __init__(self, config: TransformerConfig, rng: np.random.Generator):
        super().__init__()
        self.pre_norm, self.fused = config.norm == "pre", config.impl == "fused"
        self.norm = nn.LayerNorm(config.d_model, eps=config.layernorm_eps)
        self.dropout = nn.Dropout(config.p_drop, rng=rng)

    def forward(self, x: mt.Tensor, sublayer):
        """sublayer: (B, T, D) -> ((B, T, D), aux). Returns (output (B, T, D), aux)."""
        if self.pre_norm:
            out, aux = sublayer(self.norm(x))
            return x + self.dropout(out), aux                      # DEVIATION(§3.1): pre-norm residual
        out, aux = sublayer(x)
        if self.fused:                                             # the same line as one op (fused.py)
            p, seed = self.dropout.draw()
            return DropoutAddLayerNorm.apply(x, out, self.norm.gamma, self.norm.beta, eps=self.norm.eps,
                                             p=p, seed=seed), aux
        return self.norm(x + self.dropout(out)), aux               # §3.1, §5.4: LayerNorm(x + Dropout(Sublayer(x)))


def _attention(config: TransformerConfig, rng) -> MultiHeadAttention:
    return MultiHeadAttention(config.d_model, config.h, config.d_k, config.d_v, rng, config.attention_dropout,
                              fused=config.impl == "fused")


class EncoderLayer(nn.Module):
    """§3.1: multi-head self-attention, then the position-wise FFN, each with a SublayerConnection."""

    def __init__(self, config: TransformerConfig, rng: np.random.Generator):
        super().__init__()
        self.self_attn = _attention(config, rng)
        self.feed_forward = PositionwiseFeedForward(config.d_model, config.d_ff, rng)
        self.sublayers = nn.ModuleList([SublayerConnection(config, rng) for _ in range(2)])

    def forward(self, x: mt.Tensor, src_mask):
        """x (B, S, D), src_mask (B, 1, 1, S) -> (x (B, S, D), self-attention weights (B, H, S, S))."""
        x, weights = self.sublayers[0](x, lambda y: self.self_attn(y, None, src_mask))
        x, _ = self.sublayers[1](x, lambda y: (self.feed_forward(y), None))
        return x, weights


class DecoderLayer(nn.Module):
    """§3.1: masked self-attention, encoder-decoder attention over the memory, then the FFN."""

    def __init__(self, config: TransformerConfig, rng: np.random.Generator):
        super().__init__()
        self.self_attn = _attention(config, rng)
        self.cross_attn = _attention(config, rng)
        self.feed_forward = PositionwiseFeedForward(config.d_model, config.d_ff, rng)
        self.sublayers = nn.ModuleList([SublayerConnection(config, rng) for _ in range(3)])

    def forward(self, x, memory, src_mask, tgt_mask, layer_cache: "LayerCache | None" = None):
        """x (B, T, D), memory (B, S, D) -> (x (B, T, D), self weights (B, H, T, P+T), cross weights (B, H, T, S)).

        With layer_cache (incremental decoding) the new keys/values are appended to the
        cached ones and the encoder-decoder keys/values come from the cache (memory unused).
        """
        x, self_w = self.sublayers[0](x, lambda y: self._self_attention(y, tgt_mask, layer_cache))
        x, cross_w = self.sublayers[1](x, lambda y: self._cross_attention(y, memory, src_mask, layer_cache))
        x, _ = self.sublayers[2](x, lambda y: (self.feed_forward(y), None))
        return x, self_w, cross_w

    def _self_attention(self, y, tgt_mask, layer_cache):
        if layer_cache is None:
            return self.self_attn(y, None, tgt_mask)               # §3.2.3: masked decoder self-attention
        k, v = layer_cache.append_self(*self.self_attn.project_kv(y))   # (n, P+T, H·K): past and new positions
        return self.self_attn.attend(self.self_attn.project_q(y), k, v, tgt_mask)

    def _cross_attention(self, y, memory, src_mask, layer_cache):
        if layer_cache is None:
            return self.cross_attn(y, memory, src_mask)            # §3.2.3: queries from the decoder, keys/values from memory
        q = self.cross_attn.project_q(y)
        return self.cross_attn.attend(q, layer_cache.cross_k, layer_cache.cross_v, src_mask)


class Encoder(nn.Module):
    """§3.1: a stack of N identical EncoderLayers (plus a final LayerNorm when pre-norm)."""

    def __init__(self, config: TransformerConfig, rng: np.random.Generator):
        super().__init__()
        self.layers = nn.ModuleList([EncoderLayer(config, rng) for _ in range(config.N)])
        if config.norm == "pre":
            self.norm = nn.LayerNorm(config.d_model, eps=config.layernorm_eps)  # DEVIATION(§3.1): pre-norm's last norm

    def forward(self, x, src_mask):
        """(B, S, D) -> ((B, S, D), [self-attention weights per layer])."""
        maps = []
        for layer in self.layers:
            x, weights = layer(x, src_mask)
            maps.append(weights)
        return (self.norm(x) if "norm" in self._modules else x), maps


class Decoder(nn.Module):
    """§3.1: a stack of N identical DecoderLayers (plus a final LayerNorm when pre-norm)."""

    def __init__(self, config: TransformerConfig, rng: np.random.Generator):
        super().__init__()
        self.layers = nn.ModuleList([DecoderLayer(config, rng) for _ in range(config.N)])
        if config.norm == "pre":
            self.norm = nn.LayerNorm(config.d_model, eps=config.layernorm_eps)  # DEVIATION(§3.1): pre-norm's last norm

    def forward(self, x, memory, src_mask, tgt_mask, cache: "DecoderCache | None" = None):
        """(B, T, D) -> ((B, T, D), [self weights per layer], [cross weights per layer])."""
        self_maps, cross_maps = [], []
        for i, layer in enumerate(self.layers):
            x, self_w, cross_w = layer(x, memory, src_mask, tgt_mask, None if cache is None else cache.layers[i])
            self_maps.append(self_w)
            cross_maps.append(cross_w)
        return (self.norm(x) if "norm" in self._modules else x), self_maps, cross_maps

    def init_cache(self, memory: mt.Tensor, src_mask, beam: int = 1) -> "DecoderCache":
        """Encoder-decoder keys/values, computed once per sentence and tiled `beam` times (rows b·beam + j)."""
        rows = memory.backend.xp.repeat(memory.backend.xp.arange(memory.shape[0]), beam)   # (B·beam,) sentence of each row
        layers = []
        for layer in self.layers:
            k, v = layer.cross_attn.project_kv(memory)             # (B, S, H·K), (B, S, H·Kv)
            if beam > 1:
                k, v = k[rows], v[rows]                            # (B, S, H·K) -> (B·beam, S, H·K)
            layers.append(LayerCache(cross_k=k, cross_v=v))
        return DecoderCache(layers, src_mask[rows] if beam > 1 else src_mask)


class LayerCache:
    """One decoder layer's keys and values during incremental decoding (heads packed, H·K wide).

    Why a cache: at step P the decoder's self-attention needs the keys and values of every
    earlier position (§3.2.3: position i sees positions ≤ i). They do not change once
    computed, so each step projects only the new token and appends it: step P costs O(P)
    instead of re-running the whole prefix, O(P²). The encoder-decoder keys and values
    come from the memory, fixed for the sentence, and are projected once.
    """

    __slots__ = ("self_k", "self_v", "cross_k", "cross_v")

    def __init__(self, cross_k: mt.Tensor, cross_v: mt.Tensor):
        self.self_k = self.self_v = None                           # (n, P, H·K), (n, P, H·Kv); None before step 1
        self.cross_k, self.cross_v = cross_k, cross_v              # (n, S, H·K), (n, S, H·Kv)

    def append_self(self, k: mt.Tensor, v: mt.Tensor) -> tuple[mt.Tensor, mt.Tensor]:
        """Add the new positions' keys/values (n, T, ·); returns all of them, (n, P+T, ·)."""
        if self.self_k is not None:
            k = mt.concat([self.self_k, k], axis=1)                # (n, P, H·K) + (n, T, H·K) -> (n, P+T, H·K)
            v = mt.concat([self.self_v, v], axis=1)
        self.self_k, self.self_v = k, v
        return k, v


class DecoderCache:
    """What incremental decoding keeps between steps: a LayerCache per decoder layer, the
    source padding mask (n, 1, 1, S), and `length` = P, the positions decoded so far.

    Every method changes the cache in place (decoding owns it; nothing is returned).
    """

    __slots__ = ("layers", "src_mask", "length")

    def __init__(self, layers: list[LayerCache], src_mask):
        self.layers, self.src_mask, self.length = layers, src_mask, 0

    def advance(self, steps: int) -> None:
        self.length += steps

    def reorder(self, rows) -> None:
        """Keep rows `rows` of the self-attention keys/values (beam search keeps, drops and copies hypotheses).

        Each row must map to a row of the same sentence: the encoder-decoder keys/values,
        identical within a sentence's beams, are not gathered again.
        """
        for layer in self.layers:
            if layer.self_k is not None:
                index = layer.self_k.backend.asarray(rows)
                layer.self_k, layer.self_v = layer.self_k[index], layer.self_v[index]
