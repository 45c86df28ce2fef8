"""The training loop: exact resume, run-directory safety, checkpoints, metrics, loss scaling, FLOPs."""

import hashlib
import json
import math
import warnings
from pathlib import Path

import numpy as np
import pytest

import minitensor as mt
from train import config as config_lib
from train.config import RunConfig
from train.errors import InputError
from train.run import checkpointing
from train.run.loop import fit
from train.run.loss_scaler import DynamicLossScaler, LossScaleOverflowError
from train.run.metrics import MetricsWriter, forward_flops, read_metrics
from train.run.manifest import MANIFEST_FILE, Manifest
from transformer.checkpoint import CheckpointError, list_checkpoints, load_checkpoint
from transformer.config import TransformerConfig
from transformer.model import Transformer

TINY = [
    "task.n_train=100", "task.n_valid=8", "task.n_test=8",
    "tokenizer.vocab_size=80",
    "model.N=1", "model.d_model=16", "model.d_ff=32", "model.h=2", "model.max_len=64",
    "train.max_tokens=256", "train.tokens_per_update=512", "train.warmup_steps=4", "train.backend=numpy",
    "train.log_every=1", "train.valid_every=0", "train.valid_bleu_sentences=4", "train.valid_beam=1",
    "train.ckpt_every=3", "train.keep_last=5", "train.average_last=2", "train.threads=1",
]


def tiny_config(*extra: str) -> RunConfig:
    return config_lib.apply_overrides(RunConfig(name="tiny"), TINY + list(extra))


def train_losses(run_dir) -> list[tuple[int, float, float]]:
    return [(r["step"], r["loss"], r["nll"]) for r in read_metrics(run_dir / "metrics.jsonl", "train")]


def quiet_fit(*args, **kwargs):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # the tiny corpus lowers the vocabulary size (a warning)
        return fit(*args, progress=False, **kwargs)


@pytest.fixture(scope="module")
def straight_run(tmp_path_factory):
    """12 updates in one go (the batches of an epoch run out around update 5: resume must cross epochs)."""
    run_dir = tmp_path_factory.mktemp("straight")
    result = quiet_fit(tiny_config("train.max_steps=12"), run_dir)
    return run_dir, result


def test_resume_is_bit_exact(straight_run, tmp_path):
    straight_dir, straight = straight_run
    assert straight.progress.epoch >= 1, "the test should cross an epoch boundary"
    quiet_fit(tiny_config("train.max_steps=6"), tmp_path)  # stop after 6 ...
    resumed = quiet_fit(tiny_config("train.max_steps=12"), tmp_path)  # ... and resume to 12
    expected, got = train_losses(straight_dir), train_losses(tmp_path)
    assert [s for s, _, _ in got] == list(range(1, 13))
    assert got == expected  # same floats: data order, dropout masks, Adam state all restored
    for (name, a), (_, b) in zip(straight.model.named_parameters(), resumed.model.named_parameters()):
        np.testing.assert_array_equal(a.numpy(), b.numpy(), err_msg=name)


def test_resume_from_earlier_checkpoint_redoes_steps(straight_run, tmp_path):
    """Kill after step 7 (checkpoint at 6): the resumed run redoes step 7 and matches the straight run."""
    straight_dir, _ = straight_run
    quiet_fit(tiny_config("train.max_steps=7", "train.ckpt_every=6", "train.keep_last_full=2"), tmp_path)
    for name in ("ckpt_00000007.safetensors", "ckpt_00000007.optimizer.safetensors"):
        (tmp_path / name).unlink()  # as if killed before the final checkpoint
    quiet_fit(tiny_config("train.max_steps=12", "train.ckpt_every=6", "train.keep_last_full=2"), tmp_path)
    assert train_losses(tmp_path) == train_losses(straight_dir)  # the redone step 7 replaced the first


