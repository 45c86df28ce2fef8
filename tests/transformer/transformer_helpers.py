"""Shared by tests/transformer: small models, float64 conversion, token batches."""
import numpy as np

from transformer import Transformer, TransformerConfig


def to_float64(module) -> None:
    """Cast every parameter of a module to float64 in place (for gradcheck on the numpy backend)."""
    for p in module.parameters():
        p.data = p.data.astype(np.float64)


def small_model(backend="numpy", seed=0, float64=False, **changes) -> Transformer:
    """2 layers, d_model 8, h 2, d_ff 16, vocab 11, dropout off unless changed."""
    values = dict(vocab_size=11, N=2, d_model=8, d_ff=16, h=2, p_drop=0.0, max_len=32)
    config = TransformerConfig(**{**values, **changes})
    return Transformer(config, np.random.default_rng(seed), backend=backend, precision="fp64" if float64 else "fp32")


def random_ids(rng, B, L, vocab_size, lengths=None, pad_id=0, low=4):
    """(B, L) ids in [low, vocab_size) with padding after lengths[b] tokens."""
    ids = rng.integers(low, vocab_size, size=(B, L))
    if lengths is not None:
        for b, n in enumerate(lengths):
            ids[b, n:] = pad_id
    return ids
