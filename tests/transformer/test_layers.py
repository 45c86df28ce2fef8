"""transformer/layers.py: SublayerConnection (post-norm §3.1, pre-norm deviation), layers and stacks."""
import numpy as np
import pytest

import minitensor as mt
from transformer.config import TransformerConfig
from transformer.layers import Decoder, DecoderLayer, Encoder, EncoderLayer, SublayerConnection


def layer_norm_reference(x, eps):
    mean = x.mean(-1, keepdims=True)
    return (x - mean) / np.sqrt(x.var(-1, keepdims=True) + eps)


@pytest.mark.parametrize("norm", ["post", "pre"])
def test_sublayer_connection_formula(norm):
    config = TransformerConfig.tiny(d_model=8, h=2, p_drop=0.0, norm=norm)
    block = SublayerConnection(config, np.random.default_rng(0))
    block.to("numpy")
    x = np.random.default_rng(1).standard_normal((2, 3, 8))
    w = np.random.default_rng(2).standard_normal((8, 8)) * 0.3
    sublayer = lambda y: (y @ mt.tensor(w, backend="numpy"), "aux")  # noqa: E731
    out, aux = block(mt.tensor(x, backend="numpy"), sublayer)
    eps = config.layernorm_eps
    if norm == "post":
        expected = layer_norm_reference(x + x @ w, eps)               # §3.1: LayerNorm(x + Sublayer(x))
    else:
        expected = x + layer_norm_reference(x, eps) @ w               # DEVIATION(§3.1): x + Sublayer(LayerNorm(x))
    assert aux == "aux"
    mt.assert_close(out, expected.astype(np.float32), "sublayer", atol=1e-5)


def test_residual_dropout_only_in_training():
    config = TransformerConfig.tiny(d_model=8, h=2, p_drop=0.5)
    layer = EncoderLayer(config, np.random.default_rng(0))
    x = mt.tensor(np.random.default_rng(1).standard_normal((2, 5, 8)))
    a, b = layer(x, None)[0].numpy(), layer(x, None)[0].numpy()
    assert not np.allclose(a, b), "training mode: two calls draw different dropout masks"
    layer.eval()
    np.testing.assert_array_equal(layer(x, None)[0].numpy(), layer(x, None)[0].numpy())


def test_layer_parameter_names():
    config = TransformerConfig.tiny(d_model=8, h=2)
    enc = dict(EncoderLayer(config, np.random.default_rng(0)).named_parameters())
    assert {"self_attn.w_q.weight", "self_attn.w_o.bias", "feed_forward.w_1.weight", "feed_forward.w_2.bias",
            "sublayers.0.norm.gamma", "sublayers.1.norm.beta"} <= set(enc)
    dec = dict(DecoderLayer(config, np.random.default_rng(0)).named_parameters())
    assert {"cross_attn.w_k.weight", "sublayers.2.norm.gamma"} <= set(dec)
    assert enc["feed_forward.w_1.weight"].shape == (8, config.d_ff)


@pytest.mark.parametrize("norm, extra", [("post", 0), ("pre", 1)])
def test_stacks_have_N_layers_and_final_norm_only_for_pre_norm(norm, extra):
    config = TransformerConfig.tiny(d_model=8, h=2, N=3, norm=norm)
    for stack in (Encoder(config, np.random.default_rng(0)), Decoder(config, np.random.default_rng(0))):
        assert len(stack.layers) == 3
        assert sum(name.startswith("norm.") for name, _ in stack.named_parameters()) == 2 * extra


def test_encoder_returns_one_attention_map_per_layer():
    config = TransformerConfig.tiny(d_model=8, h=2, N=3, p_drop=0.0)
    out, maps = Encoder(config, np.random.default_rng(0))(mt.tensor(np.ones((2, 4, 8))), None)
    assert out.shape == (2, 4, 8) and [m.shape for m in maps] == [(2, 2, 4, 4)] * 3