def test_optimizer_state_only_in_the_newest_keep_last_full(tmp_path):
    quiet_fit(tiny_config("train.max_steps=6", "train.ckpt_every=1", "train.keep_last=4", "train.keep_last_full=2"),
              tmp_path)
    assert sorted(p.name for p in tmp_path.glob("ckpt_*")) == [
        "ckpt_00000003.safetensors", "ckpt_00000004.safetensors", "ckpt_00000005.optimizer.safetensors",
        "ckpt_00000005.safetensors", "ckpt_00000006.optimizer.safetensors", "ckpt_00000006.safetensors"]
    weights, _ = load_checkpoint(tmp_path / "ckpt_00000004.safetensors")
    adam, _ = load_checkpoint(tmp_path / "ckpt_00000006.optimizer.safetensors")
    assert not any(k.startswith("optimizer.") for k in weights)
    n_weights = sum(v.size for v in weights.values())
    assert sum(v.size for k, v in adam.items() if k != "optimizer.step") == 2 * n_weights  # Adam's m and v


def test_weights_only_newest_checkpoint_is_never_an_exact_resume_silently(straight_run, tmp_path, capsys):
    straight_dir, _ = straight_run
    config = tiny_config("train.max_steps=7", "train.ckpt_every=6", "train.keep_last_full=2")
    quiet_fit(config, tmp_path)
    (tmp_path / "ckpt_00000007.optimizer.safetensors").write_bytes(b"lost")  # a corrupt optimizer file
    capsys.readouterr()
    quiet_fit(tiny_config("train.max_steps=12", "train.ckpt_every=6", "train.keep_last_full=2"), tmp_path)
    out = capsys.readouterr().out
    assert "ckpt_00000007.safetensors holds weights only" in out and "restored ckpt_00000006.safetensors" in out
    assert train_losses(tmp_path) == train_losses(straight_dir)  # exact: resumed from step 6, not from 7's weights

    other = tmp_path / "other"
    quiet_fit(tiny_config("train.max_steps=7", "train.ckpt_every=6"), other)  # keep_last_full 1
    (other / "ckpt_00000007.optimizer.safetensors").unlink()
    with pytest.raises(InputError, match="ckpt_00000007.safetensors: no optimizer state to resume from.*"
                                         "--reset-optimizer"):
        quiet_fit(tiny_config("train.max_steps=9", "train.ckpt_every=6"), other)
    resumed = quiet_fit(tiny_config("train.max_steps=9", "train.ckpt_every=6"), other, reset_optimizer=True)
    assert resumed.progress.step == 9


def test_run_dir_contents(straight_run):
    run_dir, result = straight_run
    names = {p.name for p in run_dir.iterdir()}
    assert {"config.json", "metrics.jsonl", "tokenizer.model", "prepared.json", "best.safetensors",
            "run.lock", MANIFEST_FILE} <= names
    manifest = Manifest.load(run_dir)  # every file is listed with the hash of its bytes: --force may delete them
    assert set(manifest.listed()) == names - {MANIFEST_FILE} and all(manifest.owns(n) for n in manifest.listed())
    record = json.loads((run_dir / "prepared.json").read_text())
    assert record["data"].startswith(str(run_dir.parent / "prepared"))  # shared data, beside the runs
    assert record["files"]["train_src"]["sha256"] == hashlib.sha256(
        open(record["files"]["train_src"]["path"], "rb").read()).hexdigest()
    assert (run_dir / "tokenizer.model").read_bytes() == (Path(record["data"]) / "tokenizer.model").read_bytes()
    assert (run_dir / "run.lock").read_text() == ""  # released
    assert json.loads((run_dir / "config.json").read_text()) == tiny_config("train.max_steps=12").to_dict()
    steps = [int(p.stem.split("_")[1]) for p in list_checkpoints(run_dir)]
    assert steps == [3, 6, 9, 12]
    valid = read_metrics(run_dir / "metrics.jsonl", "valid")
    assert valid and {"loss", "ppl", "bleu"} <= valid[-1].keys()
    train = read_metrics(run_dir / "metrics.jsonl", "train")
    assert all(r["tgt_tokens_per_update"] > 0 and 0 <= r["padding"] < 1 for r in train)
    # Eq. (3) with d_model 16, warmup 4: lr(step) = 16^-0.5 * min(step^-0.5, step * 4^-1.5)
    for r in train:
        assert r["lr"] == pytest.approx(0.25 * min(r["step"] ** -0.5, r["step"] * 4 ** -1.5))


