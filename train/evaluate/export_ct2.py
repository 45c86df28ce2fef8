"""Serving a trained model: export it to CTranslate2, with the same weights and the same outputs (§3, Figure 1).

CTranslate2 (OpenNMT's C++ inference engine; `pip install -e ".[ct2]"`) runs Transformer
translation models on CPUs and GPUs. `export(model, tokenizer, out)` fills its
`TransformerSpec` the way its own converters for OpenNMT-py and fairseq do, from our
weights:

    embeddings ×√d_model (§3.4)       `scale_embeddings`, one table in all three places when tied
    positions (§3.5)                   our table itself, `position_encodings.encodings` (ours interleaves
                                       sin/cos; CTranslate2's built-in table puts all sines first)
    LayerNorm(x + Sublayer(x)) (§3.1)  `pre_norm = False`; pre-norm stacks also have the final norm
    Q, K, V, W^O (§3.2.2)             one fused (3D, D) QKV matrix for self-attention, Q and a fused KV
                                       for encoder-decoder attention; CTranslate2 stores (out, in)
    FFN (§3.3, Eq. (2))                linear_0 / linear_1, ReLU
    eps                                config `layer_norm_epsilon`

The vocabulary, `vocabulary(tokenizer)`, is the tokenizer's pieces by id (<pad> <unk> <s> </s> ...): the decoder
starts from <s> (BOS) and every source ends with </s>, as `translate` feeds ours.
`ct2_translate` decodes token ids with such a model, as the tests and the decoding
benchmark compare it with ours.

Shapes: D = d_model, F = d_ff, V vocab, L = max_len.
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Sequence
from pathlib import Path

import numpy as np

from train.errors import InputError, naming


def _ct2():
    try:
        import ctranslate2
    except ImportError:
        raise InputError('CTranslate2 is not installed; pip install -e ".[ct2]" (or pip install ctranslate2)') from None
    return ctranslate2


def _array(tensor) -> np.ndarray:
    return np.ascontiguousarray(tensor.numpy(), dtype=np.float32)        # any backend -> NumPy float32


def vocabulary(tokenizer) -> list[str]:
    """The tokenizer's pieces by id: the vocabulary `export` registers and `ct2_translate` maps ids through."""
    return [tokenizer.processor.id_to_piece(i) for i in range(tokenizer.vocab_size)]


def _linear(spec, *linears) -> None:
    """Our Linear weights are (in, out), x W + b; CTranslate2 stores (out, in). Several = fused by rows."""
    spec.weight = np.concatenate([_array(lin.weight).T for lin in linears], axis=0)   # (Σ out, in)
    spec.bias = np.concatenate([_array(lin.bias) for lin in linears])


def _norm(spec, norm) -> None:
    spec.gamma, spec.beta = _array(norm.gamma), _array(norm.beta)


def _stack_inputs(spec, table, positions) -> None:
    """§3.4 embeddings (×√d_model inside CTranslate2) and §3.5 positions, as ours add them."""
    (spec.embeddings[0] if isinstance(spec.embeddings, list) else spec.embeddings).weight = _array(table.weight)
    spec.scale_embeddings = True                                          # §3.4: ×√d_model
    spec.position_encodings.encodings = _array(positions.table)           # (L, D): our table, row = position


