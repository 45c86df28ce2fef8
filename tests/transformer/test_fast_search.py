"""transformer/fast_search.py against transformer/search.py: the same outputs and scores on fixed inputs."""
import numpy as np
import pytest

from transformer import fast_search, search
from transformer_helpers import random_ids, small_model

LENGTHS = [6, 2, 5, 1, 3]


def model_and_source(seed, backend="numpy", **changes):
    model = small_model(backend=backend, seed=seed, vocab_size=13, float64=changes.pop("float64", True), **changes)
    return model, random_ids(np.random.default_rng(seed), len(LENGTHS), 6, 13, lengths=LENGTHS)


VARIANTS = [dict(), dict(norm="pre"), dict(tie_embeddings=False), dict(positional="learned"),
            dict(impl="fused", norm="pre", tie_embeddings=False), dict(float64=False)]


@pytest.mark.parametrize("variant", VARIANTS, ids=lambda v: ",".join(f"{k}={v}" for k, v in v.items()) or "paper")
@pytest.mark.parametrize("seed", range(3))
def test_greedy_and_beam_outputs_equal_the_readable_search(variant, seed):
    model, src = model_and_source(seed, **variant)
    model.train()
    assert fast_search.greedy_decode(model, src, max_len_b=6) == search.greedy_decode(model, src, max_len_b=6)
    for beam in (1, 2, 4):
        for early_stop in (False, True):
            fast = fast_search.beam_search_nbest(model, src, beam, 0.6, 6, nbest=min(beam, 3), early_stop=early_stop)
            readable = search.beam_search_nbest(model, src, beam, 0.6, 6, nbest=min(beam, 3), early_stop=early_stop)
            assert [[tokens for _, tokens in hyps] for hyps in fast] == \
                [[tokens for _, tokens in hyps] for hyps in readable], (beam, early_stop)
            np.testing.assert_allclose([s for hyps in fast for s, _ in hyps], [s for hyps in readable for s, _ in hyps],
                                       rtol=1e-6)
    assert model.training, "the fast search restores the training flag too"


def test_a_batch_with_finished_sentences_dropped_equals_one_sentence_at_a_time(backend):
    """Done sentences leave the batch (their rows are dropped): the others must not notice."""
    model, src = model_and_source(7, backend=backend)
    batched = fast_search.beam_search(model, src, beam=3, max_len_b=5)
    assert batched == [fast_search.beam_search(model, src[i:i + 1, :n], beam=3, max_len_b=5)[0]
                       for i, n in enumerate(LENGTHS)]
    assert batched == search.beam_search(model, src, beam=3, max_len_b=5)


def test_long_outputs_grow_the_key_value_arena(backend):
    """max_len_b 40: the arena (16 steps at first) has to grow while decoding."""
    model, src = model_and_source(8, backend=backend, max_len=64)
    assert fast_search.beam_search(model, src, beam=4, max_len_b=40) == search.beam_search(model, src, beam=4,
                                                                                            max_len_b=40)


def test_scratch_left_by_another_search_changes_nothing():
    """A finished search leaves its scratch arrays to the next one: after a wider model's search (other
    widths), a model decodes as search.py does, and again in a second search that reuses its own."""
    wide, wide_src = model_and_source(4, float64=False, d_model=16, d_ff=48, h=4)
    model, src = model_and_source(5)
    fast_search.beam_search(wide, wide_src, beam=4, max_len_b=8)
    readable = search.beam_search_nbest(model, src, 3, 0.6, 6, nbest=3)
    for _ in range(2):
        fast = fast_search.beam_search_nbest(model, src, 3, 0.6, 6, nbest=3)
        assert [[tokens for _, tokens in hyps] for hyps in fast] == [[tokens for _, tokens in hyps] for hyps in readable]
        np.testing.assert_allclose([s for hyps in fast for s, _ in hyps], [s for hyps in readable for s, _ in hyps],
                                   rtol=1e-6)


def test_supports_only_numpy_arrays_in_float32_or_float64():
    assert fast_search.supports(small_model())
    assert fast_search.supports(small_model(float64=True))
    from transformer import Transformer, TransformerConfig
    half = Transformer(TransformerConfig.tiny(vocab_size=11), np.random.default_rng(0), precision="fp16")
    assert not fast_search.supports(half), "fp16 activations: search.py decodes"
