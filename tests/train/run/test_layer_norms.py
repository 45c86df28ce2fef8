"""train/run/layer_norms.py: the per-layer norms, held to NumPy by hand, and the collapse they are for."""

import math
import warnings

import numpy as np
import pytest

import minitensor as mt
from minitensor.autograd import backward
from train import config as config_lib
from train.config import RunConfig
from train.run import layer_norms as probe
from train.run.loop import fit
from train.run.metrics import read_metrics
from train.run.norm_plots import compare_runs, layers, plot_norms, runs_table, series
from train.run.plots import plot_run
from transformer.config import TransformerConfig
from transformer.loss import LabelSmoothingLoss
from transformer.model import Transformer


def tiny_model(norm: str, impl: str = "composed", seed: int = 0) -> Transformer:
    config = TransformerConfig.tiny(vocab_size=20, N=2, d_model=16, d_ff=32, h=2, norm=norm, impl=impl)
    return Transformer(config, np.random.default_rng(seed), backend="numpy", precision="fp64")


def batch():
    """Two pairs; the second is shorter on both sides (padding, id 0, at its end)."""
    src = np.array([[5, 6, 7, 8, 3], [9, 10, 3, 0, 0]])
    tgt_in = np.array([[2, 11, 12, 13], [2, 14, 0, 0]])
    tgt_out = np.array([[11, 12, 13, 3], [14, 3, 0, 0]])
    return src, tgt_in, tgt_out


def test_parts_split_the_rms_into_a_shared_and_a_per_word_part():
    rng = np.random.default_rng(0)
    a = rng.normal(size=(3, 5, 4)) + rng.normal(size=(3, 1, 4)) * 3           # (B, L, D), a per-sentence offset
    mask = np.ones((3, 5), bool)
    mask[1, 3:] = mask[2, 2:] = False
    rms, const, spread = probe._parts(a, mask)
    words = [a[b, mask[b]] for b in range(3)]                                # the real positions of each sentence
    means = [w.mean(axis=0) for w in words]
    count = sum(w.size for w in words)
    assert rms == pytest.approx(math.sqrt(sum((w ** 2).sum() for w in words) / count), rel=1e-12)
    assert const == pytest.approx(math.sqrt(sum(len(w) * (m ** 2).sum() for w, m in zip(words, means)) / count), rel=1e-12)
    assert spread == pytest.approx(math.sqrt(sum(((w - m) ** 2).sum() for w, m in zip(words, means)) / count), rel=1e-12)
    assert rms ** 2 == pytest.approx(const ** 2 + spread ** 2, rel=1e-12)
    a[~mask] = 1e6                                                           # padding is not looked at
    assert probe._parts(a, mask) == pytest.approx((rms, const, spread), rel=1e-12)
    same_word = np.broadcast_to(a[:, :1], a.shape)                           # every word the same vector
    assert probe._parts(same_word, mask)[2] == pytest.approx(0.0, abs=1e-9)


@pytest.mark.parametrize("norm,impl", [("post", "composed"), ("post", "fused"), ("pre", "composed")])
def test_norms_are_the_model_own_activations_and_gradients(norm, impl):
    model = tiny_model(norm, impl)
    src, tgt_in, tgt_out = batch()
    loss = LabelSmoothingLoss(model.config.eps_ls, model.config.pad_id, impl)(model(src, tgt_in), tgt_out).loss
    backward(loss)
    norms = probe.layer_norms(model, (src, tgt_in, tgt_out))
    subs = {"enc": ("self_attn", "feed_forward"), "dec": ("self_attn", "cross_attn", "feed_forward")}
    expected_keys = {f"{s}.{i}.{sub}.{k}" for s, names in subs.items() for i in range(2) for sub in names
                     for k in ("x", "f", "f_const", "f_spread", "y_spread", "grad")} | {"memory.spread"}
    assert set(norms) == expected_keys
    model.eval()
    with mt.no_grad():
        embedded = model.src_positions(model.embeddings.source(model._ids(src)), 0)    # what the first layer reads
        memory = model.encode(src)
    real = src != 0
    embedded, memory = probe._batch_major(embedded, False), probe._batch_major(memory, model.time_major)  # (B, S, D)
    assert norms["enc.0.self_attn.x"] == pytest.approx(probe._parts(embedded, real)[0], rel=1e-12)
    assert norms["memory.spread"] == pytest.approx(probe._relative_spread(memory, real), rel=1e-12)
    if norm == "post":                                                       # the last connection's output is the memory
        assert norms["enc.1.feed_forward.y_spread"] == pytest.approx(norms["memory.spread"], rel=1e-12)
    grads = [p.grad for name, p in model.named_parameters()
             if name.startswith(("encoder.layers.1.feed_forward.", "encoder.layers.1.sublayers.1."))]
    assert len(grads) == 6                                                   # W1, b1, W2, b2, LayerNorm γ, β
    assert norms["enc.1.feed_forward.grad"] == pytest.approx(math.sqrt(sum((g ** 2).sum() for g in grads)), rel=1e-12)