def test_keep_last_prunes_old_checkpoints(tmp_path):
    quiet_fit(tiny_config("train.max_steps=8", "train.ckpt_every=1", "train.keep_last=3"), tmp_path)
    assert [p.name for p in list_checkpoints(tmp_path)] == [
        "ckpt_00000006.safetensors", "ckpt_00000007.safetensors", "ckpt_00000008.safetensors"]


def mtimes(run_dir) -> dict:
    """Modification times of the run's files, except the lock's holder (every start writes it) and the
    manifest (which records that)."""
    return {p.name: p.stat().st_mtime_ns for p in run_dir.iterdir() if p.name not in ("run.lock", MANIFEST_FILE)}


def test_finished_run_is_not_touched(straight_run):
    run_dir, _ = straight_run
    before = mtimes(run_dir)
    result = quiet_fit(tiny_config("train.max_steps=12"), run_dir)
    assert result.progress.step == 12
    assert mtimes(run_dir) == before


def test_changed_config_is_refused_without_force(straight_run):
    run_dir, _ = straight_run
    before = mtimes(run_dir)
    with pytest.raises(InputError, match=r"model.d_model \(16 -> 32\).*--force"):
        quiet_fit(tiny_config("train.max_steps=12", "model.d_model=32"), run_dir)
    assert mtimes(run_dir) == before


def test_force_restarts_a_run_and_keeps_files_the_user_put_there(tmp_path):
    quiet_fit(tiny_config("train.max_steps=2"), tmp_path)
    (tmp_path / "notes.txt").write_text("mine")
    (tmp_path / "plots").mkdir()
    (tmp_path / "plots" / "my_figure.png").write_text("mine too")
    first = train_losses(tmp_path)
    quiet_fit(tiny_config("train.max_steps=2", "model.d_model=32"), tmp_path, force=True)  # starts over
    assert len(train_losses(tmp_path)) == 2 and train_losses(tmp_path) != first
    assert (tmp_path / "notes.txt").read_text() == "mine"
    assert (tmp_path / "plots" / "my_figure.png").read_text() == "mine too"


def test_reset_optimizer_keeps_weights_and_restarts_adam(straight_run, tmp_path):
    run_dir, straight = straight_run
    cfg = tiny_config("train.max_steps=12")
    model = Transformer(cfg.model.replace(vocab_size=straight.tokenizer.vocab_size),
                        np.random.default_rng(5), backend="numpy")
    optimizer = mt.optim.Adam(list(model.named_parameters()))
    state = checkpointing.TrainState(cfg, model, optimizer, np.random.default_rng(5), straight.tokenizer)
    last = list_checkpoints(run_dir)[-1]
    checkpointing.restore(last, state, reset_optimizer=True)
    assert optimizer.step_count == 0 and all(float(np.abs(m).sum()) == 0 for m in optimizer.m)
    assert state.progress.step == 12
    for (name, a), (_, b) in zip(straight.model.named_parameters(), model.named_parameters()):
        np.testing.assert_array_equal(a.numpy(), b.numpy(), err_msg=name)
    checkpointing.restore(last, state)
    assert optimizer.step_count == 12


def test_checkpoint_with_other_vocabulary_is_refused(straight_run, tmp_path):
    run_dir, straight = straight_run
    from train.data.tokenizer import Tokenizer

    other = Tokenizer.train(["eins zwei drei vier fünf sechs sieben acht neun zehn"] * 20,
                            tmp_path / "other", vocab_size=40)
    with pytest.raises(CheckpointError, match="vocabulary of .* but the tokenizer .*other.model"):
        checkpointing.load_for_inference(list_checkpoints(run_dir)[-1], tokenizer_path=other.model_path)


def test_average_last_writes_mean_of_weights(straight_run, tmp_path):
    run_dir, _ = straight_run
    out, names = checkpointing.average_last(run_dir, 2, tmp_path / "avg.safetensors")
    assert names == [p.name for p in list_checkpoints(run_dir)[-2:]]
    with pytest.raises(InputError, match="exists"):
        checkpointing.average_last(run_dir, 2, out)
    with pytest.raises(InputError, match="fewer than --last 9"):
        checkpointing.average_last(run_dir, 9)
    model, _ = checkpointing.load_for_inference(out, tokenizer_path=run_dir / "tokenizer.model")
    a, _ = checkpointing.load_for_inference(list_checkpoints(run_dir)[-2], run_dir / "tokenizer.model")
    b, _ = checkpointing.load_for_inference(list_checkpoints(run_dir)[-1], run_dir / "tokenizer.model")
    for (name, p), (_, pa), (_, pb) in zip(model.named_parameters(), a.named_parameters(), b.named_parameters()):
        np.testing.assert_allclose(p.numpy(), (pa.numpy().astype(np.float64) + pb.numpy()) / 2,
                                   rtol=1e-6, atol=1e-7, err_msg=name)


