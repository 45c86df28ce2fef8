"""What fairseq users expect: `fit --resume RUN_DIR`, settings that may change on resume, `--init-from CKPT`,
`score`, and paper BLEU reported unavailable without sacremoses (training and evaluation go on)."""

import json
import subprocess
import sys
import warnings

import numpy as np
import pytest

from cli_helpers import ENV, ROOT, assert_one_line_error, run_cli
from train import config as config_lib
from train.config import RunConfig
from train.errors import InputError
from train.run.loop import fit
from train.run.metrics import read_metrics
from transformer.checkpoint import load_checkpoint

TINY = ["task.n_train=200", "task.n_valid=8", "task.n_test=8", "tokenizer.vocab_size=80", "model.N=1",
        "model.d_model=16", "model.d_ff=32", "model.h=2", "model.max_len=64", "train.max_tokens=256",
        "train.warmup_steps=4", "train.backend=numpy", "train.log_every=1", "train.valid_every=0",
        "train.valid_bleu_sentences=2", "train.ckpt_every=2", "train.keep_last=3", "train.average_last=2",
        "train.threads=1"]


def fit_args(run_dir, *extra: str) -> list[str]:
    sets = [arg for item in TINY + list(extra) for arg in ("--set", item)]
    return ["fit", "--config", str(ROOT / "configs" / "demo.toml"), "--run-dir", str(run_dir), "--no-progress", *sets]


def ok(result) -> str:
    assert result.returncode == 0, result.stderr.decode()
    return result.stdout.decode()


def test_resume_reads_the_runs_config_and_takes_the_settings_that_may_change(tmp_path):
    run_dir = tmp_path / "run"
    ok(run_cli(*fit_args(run_dir, "train.max_steps=2")))
    out = ok(run_cli("fit", "--resume", str(run_dir), "--no-progress", "--set", "train.max_steps=4",
                     "--set", "train.lr_factor=0.5", "--set", "model.p_drop=0.3"))
    assert "resuming run 'demo'" in out and "restored ckpt_00000002.safetensors" in out and "done: step 4" in out
    assert ("settings changed on resume, applied from the resumed step on: model.p_drop 0.1 -> 0.3, "
            "train.lr_factor 2.0 -> 0.5, train.max_steps 2 -> 4") in out
    resume = [r for r in read_metrics(run_dir / "metrics.jsonl") if r["kind"] == "resume"][-1]
    assert resume["changed"]["train.lr_factor"] == [2.0, 0.5]
    saved = json.loads((run_dir / "config.json").read_text())
    assert saved["train"]["lr_factor"] == 0.5 and saved["model"]["p_drop"] == 0.3
    lrs = {r["step"]: r["lr"] for r in read_metrics(run_dir / "metrics.jsonl", "train")}
    assert lrs[3] == pytest.approx(0.5 * 16 ** -0.5 * min(3 ** -0.5, 3 * 4 ** -1.5))  # §5.3 Eq. (3), new scale
    # the run's own config.json is a config too
    out = ok(run_cli("fit", "--config", str(run_dir / "config.json"), "--run-dir", str(run_dir), "--no-progress",
                     "--set", "train.max_steps=5"))
    assert "restored ckpt_00000004.safetensors" in out and "done: step 5" in out
    refused = run_cli("fit", "--resume", str(run_dir), "--set", "model.d_model=32")
    assert_one_line_error(refused, "this run was started with a different config: model.d_k (8 -> 16), "
                          "model.d_model (16 -> 32)", "those that may change: docs/wmt.md, 'Resuming'")
    assert_one_line_error(run_cli("fit", "--resume", str(tmp_path / "nothing")), "not a run directory")
    assert_one_line_error(run_cli("fit"), "fit needs --config CONFIG", "or --resume RUN_DIR")


def test_a_run_config_with_train_accum_is_refused_with_the_way_on(tmp_path):
    run_dir = tmp_path / "run"
    ok(run_cli(*fit_args(run_dir, "train.max_steps=2")))
    saved = json.loads((run_dir / "config.json").read_text())
    del saved["train"]["tokens_per_update"]
    saved["train"]["accum"] = 2                                  # micro-batches per update, not tokens
    (run_dir / "config.json").write_text(json.dumps(saved))
    (run_dir / "manifest.jsonl").unlink()                        # and no manifest: refused before adoption
    for command in (["fit", "--resume", str(run_dir)], fit_args(run_dir, "train.max_steps=4")):
        assert_one_line_error(run_cli(*command), "started before train.tokens_per_update replaced train.accum "
                              "(accum 2)", f"if it saved any: --init-from {run_dir}/<a ckpt_*.safetensors>")
    assert (run_dir / "ckpt_00000002.safetensors").is_file()     # nothing lost


def quiet_fit(run_dir, *extra, **kwargs):
    config = config_lib.apply_overrides(RunConfig(name="tiny"), TINY + list(extra))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # the tiny corpus lowers the vocabulary size (a warning)
        return fit(config, run_dir, progress=False, **kwargs)


