"""transformer/config.py: Table 3 presets, validation, replace, to_dict/from_dict."""
import dataclasses

import pytest

from transformer import config as config_module
from transformer.config import TransformerConfig


def test_base_is_table3_base_row():
    c = TransformerConfig.base()
    assert (c.vocab_size, c.N, c.d_model, c.d_ff, c.h, c.d_k, c.d_v) == (37000, 6, 512, 2048, 8, 64, 64)
    assert (c.p_drop, c.eps_ls, c.norm, c.positional, c.tie_embeddings) == (0.1, 0.1, "post", "sinusoidal", True)


def test_big_is_table3_big_row():
    c = TransformerConfig.big()
    assert (c.N, c.d_model, c.d_ff, c.h, c.d_k, c.d_v, c.p_drop) == (6, 1024, 4096, 16, 64, 64, 0.3)


def test_parse_and_tiny_presets():
    p = TransformerConfig.parse()
    assert (p.N, p.d_model, p.vocab_size, p.d_k) == (4, 1024, 16000, 1024 // p.h)
    t = TransformerConfig.tiny(vocab_size=11)
    assert (t.N, t.d_model, t.d_ff, t.h, t.d_k, t.vocab_size) == (2, 64, 256, 4, 16, 11)


def test_module_functions_equal_classmethods():
    assert config_module.base(1000) == TransformerConfig.base(1000)
    assert config_module.big(1000) == TransformerConfig.big(1000)
    assert config_module.parse() == TransformerConfig.parse()
    assert config_module.tiny(20, p_drop=0.0) == TransformerConfig.tiny(20, p_drop=0.0)


@pytest.mark.parametrize("changes, words", [
    (dict(d_model=510, h=8), "divisible by h"),
    (dict(norm="middle"), "norm"),
    (dict(positional="rotary"), "positional"),
    (dict(p_drop=1.0), "p_drop"),
    (dict(eps_ls=-0.1), "eps_ls"),
    (dict(N=0), "N must be"),
    (dict(bos_id=0), "special token ids"),
    (dict(vocab_size=4), "vocab"),
    (dict(eos_id=99, vocab_size=50), "eos_id"),
    (dict(d_model=63, h=1, positional="sinusoidal"), "even"),
])
def test_validation_errors_are_clear(changes, words):
    with pytest.raises(ValueError, match=words):
        TransformerConfig.tiny(**changes)


def test_explicit_d_k_allows_table3_rows_a_and_b():
    c = TransformerConfig.base(h=1, d_k=512, d_v=512)           # Table 3 row (A)
    assert c.d_k == 512
    c = TransformerConfig.base(d_k=16)                           # Table 3 row (B): d_v stays d_model/h
    assert (c.d_k, c.d_v) == (16, 64)


def test_config_is_frozen():
    with pytest.raises(dataclasses.FrozenInstanceError):
        TransformerConfig.tiny().d_model = 128


def test_replace_rederives_d_k_but_keeps_explicit_values():
    c = TransformerConfig.base().replace(d_model=1024)
    assert (c.d_model, c.d_k, c.d_v) == (1024, 128, 128)
    c = TransformerConfig.base(d_k=16).replace(h=4)
    assert (c.d_k, c.d_v) == (16, 128)
    with pytest.raises(ValueError, match="did you mean 'p_drop'"):
        TransformerConfig.base().replace(pdrop=0.2)


def test_to_dict_from_dict_round_trip():
    c = TransformerConfig.tiny(vocab_size=50, norm="pre", positional="learned", tie_embeddings=False)
    assert TransformerConfig.from_dict(c.to_dict()) == c


def test_from_dict_unknown_key_suggests_closest():
    values = TransformerConfig.tiny().to_dict()
    values["d_modle"] = values.pop("d_model")
    with pytest.raises(ValueError, match="unknown key 'd_modle'; did you mean 'd_model'"):
        TransformerConfig.from_dict(values)
