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
    With config.impl = "fused", post-norm runs as one Function (fused.DropoutAddLayerNorm), which
    also adds the bias of the sub-layer's last Linear, `output` (W^O, W₂), when that Linear was
    built to leave it out (add_bias False: `folds_output_bias`), so no kernel of its own fills or sums it.
    """

    def __init__(self, config: TransformerConfig, rng: np.random.Generator, output: nn.Linear | None = None):
        super().__init__()
        self.pre_norm, self.fused = config.norm == "pre", config.impl == "fused"
        self.norm = nn.LayerNorm(config.d_model, eps=config.layernorm_eps)
        self.dropout = nn.Dropout(config.p_drop, rng=rng)
        adds_bias = output is not None and not output.add_bias
        object.__setattr__(self, "output", output if adds_bias else None)   # a reference: the sub-layer owns it

    def forward(self, x: mt.Tensor, sublayer):
        """sublayer: (B, T, D) -> ((B, T, D), aux). Returns (output (B, T, D), aux)."""
        if self.pre_norm:
            out, aux = sublayer(self.norm(x))
            return x + self.dropout(out, self.fused), aux          # DEVIATION(§3.1): pre-norm residual
        out, aux = sublayer(x)
        if self.fused:                                             # the same line as one op (fused.py)
            return self._dropout_add_norm(x, out), aux
        return self.norm(x + self.dropout(out)), aux               # §3.1, §5.4: LayerNorm(x + Dropout(Sublayer(x)))

    def _dropout_add_norm(self, x: mt.Tensor, out: mt.Tensor) -> mt.Tensor:
        """LayerNorm(x + Dropout(out + b)) as one Function, time-major; b the bias `output` leaves out, if any."""
        p, seed = self.dropout.draw()
        bias = () if self.output is None else (self.output.bias,)    # W^O's or W₂'s, added here
        half = self.output.bias.half(x.dtype) if bias else None
        return DropoutAddLayerNorm.apply(x, out, self.norm.gamma, self.norm.beta, *bias, eps=self.norm.eps,
                                         p=p, seed=seed, time_major=True, half=half)


def folds_output_bias(config: TransformerConfig) -> bool:
    """Whether each sub-layer's last Linear (W^O, W₂) leaves its bias out, for the fused post-norm
    connection to add in its one kernel: decided here, once, when the layers are built."""
    return config.impl == "fused" and config.norm == "post"


def _attention(config: TransformerConfig, rng) -> MultiHeadAttention:
    return MultiHeadAttention(config.d_model, config.h, config.d_k, config.d_v, rng, config.attention_dropout,
                              fused=config.impl == "fused", output_bias=not folds_output_bias(config))


def _feed_forward(config: TransformerConfig, rng) -> PositionwiseFeedForward:
    return PositionwiseFeedForward(config.d_model, config.d_ff, rng, fused=config.impl == "fused",
                                   output_bias=not folds_output_bias(config))


class EncoderLayer(nn.Module):
    """§3.1: multi-head self-attention, then the position-wise FFN, each with a SublayerConnection."""

    def __init__(self, config: TransformerConfig, rng: np.random.Generator):
        super().__init__()
        self.self_attn = _attention(config, rng)
        self.feed_forward = _feed_forward(config, rng)
        self.sublayers = nn.ModuleList([SublayerConnection(config, rng, output)
                                        for output in (self.self_attn.w_o, self.feed_forward.w_2)])

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
        self.feed_forward = _feed_forward(config, rng)
        self.sublayers = nn.ModuleList([SublayerConnection(config, rng, output) for output in
                                        (self.self_attn.w_o, self.cross_attn.w_o, self.feed_forward.w_2)])

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
        kv = layer_cache.append_self(self.self_attn.project_kv(y))   # past and new positions, P+T of them
        return self.self_attn.attend(self.self_attn.project_q(y), *kv, mask=tgt_mask)

    def _cross_attention(self, y, memory, src_mask, layer_cache):
        if layer_cache is None:
            return self.cross_attn(y, memory, src_mask)            # §3.2.3: queries from the decoder, keys/values from memory
        return self.cross_attn.attend(self.cross_attn.project_q(y), *layer_cache.cross_kv, mask=src_mask)


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
        n = src_mask.shape[0]                                      # B sentences (memory may be time-major)
        rows = memory.backend.xp.repeat(memory.backend.xp.arange(n), beam)   # (B·beam,) sentence of each row
        batch_axis = self.layers[0].cross_attn.kv_batch_axis      # 0: k (B, S, ·); fused 2: kv (2, S, B, ·)
        layers = []
        for layer in self.layers:
            kv = layer.cross_attn.project_kv(memory)               # (k (B, S, H·K), v) or (kv (2, S, B, H·K),)
            if beam > 1:
                kv = tuple(_rows(a, rows, batch_axis) for a in kv)  # B -> B·beam rows
            layers.append(LayerCache(kv, batch_axis))
        return DecoderCache(layers, src_mask[rows] if beam > 1 else src_mask)


def _rows(a: mt.Tensor, rows, axis: int) -> mt.Tensor:
    """a's entries `rows` along its batch axis (beam tiling and reordering)."""
    return a[(slice(None),) * axis + (a.backend.asarray(rows),)]


class LayerCache:
    """One decoder layer's keys and values during incremental decoding (heads packed, H·K wide).

    Why a cache: at step P the decoder's self-attention needs the keys and values of every
    earlier position (§3.2.3: position i sees positions ≤ i). They do not change once
    computed, so each step projects only the new token and appends it: step P costs O(P)
    instead of re-running the whole prefix, O(P²). The encoder-decoder keys and values
    come from the memory, fixed for the sentence, and are projected once.
    Each is what MultiHeadAttention.project_kv returns: (k, v), each (n, P, ·), or, fused, one
    (2, P, n, ·): positions on axis 1 either way, the rows on `batch_axis`.
    """

    __slots__ = ("self_kv", "cross_kv", "batch_axis")

    def __init__(self, cross_kv: tuple, batch_axis: int):
        self.self_kv = None                                        # None before step 1
        self.cross_kv, self.batch_axis = cross_kv, batch_axis

    def append_self(self, kv: tuple) -> tuple:
        """Add the new positions' keys/values (T of them); returns all of them, P+T."""
        if self.self_kv is not None:
            kv = tuple(mt.concat([past, new], axis=1) for past, new in zip(self.self_kv, kv))   # P + T positions
        self.self_kv = kv
        return kv


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
            if layer.self_kv is not None:
                layer.self_kv = tuple(_rows(a, rows, layer.batch_axis) for a in layer.self_kv)
