"""transformer/embedding.py: §3.4's ×√d_model on both embedding layers, tied and untied, and the tied logits."""
import math

import numpy as np
import pytest

import minitensor as mt
from transformer.embedding import Embeddings


@pytest.mark.parametrize("tie", [True, False])
def test_embeddings_are_the_table_rows_times_sqrt_d_model(tie):
    """§3.4: "In the embedding layers, we multiply those weights by √d_model" (source and target alike)."""
    V, D = 11, 16
    emb = Embeddings(vocab_size=V, d_model=D, tie=tie, rng=np.random.default_rng(0))
    emb.to(dtype=np.float64)
    ids = np.array([[3, 0, 10, 3], [7, 7, 1, 2]])
    for side, table in (("source", emb.shared if tie else emb.src), ("target", emb.shared if tie else emb.tgt)):
        got = getattr(emb, side)(ids).numpy()
        mt.assert_close(got, table.weight.numpy()[ids] * math.sqrt(D), name=f"{side} embedding vs E[ids]·√d_model")
        assert not np.allclose(got, table.weight.numpy()[ids]), "the scale is √16 = 4, not 1"


def test_tied_logits_use_the_unscaled_table():
    """The pre-softmax projection shares E (§3.4) without the √d_model: logits = x Eᵀ."""
    V, D = 11, 16
    emb = Embeddings(vocab_size=V, d_model=D, tie=True, rng=np.random.default_rng(0))
    emb.to(dtype=np.float64)
    x = np.random.default_rng(1).standard_normal((2, 3, D))
    mt.assert_close(emb.logits(mt.tensor(x, dtype="float64")), x @ emb.shared.weight.numpy().T, name="x Eᵀ")


@pytest.mark.parametrize("tie", [True, False])
def test_the_tables_and_the_output_weight_are_the_tied_or_separate_ones(tie):
    """table(side) and output_weight() pick E for all three uses when tied (§3.4), else src, tgt and the
    generator: what the fast search and the CTranslate2 export read; logits = x · output_weight()."""
    V, D = 11, 16
    emb = Embeddings(vocab_size=V, d_model=D, tie=tie, rng=np.random.default_rng(0))
    emb.to(dtype=np.float64)
    assert (emb.table("src"), emb.table("tgt")) == ((emb.shared, emb.shared) if tie else (emb.src, emb.tgt))
    weight = emb.output_weight().numpy()
    assert weight.shape == (D, V)
    np.testing.assert_array_equal(weight, emb.shared.weight.numpy().T if tie else emb.generator.weight.numpy())
    x = np.random.default_rng(1).standard_normal((2, 3, D))
    mt.assert_close(emb.logits(mt.tensor(x, dtype="float64")), x @ weight, name="logits = x · output_weight")