def test_average_reads_weights_only_and_defaults_to_the_runs_average_last(straight_run, tmp_path):
    run_dir, _ = straight_run
    copy = tmp_path / "copy"
    copy.mkdir()
    for path in run_dir.iterdir():
        if path.is_file() and not path.name.endswith(".optimizer.safetensors"):  # no optimizer state at all
            (copy / path.name).write_bytes(path.read_bytes())
    out, names = checkpointing.average_last(copy)  # train.average_last = 2 in this run's config.json
    assert out == copy / "averaged_last2.safetensors"
    assert names == ["ckpt_00000009.safetensors", "ckpt_00000012.safetensors"]
    with pytest.raises(InputError, match="nothing: no such directory$"):  # a typo: no advice to resume it
        checkpointing.average_last(tmp_path / "nothing")
    with pytest.raises(InputError, match="empty: not a run directory of this tool"):
        (tmp_path / "empty").mkdir()
        checkpointing.average_last(tmp_path / "empty")


def test_average_with_force_never_replaces_the_runs_config_or_a_checkpoint(straight_run):
    """`average RUN --out RUN/config.json --force` wrote weights over the run's config (it could not resume),
    and `--out RUN/ckpt_N.safetensors --force` over a checkpoint: --out is a .safetensors file, not one of those
    nor any other file `fit` writes there (best, an optimizer file, a name a later checkpoint would take)."""
    run_dir, _ = straight_run
    before = {p.name: p.read_bytes() for p in run_dir.iterdir() if p.is_file()}
    for name, message in (("config.json", "--out must be a .safetensors file"),
                          ("metrics.jsonl", "--out must be a .safetensors file"),
                          ("ckpt_00000012.safetensors", "one of the run's checkpoints"),
                          ("best.safetensors", "a file `fit` writes"),
                          ("ckpt_00000012.optimizer.safetensors", "a file `fit` writes"),
                          ("ckpt_00000099.safetensors", "a file `fit` writes")):
        with pytest.raises(InputError, match=message):
            checkpointing.average_last(run_dir, 2, run_dir / name, force=True)
    assert {p.name: p.read_bytes() for p in run_dir.iterdir() if p.is_file()} == before


def test_early_stopping_and_best_checkpoint_by_validation_bleu(tmp_path, monkeypatch, capsys):
    import train.run.validation as validation_module

    bleus = iter([1.0, 3.0, 2.0, 2.5, 9.0])  # best at the 2nd validation, then 2 without improvement
    monkeypatch.setattr(validation_module, "validate", lambda *args: {
        "loss": 1.0, "nll": 1.0, "ppl": 2.7, "exact_match": 0.0, "bleu": next(bleus), "bleu_sentences": 4})
    config = tiny_config("train.max_steps=10", "train.valid_every=1", "train.ckpt_every=1", "train.keep_last=10",
                         "train.patience=2", "train.best_metric=bleu", "train.valid_bleu_sentences=8")
    result = quiet_fit(config, tmp_path)
    assert result.stopped == "early stopping" and result.progress.step == 4
    assert (result.progress.best_step, result.progress.best_score, result.progress.bad_validations) == (2, 3.0, 2)
    assert list_checkpoints(tmp_path)[-1].name == "ckpt_00000004.safetensors"  # saved where it stopped
    best, best_meta = load_checkpoint(tmp_path / "best.safetensors")
    step2, _ = load_checkpoint(tmp_path / "ckpt_00000002.safetensors")
    assert best.keys() == step2.keys() and all(np.array_equal(best[k], step2[k]) for k in best)  # weights only
    assert best_meta["step"] == 2 and best_meta["valid"]["bleu"] == 3.0
    assert [r["best"] for r in read_metrics(tmp_path / "metrics.jsonl", "valid")] == [True, True, False, False]
    capsys.readouterr()
    again = quiet_fit(config, tmp_path)  # the same command again: the run has ended
    assert again.stopped == "early stopping" and again.progress.step == 4
    assert "already stopped early at step 4" in capsys.readouterr().out


