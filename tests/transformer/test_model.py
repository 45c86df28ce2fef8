"""transformer/model.py (Figure 1): parameter counts, names, init, gradients, masking, cached decoding."""

import numpy as np
import pytest

import minitensor as mt
from minitensor import nn
from transformer import LabelSmoothingLoss, Transformer, TransformerConfig
from transformer.masks import padding_mask
from transformer_helpers import random_ids, small_model


def closed_form_count(V, N, D, F):
    """Parameters of the tied, post-norm, sinusoidal model, counted by hand."""
    attention = 4 * (D * D + D)                 # §3.2.2: W^Q, W^K, W^V (D x h·d_k = D x D) and W^O, each with a bias
    ffn = D * F + F + F * D + D                 # §3.3, Eq. (2): W1, b1, W2, b2
    norm = 2 * D                                # gain and bias of one LayerNorm
    encoder = N * (attention + ffn + 2 * norm)  # §3.1: 2 sub-layers, each followed by a LayerNorm
    decoder = N * (2 * attention + ffn + 3 * norm)
    return V * D + encoder + decoder            # §3.4: one (V, D) matrix shared three ways; sinusoids are free


@pytest.fixture
def free_init(monkeypatch):
    """Initialisers that allocate nothing (read-only broadcast zeros), to count big models fast."""
    def fake(shape, *args, **kwargs):
        return np.broadcast_to(np.float32(0), shape)
    for name in ("xavier_uniform", "normal", "zeros", "ones"):
        monkeypatch.setattr(nn.init, name, fake)


@pytest.mark.parametrize("preset, expected", [("base", 63_082_496), ("big", 214_245_376)])
def test_parameter_count_matches_closed_form(free_init, preset, expected):
    config = getattr(TransformerConfig, preset)(vocab_size=37000)
    assert closed_form_count(37000, config.N, config.d_model, config.d_ff) == expected   # ≈ 63.1M, ≈ 214.2M
    model = Transformer(config, np.random.default_rng(0), backend="numpy")
    assert model.num_parameters() == expected


def test_parameter_count_of_a_real_small_model_and_untied_variant():
    model = small_model()
    assert model.num_parameters() == closed_form_count(11, 2, 8, 16)
    untied = small_model(tie_embeddings=False, norm="pre", positional="learned")
    extra = 2 * 11 * 8 + 2 * (2 * 8) + 2 * 32 * 8     # two more (V, D) tables, 2 final norms, 2 learned tables
    assert untied.num_parameters() == closed_form_count(11, 2, 8, 16) + extra


def test_parameter_names_follow_module_paths():
    names = dict(small_model().named_parameters())
    assert names["encoder.layers.0.self_attn.w_q.weight"].shape == (8, 8)
    assert names["decoder.layers.1.cross_attn.w_o.bias"].shape == (8,)
    assert names["embeddings.shared.weight"].shape == (11, 8)
    assert len(names) == len({id(p) for p in names.values()}), "a parameter is registered twice"


def test_init_xavier_weights_zero_biases_normal_embedding():
    model = Transformer(TransformerConfig.tiny(vocab_size=2000), np.random.default_rng(0), backend="numpy")
    for name, p in model.named_parameters():
        value = p.numpy()
        if name.endswith(".bias") or name.endswith(".beta"):
            assert (value == 0).all(), name
        elif name.endswith(".gamma"):
            assert (value == 1).all(), name
        elif name.startswith("embeddings."):
            assert abs(value.std() / 64 ** -0.5 - 1) < 0.02, name
        else:
            bound = np.sqrt(6.0 / sum(value.shape))
            assert np.abs(value).max() <= bound and np.abs(value).max() > 0.9 * bound, name


@pytest.mark.parametrize("changes, names", [
    ({}, ["embeddings.shared.weight", "encoder.layers.0.self_attn.w_q.weight",
          "decoder.layers.1.cross_attn.w_v.weight", "decoder.layers.0.feed_forward.w_1.weight",
          "encoder.layers.1.sublayers.0.norm.gamma"]),
    (dict(norm="pre", tie_embeddings=False, positional="learned"),
     ["embeddings.src.weight", "embeddings.generator.weight", "decoder.layers.0.self_attn.w_k.weight",
      "decoder.norm.beta", "tgt_positions.table"]),
])
def test_gradcheck_whole_tiny_model_through_the_loss(changes, names):
    model = small_model(float64=True, **changes)
    rng = np.random.default_rng(3)
    src = random_ids(rng, 2, 4, 11, lengths=[4, 3])
    tgt = random_ids(rng, 2, 4, 11, lengths=[4, 3])
    tgt_in = np.concatenate([np.full((2, 1), 2), tgt[:, :-1]], axis=1)
    loss = LabelSmoothingLoss(0.1, pad_id=0)
    if changes.get("positional") == "learned":
        names[-1:] = []                                   # a (32, 8) table: most rows unused, checked below
    params = dict(model.named_parameters())
    inputs = [params[n] for n in names]
    assert mt.gradcheck(lambda *_: loss(model(src, tgt_in), tgt).loss, *inputs)


def test_decoder_position_never_sees_later_target_tokens(backend):
    model = small_model(backend=backend)
    rng = np.random.default_rng(4)
    src, tgt = random_ids(rng, 2, 5, 11, lengths=[5, 3]), random_ids(rng, 2, 6, 11)
    base = model(src, tgt).numpy()
    for j in range(1, 6):
        changed = tgt.copy()
        changed[:, j:] = random_ids(rng, 2, 6 - j, 11)
        np.testing.assert_array_equal(model(src, changed).numpy()[:, :j], base[:, :j], err_msg=f"leak from >= {j}")


