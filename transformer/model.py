"""The Transformer of Figure 1: embeddings + positions, an encoder stack, a decoder stack, softmax (§3).

Shapes: B batch, S source length, T target length, D = d_model, H heads, V vocab;
n = rows being decoded (B, or B·beam in beam search).

    memory = Encoder(Dropout(Embed(src)·√d_model + PE))                          §3.1, §3.4, §3.5, §5.4
    logits = Decoder(Dropout(Embed(tgt_in)·√d_model + PE), memory) Eᵀ            §3.1, §3.4

tgt_in is the target "offset by one position" (§3.1): BOS y_1 ... y_{T-1}, and the
loss compares logits[:, t] with y_{t+1}. Token ids are plain integer arrays (NumPy,
or CuPy on the GPU); the model moves them to its backend.

The search interface (search.py uses only these): encode(src_ids),
init_cache(src_ids, memory, beam), decode_step(cache, tokens), cache.reorder(rows).

Precision is chosen when the model is built (`precision=`, see PRECISIONS): the dtype of
the weights (float32 masters, float64 for exact checks) and of the activations.
"""
from __future__ import annotations

import numpy as np

import minitensor as mt
from minitensor import nn
from minitensor.dtypes import BF16

from .config import TransformerConfig
from .embedding import Embeddings
from .layers import Decoder, DecoderCache, Encoder
from .loss import LossOutput
from .masks import padding_mask, subsequent_mask
from .positional import PositionalEncoding


# precision -> (dtype of the weights, dtype of the activations)
PRECISIONS = {
    "fp64": (np.float64, np.float64),   # gradient checks and exact comparisons
    "fp32": (np.float32, np.float32),   # the paper's setting (§5.2: P100s in fp32)
    "fp16": (np.float32, np.float16),   # DEVIATION(§5.2): mixed precision, float32 master weights
    "bf16": (np.float32, BF16),         # DEVIATION(§5.2): the same with bfloat16 (uint16 bits, minitensor/dtypes.py)
}


