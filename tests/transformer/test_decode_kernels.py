"""transformer/decode_kernels.py: each Numba kernel of fast decoding against its NumPy reference."""
import numpy as np
import pytest

from transformer import decode_kernels as dk

TOL = {np.float32: dict(rtol=2e-5, atol=2e-6), np.float64: dict(rtol=1e-12, atol=1e-13)}


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("heads", [1, 2, 8])
def test_self_attention_step_writes_the_new_rows_and_reads_each_rows_positions_where_they_lie(dtype, heads):
    rng = np.random.default_rng(heads)
    n, D, P, R, first = 6, 16, 5, 40, 30
    qkv, bias = rng.standard_normal((n, 3 * D)).astype(dtype), rng.standard_normal(3 * D).astype(dtype)
    keys, values = (rng.standard_normal((R, D)).astype(dtype) for _ in range(2))
    rows = rng.integers(0, first, size=(n, P))                             # older positions: any arena rows
    rows[:, -1] = first + np.arange(n)                                     # the newest: each row's own new one
    arena, ref_arena = (keys.copy(), values.copy()), (keys.copy(), values.copy())
    got = dk.self_attention_step(qkv, bias, *arena, first, rows, heads)
    np.testing.assert_allclose(got, dk.self_attention_step_ref(qkv, bias, *ref_arena, first, rows, heads),
                               **TOL[dtype])
    for mine, theirs in zip(arena, ref_arena):
        np.testing.assert_allclose(mine, theirs, **TOL[dtype])             # the new keys and values, biased
    swapped_rows = rows[::-1].copy()
    swapped_rows[:, -1] = first + np.arange(n)                             # the new rows stay each row's own
    swapped = dk.self_attention_step(qkv[::-1].copy(), bias, *arena, first, swapped_rows, heads)
    np.testing.assert_allclose(swapped[-1], got[0], **TOL[dtype])          # a row follows its index row


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_cross_attention_step_masks_padding_and_shares_a_sentence_among_rows(dtype):
    rng = np.random.default_rng(3)
    B, S, D, heads = 3, 7, 12, 3
    valid = np.ones((B, S), dtype=bool)
    valid[0, 4:] = False                                                  # padding at the end
    valid[2, 1] = False                                                   # and a masked position inside
    keys, values = (rng.standard_normal((B, S, D)).astype(dtype) for _ in range(2))
    sentence = np.array([0, 0, 1, 2, 2, 2])
    q = rng.standard_normal((len(sentence), 2 * D)).astype(dtype)[:, :D]   # a view, as the encoder passes it
    bias = rng.standard_normal(D).astype(dtype)
    got = dk.cross_attention_step(q, bias, keys, values, sentence, valid, heads)
    np.testing.assert_allclose(got, dk.cross_attention_step_ref(q, bias, keys, values, sentence, valid, heads),
                               **TOL[dtype])
    changed = keys.copy()
    changed[0, 5], changed[2, 1] = 1e3, 1e3                               # masked keys change nothing
    np.testing.assert_allclose(dk.cross_attention_step(q, bias, changed, values, sentence, valid, heads)[[0, 1, 3]],
                               got[[0, 1, 3]], **TOL[dtype])


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_add_layernorm_and_bias_relu(dtype):
    rng = np.random.default_rng(4)
    x, y = (rng.standard_normal((5, 24)).astype(dtype) * 3 + 1 for _ in range(2))
    bias, gamma, beta = (rng.standard_normal(24).astype(dtype) for _ in range(3))
    np.testing.assert_allclose(dk.add_layernorm(x, y, bias, gamma, beta, 1e-6),
                               dk.add_layernorm_ref(x, y, bias, gamma, beta, 1e-6), **TOL[dtype])
    np.testing.assert_allclose(dk.layernorm(x, gamma, beta, 1e-6), dk.layernorm_ref(x, gamma, beta, 1e-6),
                               **TOL[dtype])
    np.testing.assert_array_equal(dk.bias_relu(y.copy(), bias), dk.bias_relu_ref(y, bias))


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("width", [1, 3, 8])
def test_log_softmax_topk_matches_the_full_log_softmax_and_never_picks_banned(dtype, width):
    rng = np.random.default_rng(width)
    logits = (rng.standard_normal((7, 50)) * 4).astype(dtype)
    logits[1, 10] = logits[1, 11] = logits[1].max() + 1                  # a tie: the lower id comes first
    logits[2, 0] = logits[2].max() + 5                                    # banned: in the normaliser, never chosen
    banned = np.zeros(50, dtype=bool)
    banned[[0, 2]] = True
    values, ids = dk.log_softmax_topk(logits, width, banned)
    ref_values, ref_ids = dk.log_softmax_topk_ref(logits, width, banned)
    np.testing.assert_array_equal(ids, ref_ids)
    np.testing.assert_allclose(values, ref_values, **TOL[dtype])
    assert ids[1, 0] == 10 and (width == 1 or ids[1, 1] == 11)
    assert not np.isin(ids, [0, 2]).any()
    assert values[2, 0] < -4, "the banned token's mass still counts in the normaliser"


def test_log_softmax_topk_pads_with_minus_infinity_when_few_tokens_are_allowed():
    logits = np.zeros((1, 5), dtype=np.float32)
    banned = np.array([True, True, True, False, False])
    values, ids = dk.log_softmax_topk(logits, 4, banned)
    assert list(ids[0, :2]) == [3, 4] and np.isneginf(values[0, 2:]).all()
    np.testing.assert_allclose(values[0, :2], np.log(0.2), rtol=1e-6)