def test_appending_source_padding_changes_no_output(backend):
    model = small_model(backend=backend)
    rng = np.random.default_rng(5)
    src, tgt = random_ids(rng, 2, 5, 11, lengths=[5, 2]), random_ids(rng, 2, 4, 11)
    padded = np.concatenate([src, np.zeros((2, 3), dtype=src.dtype)], axis=1)
    mt.assert_close(model(padded, tgt), model(src, tgt).numpy(), "logits", atol=1e-5)
    mt.assert_close(model.encode(padded).numpy()[0, :5], model.encode(src).numpy()[0, :5], "memory", atol=1e-5)


def test_cached_incremental_decoding_equals_full_decoder(backend):
    model = small_model(backend=backend, p_drop=0.1)
    model.eval()
    rng = np.random.default_rng(6)
    src, tgt_in = random_ids(rng, 3, 5, 11, lengths=[5, 2, 4]), random_ids(rng, 3, 6, 11)
    with mt.no_grad():
        memory = model.encode(src)
        full = model.decode(tgt_in, memory, padding_mask(src, 0)).numpy()          # (B, T, V)
        cache = model.init_cache(src, memory)
        for t in range(6):
            mt.assert_close(model.decode_step(cache, tgt_in[:, t]), full[:, t], f"step {t}", atol=1e-5)
        cache = model.init_cache(src, memory)                                     # two chunks of 2 and 4 tokens
        chunks = [model.decode(tgt_in[:, :2], None, None, cache), model.decode(tgt_in[:, 2:], None, None, cache)]
        mt.assert_close(mt.concat(chunks, axis=1), full, "chunked", atol=1e-5)


def test_beam_cache_tiling_and_reorder_follow_the_rows():
    model = small_model(p_drop=0.0)
    rng = np.random.default_rng(7)
    src = random_ids(rng, 2, 5, 11, lengths=[5, 3])
    with mt.no_grad():
        memory = model.encode(src)
        cache = model.init_cache(src, memory, beam=2)                             # rows: s0, s0, s1, s1
        first, second = np.array([4, 5, 6, 7]), np.array([8, 9, 10, 4])
        model.decode_step(cache, first)                                           # position 0
        rows = np.array([1, 1, 3, 2])                                             # reorder within each sentence
        cache.reorder(rows)
        got = model.decode_step(cache, second).numpy()                            # position 1
        full = model(src[[0, 0, 1, 1]], np.stack([first[rows], second], axis=1)).numpy()
    mt.assert_close(got, full[:, 1], "reordered step", atol=1e-5)


def test_attention_maps_are_returned_not_stored():
    model = small_model(p_drop=0.1)
    rng = np.random.default_rng(8)
    src, tgt = random_ids(rng, 2, 5, 11, lengths=[5, 3]), random_ids(rng, 2, 4, 11)
    maps = model.attention_maps(src, tgt)
    assert model.training, "attention_maps must restore training mode"
    assert len(maps) == 3 * 2
    cross = maps["decoder.layers.1.cross_attn"]
    assert cross.shape == (2, 2, 4, 5) and cross.dtype == np.float32
    np.testing.assert_allclose(cross.sum(-1), 1.0, rtol=1e-5)
    assert (cross[1, :, :, 3:] == 0).all(), "padding keys get no attention"
    assert (maps["decoder.layers.0.self_attn"][0, 0][np.triu_indices(4, 1)] == 0).all()
    for name, module in model.named_modules():
        stored = [k for k, v in vars(module).items() if isinstance(v, mt.Tensor)
                  and k not in module._parameters and k not in module._buffers]
        assert not stored, f"{name} keeps tensors {stored} after a forward"


def test_fp16_precision_runs_close_to_fp32():
    rng = np.random.default_rng(9)
    src, tgt = random_ids(rng, 2, 5, 11), random_ids(rng, 2, 4, 11)
    ref = small_model(backend="numpy")(src, tgt).numpy()
    model = Transformer(small_model().config, np.random.default_rng(0), backend="numpy", precision="fp16")
    assert model.embeddings.shared.weight.dtype == np.float32                   # float32 master weights
    logits = model(src, tgt)
    assert logits.dtype == np.float16
    mt.assert_close(logits.numpy().astype(np.float32), ref, "float16 logits", atol=2e-2, rtol=2e-2)
    out = LabelSmoothingLoss(0.1, 0)(logits, tgt)
    assert out.loss.dtype == np.float32
    out.loss.backward()
    assert model.embeddings.shared.weight.grad.dtype == np.float32


def test_ids_must_be_integer_matrices():
    model = small_model()
    with pytest.raises(ValueError, match="2-d integer"):
        model(np.ones((2, 3)), np.ones((2, 3), dtype=int))
    with pytest.raises(ValueError, match="max_len"):
        model(np.ones((1, 40), dtype=int) * 4, np.ones((1, 3), dtype=int) * 4)


def test_building_base_gives_its_closed_form_size():
    """Really builds Table 3 base (the count test above stubs the initialiser out)."""
    model = Transformer(TransformerConfig.base(vocab_size=8000), np.random.default_rng(0), backend="numpy")
    assert model.num_parameters() == 63_082_496 - (37000 - 8000) * 512