def test_best_and_early_stopping_judge_dev_loss_by_default_and_bleu_only_on_500_sentences(tmp_path, monkeypatch):
    """Early stopping never judges BLEU on a handful of sentences: by default the dev loss decides (every dev
    sentence); BLEU may decide only over a sample of at least 500 sentences (or the whole, smaller, dev set)."""
    import train.run.validation as validation_module

    records = iter([(2.0, 9.0), (1.0, 1.0), (1.5, 30.0), (1.2, 40.0)])  # (loss, BLEU): BLEU would pick the last
    monkeypatch.setattr(validation_module, "validate", lambda *args: dict(
        zip(("loss", "bleu"), next(records)), nll=1.0, ppl=2.7, exact_match=0.0, bleu_sentences=8))
    result = quiet_fit(tiny_config("train.max_steps=10", "train.valid_every=1", "train.patience=2"), tmp_path)
    assert result.stopped == "early stopping" and (result.progress.step, result.progress.best_step) == (4, 2)
    assert load_checkpoint(tmp_path / "best.safetensors")[1]["valid"]["loss"] == 1.0
    with pytest.raises(InputError, match=r"train.best_metric = 'bleu' needs BLEU on at least 500 dev sentences, "
                                         r"but train.valid_bleu_sentences = 20"):
        quiet_fit(tiny_config("task.n_valid=600", "train.best_metric=bleu", "train.valid_bleu_sentences=20"),
                  tmp_path / "bleu")


def test_first_steps_are_logged_before_log_every():
    from train.run.loop import logged_step

    assert [s for s in range(1, 260) if logged_step(s, 100)] == [1, 2, 4, 8, 16, 32, 64, 100, 200]
    assert [s for s in range(1, 6) if logged_step(s, 1)] == [1, 2, 3, 4, 5]


def test_no_mfu_on_a_cpu():
    """A CPU has no trustworthy peak (an estimate gave ~80% MFU); GPUs use their datasheet."""
    from train.run.metrics import mfu, peak_tflops

    assert peak_tflops("cpu", "fp32")[0] is None and mfu(1e12, None) is None
    assert peak_tflops("NVIDIA H100 80GB HBM3", "fp32")[0] == 67.0


def test_files_task_needs_paths(tmp_path):
    with pytest.raises(InputError, match="task.train_src and task.train_tgt must be set"):
        quiet_fit(tiny_config("task.kind=files"), tmp_path)


def test_fp16_needs_cuda(tmp_path):
    with pytest.raises(InputError, match="needs train.backend = 'cuda'"):
        quiet_fit(tiny_config("train.precision=fp16"), tmp_path)


def test_translate_lines_restores_order_and_matches_one_by_one(straight_run):
    from train.evaluate.translate import translate_lines

    _, result = straight_run
    model, tokenizer = result.model, result.tokenizer
    lines = ["one red apple is on the table", "", "there are three hundred twenty-one small green cups "
             "under the stairs", "two balls are in the box"]
    batched = translate_lines(model, tokenizer, lines, beam=2, max_tokens=40)  # several batches
    assert batched[1] == ""
    single = [translate_lines(model, tokenizer, [line], beam=2)[0] if line else "" for line in lines]
    assert batched == single
    with pytest.raises(InputError, match="empty input"):
        translate_lines(model, tokenizer, [])


def test_multi30k_task_resolves_shared_files(tmp_path):
    from train.data.files import shared_data_dir
    from train.data.store import resolve_paths

    if shared_data_dir() is None or not (shared_data_dir() / "multi30k").is_dir():
        pytest.skip("../shared/data/multi30k is not here")
    paths = resolve_paths(config_lib.load(config_lib_path("multi30k")).task, tmp_path)
    assert [p.name for p in paths["train"]] == ["train.en.gz", "train.de.gz"]
    assert [p.name for p in paths["test"]] == ["test_2016_flickr.en.gz", "test_2016_flickr.de.gz"]
    wmt = resolve_paths(config_lib.load(config_lib_path("wmt14_en_de_base"),
                                        ["task.train_src=a.en", "task.train_tgt=a.de"]).task, tmp_path)
    assert wmt["valid"][0].name == "newstest2013.en" and wmt["test"][1].name == "newstest2014.de"  # §6.1


