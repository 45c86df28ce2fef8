"""The demo (`python -m train`) end to end, shrunk to seconds: data, tokenizer, training, decoding, plots."""

import json
import os
import re
import subprocess
import sys
from pathlib import Path

from train.run.metrics import read_metrics
from transformer.checkpoint import list_checkpoints

ROOT = Path(__file__).resolve().parents[2]
SHRINK = ["task.n_train=1500", "task.n_valid=40", "task.n_test=40", "tokenizer.vocab_size=200",
          "model.N=1", "model.d_model=32", "model.d_ff=64", "train.max_steps=40", "train.max_tokens=1024",
          "train.warmup_steps=20", "train.log_every=10", "train.valid_every=20",
          "train.valid_bleu_sentences=10", "train.ckpt_every=10", "train.keep_last=3", "train.average_last=2"]


def test_shrunken_demo_end_to_end(tmp_path):
    run_dir = tmp_path / "demo"
    args = ["demo", "--run-dir", str(run_dir), "--no-progress"]
    for item in SHRINK:
        args += ["--set", item]
    env = dict(os.environ, PYTHONPATH=str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", ""))
    result = subprocess.run([sys.executable, "-m", "train", *args], capture_output=True, cwd=tmp_path,
                            env=env, timeout=600)                      # a hang guard, not a speed test
    out = result.stdout.decode()
    assert result.returncode == 0, result.stderr.decode()[-2000:]

    assert re.search(r"test BLEU\s+\d+\.\d\d \(sacreBLEU\), exact match", out), out[-1500:]
    assert "nrefs:1|case:mixed" in out  # the sacreBLEU signature is printed
    assert "=>" in out  # example translations
    train = read_metrics(run_dir / "metrics.jsonl", "train")
    assert [r["step"] for r in train] == [1, 2, 4, 8, 10, 20, 30, 40]  # the first steps speak at once
    assert train[-1]["loss"] < train[0]["loss"]  # it learns something even in 40 steps
    assert len(read_metrics(run_dir / "metrics.jsonl", "valid")) == 2  # step 20 and the end
    assert [p.name for p in list_checkpoints(run_dir)] == [
        "ckpt_00000020.safetensors", "ckpt_00000030.safetensors", "ckpt_00000040.safetensors"]
    assert [p.name for p in run_dir.glob("*.optimizer.safetensors")] == ["ckpt_00000040.optimizer.safetensors"]
    assert (run_dir / "best.safetensors").is_file()
    plots = {p.name for p in (run_dir / "plots").iterdir()}
    assert {"loss.png", "perplexity.png", "lr.png", "bleu.png", "tokens_per_s.png", "attention.png"} <= plots
    assert all((run_dir / "plots" / name).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" for name in plots)
    hyps = (run_dir / "test.hyp").read_text(encoding="utf-8").splitlines()
    assert len(hyps) == 40

    # The other commands on the demo's run: translate, evaluate, average, plot.
    def cli(*more: str, stdin: bytes = b"") -> subprocess.CompletedProcess:
        done = subprocess.run([sys.executable, "-m", "train", *more], input=stdin, capture_output=True,
                              cwd=tmp_path, env=env, timeout=300)
        assert done.returncode == 0, done.stderr.decode()[-2000:]
        return done

    last = list_checkpoints(run_dir)[-1]
    lines = ["there are two red apples on the table", "", "one big ball is in the box"]
    translated = cli("translate", "--ckpt", str(last), "--beam", "2", stdin="\n".join(lines).encode() + b"\n")
    outputs = translated.stdout.decode().split("\n")[:-1]
    assert len(outputs) == 3 and outputs[1] == ""  # one line out per line in, empty stays empty
    averaged = tmp_path / "avg.safetensors"
    cli("average", "--last", "2", str(run_dir), "--out", str(averaged))
    files = json.loads((run_dir / "prepared.json").read_text())["files"]
    scored = cli("evaluate", "--ckpt", str(averaged), "--tokenizer", str(run_dir / "tokenizer.model"),
                 "--src", files["test_src"]["path"], "--ref", files["test_tgt"]["path"])
    report = scored.stdout.decode()
    assert "sentences   40" in report and "nrefs:1|case:mixed|eff:no|tok:13a" in report
    assert "chrF" in report and "paper BLEU" in report
    (run_dir / "plots" / "attention.png").unlink()
    plotted = cli("plot", str(run_dir), "--sentence", "there are two red apples on the table").stdout.decode()
    assert "loss.png" in plotted and "attention.png" in plotted
    assert (run_dir / "plots" / "attention.png").is_file()


def test_a_demo_stopped_by_a_signal_says_how_to_resume_and_scores_nothing(tmp_path, monkeypatch, capsys):
    """Ctrl-C during the demo's training stops the demo there (checkpoint written by fit), as it stops `fit`:
    no test BLEU of a half-trained model printed as the demo's result, no test.hyp or plots written."""
    from types import SimpleNamespace

    from train import commands
    from train.__main__ import DEMO_CONFIG

    stopped = SimpleNamespace(stopped="SIGINT", progress=SimpleNamespace(step=166))
    monkeypatch.setattr("train.run.loop.fit", lambda *args, **kwargs: stopped)

    def no_test(*args):
        raise AssertionError("the demo tested a model whose training was stopped")
    monkeypatch.setattr(commands, "_demo_test", no_test)
    assert commands.demo(tmp_path / "demo", [], force=False, progress=False, config_path=DEMO_CONFIG) == 0
    out = capsys.readouterr().out
    assert "stopped by SIGINT at step 166; to resume, run the same command again" in out and "test BLEU" not in out
