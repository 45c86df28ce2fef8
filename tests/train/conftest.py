"""Shared by tests/train: a small trained tokenizer over the words w0 ... w199."""
import warnings

import pytest


@pytest.fixture(scope="session")
def words_tokenizer(tmp_path_factory):
    """A 40-piece sentencepiece model trained (in a second) on the words w0 ... w199."""
    from train.data.tokenizer import Tokenizer

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return Tokenizer.train([" ".join(f"w{i}" for i in range(200))] * 5, tmp_path_factory.mktemp("spm") / "words",
                               vocab_size=40)