def transformer_spec(model):
    """A ctranslate2.specs.TransformerSpec holding `model`'s weights (float32)."""
    ct2 = _ct2()
    cfg = model.config
    if cfg.d_k * cfg.h != cfg.d_model or cfg.d_v * cfg.h != cfg.d_model:
        raise InputError(f"CTranslate2 needs d_k = d_v = d_model / h; this model has d_k {cfg.d_k}, d_v {cfg.d_v}")
    spec = ct2.specs.TransformerSpec.from_config((cfg.N, cfg.N), cfg.h, pre_norm=cfg.norm == "pre")
    spec.config.layer_norm_epsilon = cfg.layernorm_eps
    spec.config.add_source_eos = True                                     # sources end with EOS, as ours
    emb = model.embeddings
    _stack_inputs(spec.encoder, emb.table("src"), model.src_positions)
    _stack_inputs(spec.decoder, emb.table("tgt"), model.tgt_positions)
    spec.decoder.projection.weight = _array(emb.output_weight().T)       # (V, D)
    for layer_spec, layer in zip(spec.encoder.layer, model.encoder.layers):
        attn = layer.self_attn
        _linear(layer_spec.self_attention.linear[0], attn.w_q, attn.w_k, attn.w_v)   # (3D, D)
        _linear(layer_spec.self_attention.linear[1], attn.w_o)
        _norm(layer_spec.self_attention.layer_norm, layer.sublayers[0].norm)
        _linear(layer_spec.ffn.linear_0, layer.feed_forward.w_1)          # (F, D)
        _linear(layer_spec.ffn.linear_1, layer.feed_forward.w_2)          # (D, F)
        _norm(layer_spec.ffn.layer_norm, layer.sublayers[1].norm)
    for layer_spec, layer in zip(spec.decoder.layer, model.decoder.layers):
        own, cross = layer.self_attn, layer.cross_attn
        _linear(layer_spec.self_attention.linear[0], own.w_q, own.w_k, own.w_v)
        _linear(layer_spec.self_attention.linear[1], own.w_o)
        _norm(layer_spec.self_attention.layer_norm, layer.sublayers[0].norm)
        _linear(layer_spec.attention.linear[0], cross.w_q)
        _linear(layer_spec.attention.linear[1], cross.w_k, cross.w_v)   # (2D, D)
        _linear(layer_spec.attention.linear[2], cross.w_o)
        _norm(layer_spec.attention.layer_norm, layer.sublayers[1].norm)
        _linear(layer_spec.ffn.linear_0, layer.feed_forward.w_1)
        _linear(layer_spec.ffn.linear_1, layer.feed_forward.w_2)
        _norm(layer_spec.ffn.layer_norm, layer.sublayers[2].norm)
    if cfg.norm == "pre":                                                 # DEVIATION(§3.1): pre-norm's last norms
        _norm(spec.encoder.layer_norm, model.encoder.norm)
        _norm(spec.decoder.layer_norm, model.decoder.norm)
    return spec


def export(model, tokenizer, out: Path) -> Path:
    """Write `model` and the tokenizer's vocabulary as a CTranslate2 model directory `out` (a new directory,
    made as OUT.tmp-<pid> and renamed once complete)."""
    ct2 = _ct2()
    out = Path(out)
    if out.exists():
        raise InputError(f"{out}: exists; choose a new --out directory (nothing is overwritten)")
    if tokenizer.vocab_size != model.config.vocab_size:
        raise InputError(f"the tokenizer has {tokenizer.vocab_size} pieces but the model {model.config.vocab_size}")
    spec = transformer_spec(model)
    pieces = vocabulary(tokenizer)
    spec.register_source_vocabulary(pieces)
    spec.register_target_vocabulary(pieces)

    class _Ours(ct2.converters.Converter):
        def _load(self):
            return spec

    tmp = out.with_name(f"{out.name}.tmp-{os.getpid()}")  # renamed to `out` complete: a kill leaves no half model
    if tmp.exists():
        raise InputError(f"{tmp}: exists; nothing is overwritten: move it away")
    try:
        with naming(out):  # a full disk's write() names no file
            _Ours().convert(str(tmp))
            os.rename(tmp, out)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)  # ours: it did not exist a moment ago
        raise
    return out


def ct2_translate(translator, sources: Sequence[Sequence[int]], pieces: Sequence[str], beam: int = 1,
                  alpha: float = 0.6, max_length: int = 256, max_batch_size: int = 0) -> list[list[int]]:
    """Token ids (no EOS) in, token ids (no BOS/EOS) out, decoded by a ctranslate2.Translator.

    Padding and BOS are never produced, as in transformer/search.py. `alpha` is CTranslate2's own
    length penalty (score / length^α: not GNMT's, so its beam outputs may rank differently).
    """
    index = {piece: i for i, piece in enumerate(pieces)}
    results = translator.translate_batch(
        [[pieces[i] for i in src] for src in sources], beam_size=beam, length_penalty=alpha if beam > 1 else 0.0,
        max_decoding_length=max_length, max_batch_size=max_batch_size,
        suppress_sequences=[[pieces[0]], [pieces[2]]])                       # pad, BOS
    return [[index[piece] for piece in result.hypotheses[0]] for result in results]


__all__ = ["export", "transformer_spec", "ct2_translate", "vocabulary"]
