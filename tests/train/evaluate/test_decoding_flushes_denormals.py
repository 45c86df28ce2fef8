"""Decoding computes with denormals flushed on every thread that decodes (a trained model's attention makes
them), and leaves the calling thread as it found it."""
import threading

import numpy as np
import pytest

from minitensor.backends import denormals
from train.evaluate import translate
from transformer import fast_search, search
from transformer.config import TransformerConfig
from transformer.model import Transformer

pytestmark = pytest.mark.skipif(not denormals.X86, reason="MXCSR is x86's")
BITS = denormals.FTZ | denormals.DAZ


@pytest.mark.parametrize("beam", [1, 4])
@pytest.mark.parametrize("searches", [fast_search, search])     # on worker threads; in this one (as on a GPU)
def test_every_decoding_thread_has_ftz_and_daz_and_the_caller_is_restored(monkeypatch, beam, searches):
    model = Transformer(TransformerConfig.tiny(vocab_size=30, N=1, d_model=16, d_ff=16, h=2), np.random.default_rng(0))
    monkeypatch.setattr(translate, "_searches", lambda model: searches)
    seen = []

    def watching(name):
        original = getattr(searches, name)

        def run(*args, **kwargs):
            seen.append((threading.get_ident(), denormals.mxcsr() & BITS))
            return original(*args, **kwargs)
        monkeypatch.setattr(searches, name, run)
    watching("greedy_decode")
    watching("beam_search")

    before = denormals.mxcsr()
    sources = [[5 + i % 7] * (1 + i % 9) for i in range(24)]
    out = translate.translate_ids(model, sources, beam=beam, max_len_b=3, max_tokens=20)
    assert len(out) == len(sources) and len(seen) > 1
    assert {bits for _, bits in seen} == {BITS}
    assert denormals.mxcsr() == before
    if searches is search:                                        # its Tensor ops stay in the calling thread
        assert {thread for thread, _ in seen} == {threading.get_ident()}