class Transformer(nn.Module):
    """Encoder-decoder Transformer (Figure 1) built from `config`, weights drawn from `rng`.

    `precision` (PRECISIONS) fixes the weights' and the activations' dtypes: the embedded
    inputs are cast to the activation dtype, and every layer multiplies with a copy of its
    master weights in the activations' dtype, so "fp16" and "bf16" run the matmuls in half
    precision. Logits come back in the activations' dtype from `forward` (the loss reads bf16 bits
    as numbers) and as float32 from `decode` and `decode_step` (the search computes on them).
    `rng` also seeds every dropout mask (one draw per call), so its state replays them.

    impl "fused" runs the stacks time-major: every activation is (T, B, D) instead of (B, T, D)
    (the same numbers, laid out position by position). Rows are rows to every layer but attention,
    and attention gains: with positions outermost, head h of sentence b sits a fixed stride after
    head h-1 of the same position, so each attention product reads its heads where the
    projections wrote them, and writes its output where W^O reads it (transformer/fused.py).
    The ids are laid out so on the host, and the decoder's output goes back to (B, T, D) once,
    before the logits. `encode` then returns time-major memory (init_cache takes it as it is).
    """

    def __init__(self, config: TransformerConfig, rng: np.random.Generator, backend="numpy",
                 precision: str = "fp32"):
        super().__init__()
        if precision not in PRECISIONS:
            raise ValueError(f"precision must be one of {sorted(PRECISIONS)}, got {precision!r}")
        if precision == "bf16" and not mt.get_backend(backend).supports_bf16:
            raise ValueError(f"precision 'bf16' needs a backend with bf16 kernels (numpy, cuda), "
                             f"not {mt.get_backend(backend).name!r}")
        self.config, self.precision = config, precision
        self.param_dtype, self.compute_dtype = PRECISIONS[precision]
        self.time_major = config.impl == "fused"                       # tokens (T, B, D) in the stacks: see above
        self.embeddings = Embeddings(config.vocab_size, config.d_model, config.tie_embeddings, rng)
        self.src_positions = PositionalEncoding(config.d_model, config.max_len, config.positional, rng)
        self.tgt_positions = PositionalEncoding(config.d_model, config.max_len, config.positional, rng)
        self.dropout = nn.Dropout(config.p_drop, rng=rng)          # §5.4: on the sums of embeddings and positions
        self.encoder = Encoder(config, rng)
        self.decoder = Decoder(config, rng)
        self.to(backend, self.param_dtype)

    # --- building blocks ----------------------------------------------------------------
    def _ids(self, ids):
        """ids (B, L) on the backend; time-major, a transposed view of (L, B) memory (tokens in the stacks' order)."""
        ids = ids.data if isinstance(ids, mt.Tensor) else ids
        ids = ids if hasattr(ids, "ndim") else np.asarray(ids)
        if ids.ndim != 2 or ids.dtype.kind not in "iu":
            raise ValueError(f"token ids must be a 2-d integer array (B, length), got {ids.dtype} {ids.shape}")
        if self.time_major:                                            # laid out on the host when they come from there
            xp = np if isinstance(ids, np.ndarray) else self.backend.xp
            return self.backend.asarray(xp.ascontiguousarray(ids.T)).T
        return self.backend.asarray(ids)

    def _into_stacks(self, ids, embed, positions: PositionalEncoding, offset: int) -> mt.Tensor:
        """ids (B, L) (from _ids) -> the stacks' input (B, L, D), or time-major (L, B, D).

        §3.5: Embed·√d_model + PE; §5.4: dropout on the sums, its mask drawn as the (B, L, D) layout's.
        """
        if self.time_major:                                            # ids: a (B, L) view of (L, B) memory
            x = positions(embed(ids.T), offset, time_axis=0)           # (L, B) -> (L, B, D)
        else:
            x = positions(embed(ids), offset, time_axis=1)             # (B, L) -> (B, L, D)
        return self.dropout(x.astype(self.compute_dtype), self.time_major)

    def _out_of_stacks(self, x: mt.Tensor) -> mt.Tensor:
        """The decoder stack's output as the logits read it, (B, T, D): time-major (T, B, D) costs one copy, D wide."""
        return x.permute(1, 0, 2) if self.time_major else x

    def _encode(self, src, src_mask):
        x = self._into_stacks(src, self.embeddings.source, self.src_positions, 0)   # (B, S, D) or (S, B, D)
        return self.encoder(x, src_mask)                               # (B, S, D) or (S, B, D), [maps]

    def _decode(self, tgt, memory, src_mask, cache: DecoderCache | None):
        x, self_maps, cross_maps = self._decoder_stack(tgt, memory, src_mask, cache)
        logits = self.embeddings.logits(self._out_of_stacks(x))       # (B, T, D) -> (B, T, V)
        return logits, self_maps, cross_maps

    def _decoder_stack(self, tgt, memory, src_mask, cache: DecoderCache | None):
        """The decoder stack's output (B, T, D), time-major (T, B, D), and its attention maps."""
        offset = 0 if cache is None else cache.length
        T = tgt.shape[1]
        x = self._into_stacks(tgt, self.embeddings.target, self.tgt_positions, offset)   # (B, T, D) or (T, B, D)
        # §3.2.3: no position attends to a later one. Padding sits at the end of a target, after
        # every real query, so this mask already hides it from them: no target padding mask.
        tgt_mask = None if T == 1 else subsequent_mask(T, past=offset, xp=self.backend.xp)   # (1, 1, T, P+T)
        if cache is not None:
            src_mask = cache.src_mask
        elif src_mask is not None:
            src_mask = self.backend.asarray(src_mask)
        x, self_maps, cross_maps = self.decoder(x, memory, src_mask, tgt_mask, cache)
        if cache is not None:
            cache.advance(T)
        return x, self_maps, cross_maps

    # --- the public interface -------------------------------------------------------------
    def encode(self, src_ids) -> mt.Tensor:
        """src_ids (B, S) -> memory (B, S, D); time-major (impl "fused"): (S, B, D)."""
        src = self._ids(src_ids)
        memory, _ = self._encode(src, padding_mask(src, self.config.pad_id))
        return memory

    def decode(self, tgt_in_ids, memory, src_pad_mask, cache: DecoderCache | None = None) -> mt.Tensor:
        """tgt_in_ids (B, T) -> logits (B, T, V), float32 under bf16 (the search reads numbers, not bits).
        With a cache, tgt_in_ids are the next T tokens."""
        logits, _, _ = self._decode(self._ids(tgt_in_ids), memory, src_pad_mask, cache)
        return logits.astype(np.float32) if logits.dtype == BF16 else logits

    def forward(self, src_ids, tgt_in_ids) -> mt.Tensor:
        """Figure 1, teacher forcing: src_ids (B, S), tgt_in_ids (B, T) -> logits (B, T, V).

        The logits come in the activations' dtype: under bf16 that is bits (minitensor/dtypes.py),
        which the loss reads as numbers (its kernel sums in float32: no float32 (B, T, V) copy is
        made); read them yourself with `.astype(np.float32)`.
        """
        return self.embeddings.logits(self._out_of_stacks(self._teacher_forced(src_ids, tgt_in_ids)))

    def _teacher_forced(self, src_ids, tgt_in_ids) -> mt.Tensor:
        """Both stacks on a batch: the decoder stack's output, (B, T, D), or (T, B, D) when run time-major."""
        src = self._ids(src_ids)
        src_mask = padding_mask(src, self.config.pad_id)               # (B, 1, 1, S)
        memory, _ = self._encode(src, src_mask)
        x, _, _ = self._decoder_stack(self._ids(tgt_in_ids), memory, src_mask, None)
        return x

    def loss(self, src_ids, tgt_in_ids, tgt_out_ids, loss_fn) -> LossOutput:
        """The training loss of a batch, `loss_fn(self(src_ids, tgt_in_ids), tgt_out_ids)` (Figure 1, §5.4).

        A fused float model with tied embeddings on a CPU never makes the (B, T, V) logits: the
        projection x Eᵀ (§3.4) and the loss run together, a block of rows at a time, in the stacks'
        time-major order (LinearCrossEntropy; LabelSmoothingLoss.of_projection).
        """
        blocked = (self.time_major and getattr(loss_fn, "fused", False) and self.embeddings.tie
                   and self.backend.device == "cpu" and np.dtype(self.compute_dtype) in (np.float32, np.float64))
        if not blocked:
            return loss_fn(self(src_ids, tgt_in_ids), tgt_out_ids)
        x = self._teacher_forced(src_ids, tgt_in_ids)                  # (T, B, D)
        targets = tgt_out_ids.data if isinstance(tgt_out_ids, mt.Tensor) else tgt_out_ids
        rows = x.reshape(-1, x.shape[-1])                              # (T·B, D), position by position
        return loss_fn.of_projection(rows, self.embeddings.shared.weight, targets.T.reshape(-1))

    def init_cache(self, src_ids, memory: mt.Tensor, beam: int = 1) -> DecoderCache:
        """An empty decoding cache for B sentences, each repeated `beam` times (row b·beam + j)."""
        return self.decoder.init_cache(memory, padding_mask(self._ids(src_ids), self.config.pad_id), beam)

    def decode_step(self, cache: DecoderCache, tokens) -> mt.Tensor:
        """One incremental step: tokens (n,) at position cache.length -> logits (n, V); updates cache."""
        tokens = self.backend.asarray(tokens).reshape(-1, 1)           # (n,) -> (n, 1)
        logits = self.decode(tokens, None, None, cache)                # (n, 1, V)
        return logits.reshape(logits.shape[0], logits.shape[2])        # (n, 1, V) -> (n, V)

    def attention_maps(self, src_ids, tgt_in_ids) -> dict[str, np.ndarray]:
        """Every attention weight of a no-grad, eval-mode forward, as NumPy (B, H, Tq, Tk) arrays.

        Keys: "encoder.layers.{i}.self_attn", "decoder.layers.{i}.self_attn",
        "decoder.layers.{i}.cross_attn" (encoder-decoder attention, (B, H, T, S)).
        """
        was_training = self.training
        self.eval()
        try:
            with mt.no_grad():
                src = self._ids(src_ids)
                src_mask = padding_mask(src, self.config.pad_id)
                memory, enc_maps = self._encode(src, src_mask)
                _, self_maps, cross_maps = self._decode(self._ids(tgt_in_ids), memory, src_mask, None)
        finally:
            self.train(was_training)
        maps = {f"encoder.layers.{i}.self_attn": w for i, w in enumerate(enc_maps)}
        maps.update({f"decoder.layers.{i}.self_attn": w for i, w in enumerate(self_maps)})
        maps.update({f"decoder.layers.{i}.cross_attn": w for i, w in enumerate(cross_maps)})
        return {name: w.astype(np.float32).numpy() for name, w in maps.items()}
