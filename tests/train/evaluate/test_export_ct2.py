"""`python -m train export --format ctranslate2`: CTranslate2 decodes an exported model exactly as we do."""

from pathlib import Path

import numpy as np
import pytest

from minitensor.optim import Adam, NoamSchedule
from train.evaluate.translate import translate_ids
from transformer import LabelSmoothingLoss, Transformer, TransformerConfig
from transformer.checkpoint import save_model

from cli_helpers import assert_one_line_error, run_cli

ctranslate2 = pytest.importorskip("ctranslate2")
from train.evaluate.export_ct2 import ct2_translate, export, vocabulary  # noqa: E402


def reversal(rng, n, vocab):
    """Sources of 3-7 ids, targets their reverse (ids 4.. of the vocabulary), padded: (src, tgt_in, tgt_out)."""
    src, tgt_in, tgt_out = (np.zeros((n, 8), dtype=np.int64) for _ in range(3))
    for i, length in enumerate(rng.integers(3, 8, n)):
        x = rng.integers(4, min(vocab, 16), length)
        src[i, :length + 1], tgt_in[i, :length + 1], tgt_out[i, :length + 1] = [*x, 3], [2, *x[::-1]], [*x[::-1], 3]
    return src, tgt_in, tgt_out


def trained(vocab, **changes):
    """A small model trained for a few seconds to reverse sequences: it says EOS, unlike an untrained one."""
    config = TransformerConfig.tiny(vocab_size=vocab, d_model=32, d_ff=64, p_drop=0.0, eps_ls=0.0, max_len=64,
                                    **changes)
    rng = np.random.default_rng(0)
    model = Transformer(config, rng, backend="cpu")
    optimizer = Adam(model.named_parameters(), lr=NoamSchedule(32, warmup=50, factor=1.0))
    loss_fn = LabelSmoothingLoss(0.0, config.pad_id)
    for _ in range(120):
        src, tgt_in, tgt_out = reversal(rng, 48, vocab)
        model.zero_grad()
        loss_fn(model(src, tgt_in), tgt_out).loss.backward()
        optimizer.step()
    return model.eval()


@pytest.mark.parametrize("changes", [dict(), dict(norm="pre", tie_embeddings=False, positional="learned")],
                         ids=["paper", "pre-norm-untied-learned-positions"])
def test_ctranslate2_greedy_equals_ours_on_an_exported_model(words_tokenizer, tmp_path, changes):
    model = trained(words_tokenizer.vocab_size, **changes)
    src, _, _ = reversal(np.random.default_rng(1), 100, words_tokenizer.vocab_size)
    sources = [row[:list(row).index(3)].tolist() for row in src]
    ours = translate_ids(model, sources, beam=1)
    assert sum(len(y) < len(x) + 1 + 50 for x, y in zip(sources, ours)) > 80, "a trained model ends with EOS"
    folder = export(model, words_tokenizer, tmp_path / "ct2")
    translator = ctranslate2.Translator(str(folder), device="cpu", intra_threads=1)
    pieces = vocabulary(words_tokenizer)
    limits = [len(x) + 1 + 50 for x in sources]                          # ours stops there; CTranslate2 at 64
    theirs = ct2_translate(translator, sources, pieces, beam=1, max_length=64)
    assert [y[:limit] for y, limit in zip(theirs, limits)] == ours


def test_export_command_writes_a_model_and_never_overwrites(words_tokenizer, tmp_path):
    model = Transformer(TransformerConfig.tiny(vocab_size=words_tokenizer.vocab_size, d_model=16, d_ff=32, h=2),
                        np.random.default_rng(0))
    ckpt = tmp_path / "ckpt_00000001.safetensors"
    save_model(ckpt, model, metadata={"tokenizer_hash": words_tokenizer.model_hash})
    out = tmp_path / "served"
    done = run_cli("export", "--format", "ctranslate2", "--ckpt", str(ckpt), "--tokenizer",
                   str(words_tokenizer.model_path), "--out", str(out))
    assert done.returncode == 0, done.stderr.decode()
    assert (out / "model.bin").is_file() and (out / "config.json").is_file()
    translator = ctranslate2.Translator(str(out), device="cpu")
    assert translator.translate_batch([words_tokenizer.pieces("w1 w2")], max_decoding_length=3)[0].hypotheses[0]
    assert_one_line_error(run_cli("export", "--format", "ctranslate2", "--ckpt", str(ckpt), "--tokenizer",
                                  str(words_tokenizer.model_path), "--out", str(out)), "served: exists")


def test_export_refuses_heads_ctranslate2_cannot_hold(words_tokenizer, tmp_path):
    from train.errors import InputError

    config = TransformerConfig.tiny(vocab_size=words_tokenizer.vocab_size, d_model=16, d_ff=32, h=2, d_k=4, d_v=4)
    model = Transformer(config, np.random.default_rng(0))
    with pytest.raises(InputError, match="CTranslate2 needs d_k = d_v = d_model / h"):
        export(model, words_tokenizer, tmp_path / "x")
    assert not (tmp_path / "x").exists()


def test_an_export_stopped_half_way_leaves_no_model_folder(words_tokenizer, tmp_path, monkeypatch):
    """The model is written into OUT.tmp-<pid> and renamed to OUT when complete: a failure (or a kill) while
    model.bin is written leaves no OUT that looks like a model, and the next export is not refused."""
    model = Transformer(TransformerConfig.tiny(vocab_size=words_tokenizer.vocab_size, d_model=16, d_ff=32, h=2),
                        np.random.default_rng(0))
    save = ctranslate2.specs.TransformerSpec.save

    def save_half(self, output_dir):
        (Path(output_dir) / "model.bin").write_bytes(b"half")
        raise KeyboardInterrupt
    monkeypatch.setattr(ctranslate2.specs.TransformerSpec, "save", save_half)
    with pytest.raises(KeyboardInterrupt):
        export(model, words_tokenizer, tmp_path / "ct2")
    assert list(tmp_path.iterdir()) == []
    monkeypatch.setattr(ctranslate2.specs.TransformerSpec, "save", save)
    assert (export(model, words_tokenizer, tmp_path / "ct2") / "model.bin").stat().st_size > 4
    assert [p.name for p in tmp_path.iterdir()] == ["ct2"]