def config_lib_path(name: str):
    from pathlib import Path

    return Path(__file__).resolve().parents[3] / "configs" / f"{name}.toml"


def test_every_pair_once_per_epoch_across_accumulation():
    """§5.1 batches: the loop's batch stream visits every batch once per epoch, in a new order each epoch."""
    from types import SimpleNamespace

    from train.run.checkpointing import Progress
    from train.run.loop import _next_batches

    batches = [np.arange(i * 3, i * 3 + 3) for i in range(7)]  # 21 pairs in 7 batches
    prepared, state = SimpleNamespace(batches=batches), Progress()
    stream = []
    for _ in range(7):  # accum = 3: 21 batches = exactly 3 epochs
        stream += _next_batches(prepared, state, seed=0, count=3)
    epochs = [np.concatenate(stream[i * 7:(i + 1) * 7]) for i in range(3)]
    for pairs in epochs:
        assert sorted(pairs.tolist()) == list(range(21))
    assert epochs[0].tolist() != epochs[1].tolist()  # reshuffled
    assert (state.epoch, state.batch_pos) == (2, 7)


# ------------------------------------------------------------------ metrics
def test_read_metrics_drops_steps_redone_after_resume(tmp_path):
    path = tmp_path / "metrics.jsonl"
    with MetricsWriter(path) as w:
        for step in (1, 2, 3):
            w.write("train", step, loss=float(step))
        w.write("resume", 2)
        w.write("train", 3, loss=30.0)
    with open(path, "a") as f:
        f.write('{"kind": "train", "step": 4, "lo')  # a line cut short by a crash
    assert [(r["step"], r["loss"]) for r in read_metrics(path, "train")] == [(1, 1.0), (2, 2.0), (3, 30.0)]


def test_forward_flops_matches_weight_count():
    """With no attention products (lengths 0), FLOPs = 2 x (weights each token passes through) x tokens."""
    cfg = TransformerConfig.tiny(vocab_size=50, N=2, d_model=32, d_ff=48, h=4)
    model = Transformer(cfg, np.random.default_rng(0))
    shapes = {n: p.shape for n, p in model.named_parameters() if len(p.shape) == 2}
    enc = sum(math.prod(s) for n, s in shapes.items() if n.startswith("encoder."))
    dec = sum(math.prod(s) for n, s in shapes.items() if n.startswith("decoder."))
    out = cfg.d_model * cfg.vocab_size  # the tied output projection (§3.4)
    tokens = 7  # cross-attention K/V run on source tokens, the rest on target tokens: equal counts here
    assert forward_flops(cfg, tokens, tokens, 0, 0) == 2 * tokens * (enc + dec + out)


# ------------------------------------------------------------------ loss scaling
def test_loss_scaler_unscales_skips_and_grows():
    scaler = DynamicLossScaler(init_scale=8.0, growth_interval=2, max_consecutive_overflows=3)
    grad = np.concatenate([np.full(3, 16.0, np.float32), np.full(2, 8.0, np.float32)])
    assert scaler.unscale_and_check(grad)
    np.testing.assert_array_equal(grad, [2, 2, 2, 1, 1])              # unscaled in place
    assert scaler.update(True) and scaler.scale == 8.0
    assert scaler.update(True) and scaler.scale == 16.0  # doubled after 2 good steps
    assert not scaler.unscale_and_check(np.array([1.0, np.inf, np.nan], np.float32))
    assert not scaler.update(False) and scaler.scale == 8.0  # skipped, halved
    assert not scaler.update(False)
    with pytest.raises(LossScaleOverflowError, match="3 steps in a row"):
        scaler.update(False)
    restored = DynamicLossScaler()
    restored.load_state_dict(scaler.state_dict())
    assert restored.state_dict() == scaler.state_dict()
