"""transformer/encoder_attention.py: the encoder's self-attention and its softmax kernel against their references."""
import numpy as np
import pytest

from transformer import decode_kernels as dk
from transformer import encoder_attention as ea

TOL = {np.float32: dict(rtol=2e-5, atol=2e-6), np.float64: dict(rtol=1e-12, atol=1e-13)}


def padded_batch(rng, B, S):
    valid = np.ones((B, S), dtype=bool)
    valid[0, 4:] = False                                                  # padding at the end
    valid[2, 1] = False                                                   # and a masked position inside
    valid[1, S - 1] = False
    return valid


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_masked_softmax_weighs_padding_zero(dtype):
    rng = np.random.default_rng(1)
    B, H, S = 3, 2, 7
    valid = padded_batch(rng, B, S)
    scores = (rng.standard_normal((B, H, S, S)) * 3).astype(dtype)
    expected = ea.masked_softmax_ref(scores, valid, 0.5)
    got = ea.masked_softmax(scores.copy(), valid, 0.5)
    np.testing.assert_allclose(got, expected, **TOL[dtype])
    assert (got[0, :, :, 4:] == 0).all() and (got[2, :, :, 1] == 0).all()


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("heads", [1, 2, 4])
def test_encoder_attention_equals_each_position_as_a_query_over_its_sentence(dtype, heads):
    rng = np.random.default_rng(heads)
    B, S, D = 4, 7, 16
    valid = padded_batch(rng, B, S)
    qkv, bias = rng.standard_normal((B * S, 3 * D)).astype(dtype), rng.standard_normal(3 * D).astype(dtype)
    expected = ea.encoder_attention_ref(qkv, bias, valid, heads)
    got = ea.encoder_attention(qkv.copy(), bias, valid, heads)
    np.testing.assert_allclose(got, expected, **TOL[dtype])
    biased = qkv + bias                                                   # what the per-row decoder kernel reads
    keys, values = (biased[:, j * D:(j + 1) * D].reshape(B, S, D) for j in (1, 2))
    np.testing.assert_allclose(got, dk.cross_attention_step(biased[:, :D], np.zeros(D, dtype), keys, values,
                                                            np.repeat(np.arange(B), S), valid, heads), **TOL[dtype])
    scores, out = np.full((B * heads * S + 5, S), np.nan, dtype), np.full((B * S, D), np.nan, dtype)
    again = ea.encoder_attention(qkv.copy(), bias, valid, heads, scores[:B * heads * S], out)   # scratch written
    assert again is out
    np.testing.assert_allclose(out, expected, **TOL[dtype])