def test_init_from_starts_a_new_run_from_the_weights_and_tokenizer(tmp_path):
    base = quiet_fit(tmp_path / "base", "train.max_steps=4")
    ckpt = tmp_path / "base" / "ckpt_00000004.safetensors"
    tuned_dir = tmp_path / "tuned"
    tuned = quiet_fit(tuned_dir, "train.max_steps=1", "task.seed=7", "tokenizer.vocab_size=60",  # other data
                      "train.warmup_steps=10", "model.p_drop=0.3", init_from=ckpt)
    assert (tuned_dir / "tokenizer.model").read_bytes() == (tmp_path / "base" / "tokenizer.model").read_bytes()
    assert tuned.tokenizer.vocab_size == base.tokenizer.vocab_size  # the checkpoint's tokenizer, not a new one
    assert read_metrics(tuned_dir / "metrics.jsonl", "train")[0]["step"] == 1  # a new run: step 1, fresh Adam
    start = load_checkpoint(ckpt)[0]
    after = dict(tuned.model.named_parameters())
    moved = [n for n in after if not np.array_equal(after[n].numpy(), start[n])]
    assert moved and all(np.abs(after[n].numpy() - start[n]).max() < 0.1 for n in after)  # one step from there
    with pytest.raises(InputError, match=r"--init-from needs the checkpoint's architecture: model.d_model 16 "
                                         r"\(checkpoint\) vs 32 \(config\)"):
        quiet_fit(tmp_path / "other", "train.max_steps=1", "model.d_model=32", init_from=ckpt)
    assert not (tmp_path / "other").exists()  # checked before the run directory is made
    with pytest.raises(InputError, match="checkpoint not found"):
        quiet_fit(tmp_path / "other", "train.max_steps=1", init_from=tmp_path / "base" / "nothing.safetensors")
    assert not (tmp_path / "other").exists()


def test_a_fine_tuning_run_resumes_with_its_given_tokenizer(tmp_path):
    """Ctrl-C in a fine-tuning run, then --resume (or the same call): its data is prepared again with the
    tokenizer it was given, not one trained from config.tokenizer (which the run would refuse as changed data)."""
    quiet_fit(tmp_path / "base", "train.max_steps=4")
    ckpt = tmp_path / "base" / "ckpt_00000004.safetensors"
    tuned_dir = tmp_path / "tuned"
    tuned = ["train.max_steps=2", "task.seed=7", "tokenizer.vocab_size=60"]
    quiet_fit(tuned_dir, *tuned, init_from=ckpt)
    again = quiet_fit(tuned_dir, *tuned[1:], "train.max_steps=4", init_from=ckpt)   # the same call, further
    assert again.progress.step == 4
    assert (tuned_dir / "tokenizer.model").read_bytes() == (tmp_path / "base" / "tokenizer.model").read_bytes()
    out = ok(run_cli("fit", "--resume", str(tuned_dir), "--no-progress", "--set", "train.max_steps=6"))
    assert "restored ckpt_00000004.safetensors" in out and "done: step 6" in out


def test_score_a_file_of_translations(tmp_path):
    hyp, ref = tmp_path / "hyp.de", tmp_path / "ref.de"
    hyp.write_text("Die E-Mail-Adresse war falsch.\nEr kam um 14.30 Uhr an.\n", encoding="utf-8")
    ref.write_text("Die E-Mail-Adresse war leider falsch.\nEr kam um 14.30 Uhr an.\n", encoding="utf-8")
    out = ok(run_cli("score", "--hyp", str(hyp), "--ref", str(ref)))
    assert "sentences   2" in out and "BLEU  " in out and "chrF  " in out and "paper BLEU " in out
    assert "paper-2017: get_ende_bleu.sh as the paper used it" in out
    assert "paper-current:" in ok(run_cli("score", "--hyp", str(hyp), "--ref", str(ref), "--paper-recipe",
                                          "paper-current"))
    ref.write_text("eins\n", encoding="utf-8")
    assert_one_line_error(run_cli("score", "--hyp", str(hyp), "--ref", str(ref)), f"{hyp} has 2 lines",
                          f"{ref} has 1")


WITHOUT_SACREMOSES = "import sys; sys.modules['sacremoses'] = None; from train.__main__ import main; sys.exit(main())"


def test_training_and_evaluate_survive_a_missing_sacremoses(tmp_path, monkeypatch):
    """A machine may lack sacremoses: `fit`'s validation and `evaluate` must not crash in paper_bleu. Both run
    here with `import sacremoses` failing."""
    monkeypatch.setitem(sys.modules, "sacremoses", None)
    result = quiet_fit(tmp_path / "run", "train.max_steps=2", "train.valid_every=1")
    assert result.progress.step == 2 and "bleu" in result.last_valid
    src, ref = tmp_path / "src.en", tmp_path / "ref.de"
    src.write_text("one red apple\ntwo books\n", encoding="utf-8")
    ref.write_text("ein roter Apfel\nzwei Bücher\n", encoding="utf-8")
    done = subprocess.run([sys.executable, "-c", WITHOUT_SACREMOSES, "evaluate", "--ckpt",
                           str(tmp_path / "run" / "ckpt_00000002.safetensors"), "--src", str(src), "--ref", str(ref),
                           "--beam", "1"], capture_output=True, cwd=ROOT, env=ENV, timeout=300)
    out = ok(done)
    assert "BLEU  " in out and "chrF  " in out
    assert ("paper BLEU     n/a  paper-2017: not available: it needs sacremoses, Moses' tokenizer "
            "(pip install sacremoses)") in out
