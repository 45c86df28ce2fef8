"""transformer/attention.py: scaled dot-product attention (§3.2.1, Eq. (1)) and multi-head attention (§3.2.2)."""
import numpy as np
import pytest

import minitensor as mt
from transformer.attention import MultiHeadAttention, scaled_dot_product_attention
from transformer_helpers import to_float64


def attention_reference(q, k, v, mask=None):
    """Eq. (1) in float64 NumPy: softmax(q kᵀ / √d_k) v, blocked entries −∞, fully blocked rows 0."""
    scores = q @ np.swapaxes(k, -1, -2) / np.sqrt(q.shape[-1])
    if mask is not None:
        scores = np.where(mask, -np.inf, scores)
    m = np.max(scores, axis=-1, keepdims=True)
    e = np.exp(scores - np.where(np.isfinite(m), m, 0.0))
    s = e.sum(-1, keepdims=True)
    w = np.divide(e, s, out=np.zeros_like(e), where=s > 0)
    return w @ v, w


@pytest.fixture
def qkv():
    rng = np.random.default_rng(0)
    return rng.standard_normal((2, 3, 4, 5)), rng.standard_normal((2, 3, 6, 5)), rng.standard_normal((2, 3, 6, 7))


def test_matches_equation_1(qkv, backend):
    q, k, v = qkv
    mask = np.zeros((2, 1, 1, 6), dtype=bool)
    mask[0, ..., 4:] = True
    out, w = scaled_dot_product_attention(*(mt.tensor(a, backend=backend) for a in qkv), mask=mask)
    ref_out, ref_w = attention_reference(q, k, v, mask)
    mt.assert_close(out, ref_out.astype(np.float32), "output", atol=1e-5)
    mt.assert_close(w, ref_w.astype(np.float32), "weights", atol=1e-6)


def test_weights_row_stochastic_masked_keys_exactly_zero_full_mask_rows_zero(qkv, backend):
    q, k, v = qkv
    mask = np.zeros((2, 3, 4, 6), dtype=bool)
    mask[:, :, :, 2] = True                               # one blocked key everywhere
    mask[1, 2, 3, :] = True                               # one fully blocked row
    out, w = scaled_dot_product_attention(*(mt.tensor(a, backend=backend) for a in qkv), mask=mask)
    w, out = w.numpy(), out.numpy()
    assert np.isfinite(w).all() and np.isfinite(out).all()
    assert (w[mask] == 0).all()
    sums = w.sum(-1)
    np.testing.assert_allclose(np.delete(sums.reshape(-1), 2 * 12 - 1), 1.0, rtol=1e-6)
    assert sums[1, 2, 3] == 0 and (out[1, 2, 3] == 0).all()


def mha_loop_reference(mha, query, memory, mask):
    """§3.2.2 written head by head: Concat(head_1..head_h) W^O with head_i = Attention(Q W_i^Q, K W_i^K, V W_i^V)."""
    def lin(x, layer):
        return x @ layer.weight.numpy().astype(np.float64) + layer.bias.numpy()
    Q, K, V = lin(query, mha.w_q), lin(memory, mha.w_k), lin(memory, mha.w_v)
    heads = []
    for i in range(mha.h):
        qi, ki = Q[..., i * mha.d_k:(i + 1) * mha.d_k], K[..., i * mha.d_k:(i + 1) * mha.d_k]
        vi = V[..., i * mha.d_v:(i + 1) * mha.d_v]
        heads.append(attention_reference(qi, ki, vi, None if mask is None else mask[:, 0])[0])
    return lin(np.concatenate(heads, axis=-1), mha.w_o)


@pytest.mark.parametrize("d_k, d_v", [(4, 4), (3, 5)])
def test_multi_head_matches_head_by_head_loop(backend, d_k, d_v):
    rng = np.random.default_rng(1)
    mha = MultiHeadAttention(8, 2, d_k, d_v, rng)
    mha.to(backend)
    for p in mha.parameters():                                # nonzero biases so they are checked too
        p.data = p.backend.asarray((p.numpy() + rng.standard_normal(p.shape) * 0.1).astype(np.float32))
    query, memory = rng.standard_normal((2, 3, 8)), rng.standard_normal((2, 5, 8))
    mask = np.zeros((2, 1, 1, 5), dtype=bool)
    mask[1, ..., 3:] = True
    out, w = mha(mt.tensor(query, backend=backend), mt.tensor(memory, backend=backend), mask)
    assert out.shape == (2, 3, 8) and w.shape == (2, 2, 3, 5)
    mt.assert_close(out, mha_loop_reference(mha, query, memory, mask).astype(np.float32), "mha", atol=1e-5)


def test_multi_head_gradcheck_float64():
    rng = np.random.default_rng(2)
    mha = MultiHeadAttention(4, 2, 2, 2, rng)
    mha.to("numpy")
    to_float64(mha)
    x = mt.tensor(rng.standard_normal((2, 3, 4)), requires_grad=True, backend="numpy", dtype=np.float64)
    mask = np.array([False, False, True])[None, None, None, :]
    assert mt.gradcheck(lambda x, wq, wo: mha(x, None, mask)[0], x, mha.w_q.weight, mha.w_o.weight)


def test_parameter_names():
    names = [n for n, _ in MultiHeadAttention(8, 2, 4, 4, np.random.default_rng(0)).named_parameters()]
    assert names == ["w_q.weight", "w_q.bias", "w_k.weight", "w_k.bias", "w_v.weight", "w_v.bias",
                     "w_o.weight", "w_o.bias"]