def test_the_probe_changes_nothing_it_measures():
    model = tiny_model("post")
    src, tgt_in, tgt_out = batch()
    model.train()
    before = model.state_dict()
    with mt.no_grad():
        model.eval()
        reference = model(src, tgt_in).numpy()
        model.train()
    probe.layer_norms(model, (src, tgt_in, tgt_out))
    assert model.training, "training mode is restored"
    assert all("forward" not in module.__dict__ for _, module in model.named_modules()), "no forward left patched"
    after = model.state_dict()
    assert all(np.array_equal(before[k], after[k]) for k in before)
    with mt.no_grad():
        model.eval()
        np.testing.assert_array_equal(model(src, tgt_in).numpy(), reference)


def test_a_large_shared_ffn_output_collapses_a_post_norm_encoder():
    # The mechanism seen on the WSJ sample (docs/parsing.md): when the last encoder
    # FFN's output is dominated by a part shared by every word (here its bias b2 = ±c, mean 0 so that
    # LayerNorm does not subtract it), the post-norm LayerNorm(x + F) divides the words' differences
    # by about |F|, and the memory is one vector.
    src, tgt_in, tgt_out = batch()
    healthy = probe.layer_norms(tiny_model("post"), (src, tgt_in, tgt_out))
    model = tiny_model("post")
    for c in (1e2, 1e4):
        model.encoder.layers[1].feed_forward.w_2.bias.data[...] = c * (-1.0) ** np.arange(16)
        norms = probe.layer_norms(model, (src, tgt_in, tgt_out))
        assert norms["enc.1.feed_forward.f_const"] == pytest.approx(c, rel=0.01)
        assert norms["memory.spread"] < 3 * healthy["memory.spread"] * healthy["enc.1.feed_forward.f"] / c
    assert healthy["memory.spread"] > 0.1


TINY = ["task.n_train=100", "task.n_valid=8", "task.n_test=8", "tokenizer.vocab_size=80", "model.N=1",
        "model.d_model=16", "model.d_ff=32", "model.h=2", "model.max_len=64", "train.max_tokens=256",
        "train.warmup_steps=4", "train.backend=numpy", "train.log_every=2", "train.valid_every=0",
        "train.valid_bleu_sentences=0", "train.ckpt_every=4", "train.keep_last=1", "train.average_last=1",
        "train.threads=1", "train.max_steps=4"]


def quiet_fit(config, run_dir):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # the tiny corpus lowers the vocabulary size (a warning)
        return fit(config, run_dir, progress=False)


def test_fit_logs_norms_only_when_asked_and_plot_draws_them(tmp_path, monkeypatch):
    config = config_lib.apply_overrides(RunConfig(name="tiny"), TINY + ["train.log_norms=true"])
    quiet_fit(config, tmp_path / "on")
    records = read_metrics(tmp_path / "on" / "metrics.jsonl")
    norms = [r for r in records if r["kind"] == "norms"]
    assert [r["step"] for r in norms] == [r["step"] for r in records if r["kind"] == "train"] == [1, 2, 4]
    assert all(0 < r["memory.spread"] <= 1 and r["enc.0.feed_forward.grad"] > 0 for r in norms)
    assert (tmp_path / "on" / "plots" / "norms.png") in plot_run(tmp_path / "on")

    def must_not_run(*args):
        raise AssertionError("layer_norms ran with train.log_norms off")

    monkeypatch.setattr("train.run.loop.layer_norms", must_not_run)
    quiet_fit(config_lib.apply_overrides(RunConfig(name="tiny"), TINY), tmp_path / "off")
    assert not [r for r in read_metrics(tmp_path / "off" / "metrics.jsonl") if r["kind"] == "norms"]
    assert compare_runs({"on": records}, tmp_path / "compare.png").is_file()
    assert plot_norms(records, tmp_path / "one.png").is_file()


def test_runs_table_keeps_the_last_encoder_layer_that_runs_figure_draws():
    # runs_table keeps only enc.<last>.feed_forward.f_const: `layers` must still read the depth off it
    # (counting the distinct indices would give 1 layer, and the chapter's middle panel would be empty)
    full = [{"kind": "norms", "step": 1, "memory.spread": 0.5,
             **{f"enc.{i}.feed_forward.f_const": float(i) for i in range(4)}},
            {"kind": "valid", "step": 1, "nll": 2.0}]
    table = runs_table(full)
    assert layers(full, "enc") == layers(table, "enc") == 4
    assert table[0] == {"kind": "norms", "step": 1, "memory.spread": 0.5, "enc.3.feed_forward.f_const": 3.0}
    assert series(table, "enc.3.feed_forward.f_const") == ([1], [3.0])
