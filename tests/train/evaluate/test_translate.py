"""`translate` as a user scripts it: files in and out, a line in gives a line out at once, n-best lists."""

import os
import subprocess
import sys
import threading
import warnings
from pathlib import Path

import numpy as np
import pytest

from train.evaluate.translate import translate_in_chunks, translate_lines, translate_stream
from transformer.checkpoint import save_model
from transformer.config import TransformerConfig
from transformer.model import Transformer

ROOT = Path(__file__).resolve().parents[3]
ENV = dict(os.environ, PYTHONPATH=str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", ""))
LINES = ["w1 w2 w3", "", "w7 w8"]


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    """(checkpoint, model, tokenizer): an untrained model with its tokenizer beside it, as in a run directory."""
    from train.data.tokenizer import Tokenizer

    folder = tmp_path_factory.mktemp("run")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        tokenizer = Tokenizer.train([" ".join(f"w{i}" for i in range(200))] * 5, folder / "tokenizer", vocab_size=40)
    config = TransformerConfig.tiny(vocab_size=tokenizer.vocab_size, N=1, d_model=16, d_ff=16, h=2)
    model = Transformer(config, np.random.default_rng(0))
    path = folder / "ckpt_00000001.safetensors"
    save_model(path, model, metadata={"tokenizer_hash": tokenizer.model_hash})
    model.eval()
    return path, model, tokenizer


def cli(*args, stdin: bytes = b"") -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "train", "translate", *args], input=stdin, capture_output=True,
                          cwd=ROOT, env=ENV, timeout=300)


def test_translate_non_utf8_and_empty_stdin(run):
    ckpt, model, tokenizer = run
    done = cli("--ckpt", str(ckpt), "--beam", "1", stdin=b"w1 w2\n\xfe\nw3\n")
    assert done.returncode == 0, done.stderr.decode()
    assert done.stderr.decode().splitlines() == ["warning: <stdin>:2: not valid UTF-8; its output line is empty"]
    assert done.stdout.decode().splitlines() == translate_lines(model, tokenizer, ["w1 w2", "", "w3"], beam=1)
    done = cli("--ckpt", str(ckpt), stdin=b"")
    assert done.returncode == 2 and done.stderr.strip().splitlines() == [
        b"error: <stdin>: empty input, nothing to translate"], done.stderr.decode()


def test_a_bad_line_costs_that_line_only(run, tmp_path):
    """One invalid-UTF-8 line or one 6,695-subword line must not abort a whole translate with nothing
    written: each gives a warning naming its line; every other line is translated."""
    ckpt, model, tokenizer = run
    limit = model.config.max_len - 1
    too_long = " ".join(f"w{i % 200}" for i in range(3 * limit))
    assert len(tokenizer.encode(too_long)) > limit
    source, out = tmp_path / "in.txt", tmp_path / "out.txt"
    source.write_bytes(b"w1 w2 w3\nw4 \xff w5\n" + too_long.encode() + b"\n\nw7 w8\n")
    done = cli("--ckpt", str(ckpt), "--input", str(source), "--output", str(out), "--beam", "1")
    assert done.returncode == 0, done.stderr.decode()
    warnings_seen = done.stderr.decode().splitlines()
    assert warnings_seen[0] == f"warning: {source}:2: not valid UTF-8; its output line is empty"
    assert warnings_seen[1].startswith(f"warning: {source}:3: {len(tokenizer.encode(too_long))} subword tokens, "
                                       f"more than the model's max_len - 1 = {limit}; its output line translates "
                                       f"the first {limit} only")
    cut = tokenizer.processor.decode(tokenizer.encode(too_long)[:limit])
    expected = translate_lines(model, tokenizer, ["w1 w2 w3", "", cut, "", "w7 w8"], beam=1)
    assert out.read_text(encoding="utf-8").splitlines() == expected and len(expected) == 5
    evaluated = subprocess.run([sys.executable, "-m", "train", "evaluate", "--ckpt", str(ckpt), "--src", str(source),
                                "--ref", str(out), "--beam", "1", "--out", str(tmp_path / "hyp.txt")],
                               capture_output=True, cwd=ROOT, env=ENV, timeout=300)
    assert evaluated.returncode == 0, evaluated.stderr.decode()
    assert (tmp_path / "hyp.txt").read_text(encoding="utf-8").splitlines() == expected
    assert "exact match 100.00 %" in evaluated.stdout.decode()  # the references are these very translations


def test_output_is_written_as_it_is_produced(run):
    _, model, tokenizer = run
    lines = [f"w{i} w{i + 1}" for i in range(7)]
    writes = []
    outputs = translate_in_chunks(model, tokenizer, lines, writes.append, chunk=3, beam=1)
    assert [w.count("\n") for w in writes] == [3, 3, 1]  # each chunk's lines as soon as they are done
    assert "".join(writes).splitlines() == outputs == translate_lines(model, tokenizer, lines, beam=1)


def test_input_and_output_files_never_overwrite_without_force(run, tmp_path):
    ckpt, model, tokenizer = run
    source, out = tmp_path / "in.txt", tmp_path / "out.txt"
    source.write_text("".join(line + "\n" for line in LINES), encoding="utf-8")
    done = cli("--ckpt", str(ckpt), "--input", str(source), "--output", str(out), "--beam", "2")
    assert done.returncode == 0, done.stderr.decode()
    expected = translate_lines(model, tokenizer, LINES, beam=2)
    assert out.read_text(encoding="utf-8").splitlines() == expected and expected[1] == ""
    out.write_text("mine")
    refused = cli("--ckpt", str(ckpt), "--input", str(source), "--output", str(out))
    assert refused.returncode == 2 and b"exists; pass --force" in refused.stderr
    assert out.read_text() == "mine"
    forced = cli("--ckpt", str(ckpt), "--input", str(source), "--output", str(out), "--beam", "2", "--force")
    assert forced.returncode == 0 and out.read_text(encoding="utf-8").splitlines() == expected


def test_a_line_in_gives_a_line_out_before_the_input_ends(run):
    ckpt, model, tokenizer = run
    proc = subprocess.Popen([sys.executable, "-m", "train", "translate", "--ckpt", str(ckpt), "--beam", "1"],
                            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, cwd=ROOT, env=ENV)
    got = []

    def read_one_line():
        got.append(proc.stdout.readline().decode("utf-8"))
    try:
        for line in ("w1 w2 w3", ""):
            proc.stdin.write(line.encode() + b"\n")
            proc.stdin.flush()                               # stdin stays open: the program cannot wait for its end
            reader = threading.Thread(target=read_one_line)
            reader.start()
            reader.join(timeout=300)                         # a hang guard only
            assert not reader.is_alive(), "no output line before the input ended"
        proc.stdin.close()
        assert proc.wait(timeout=300) == 0, proc.stderr.read().decode()
        assert proc.stdout.read() == b""
    finally:
        proc.kill()
    assert got == [translate_lines(model, tokenizer, ["w1 w2 w3"], beam=1)[0] + "\n", "\n"]


def test_translate_stream_batches_only_what_has_arrived(run):
    _, model, tokenizer = run
    chunks = [b"w1 w2\nw3", b" w4\n\nw5", b""]  # lines split across reads, the last without a newline
    written = []
    n = translate_stream(model, tokenizer, lambda size: chunks.pop(0), written.append, beam=1)
    lines = "".join(written).splitlines()
    assert n == 4 and lines == translate_lines(model, tokenizer, ["w1 w2", "w3 w4", "", "w5"], beam=1)


def test_nbest_lists_with_scores(run):
    ckpt, model, tokenizer = run
    done = cli("--ckpt", str(ckpt), "--beam", "3", "--nbest", "3", stdin="".join(f"{x}\n" for x in LINES).encode())
    assert done.returncode == 0, done.stderr.decode()
    records = [line.split("\t") for line in done.stdout.decode().splitlines()]
    by_line = {}
    for number, score, text in records:
        by_line.setdefault(int(number), []).append((float(score), text))
    assert sorted(by_line) == [1, 2, 3] and by_line[2] == [(0.0, "")]  # an empty line: one empty record
    best = translate_lines(model, tokenizer, LINES, beam=3)
    for number in (1, 3):
        hyps = by_line[number]
        assert 1 <= len(hyps) <= 3 and hyps[0][1] == best[number - 1]  # the 1-best is what translate prints
        assert [s for s, _ in hyps] == sorted((s for s, _ in hyps), reverse=True) and hyps[0][0] < 0
    refused = cli("--ckpt", str(ckpt), "--beam", "2", "--nbest", "3", stdin=b"w1\n")
    assert refused.returncode == 2 and b"--nbest must be between 1 and --beam (2), got 3" in refused.stderr


def test_progress_callback_counts_every_sentence(run):
    _, model, tokenizer = run
    seen = []
    translate_lines(model, tokenizer, [f"w{i} w{i + 1}" for i in range(30)] + [""], beam=1, max_tokens=20,
                    on_batch=seen.append)
    assert sum(seen) == 30 and len(seen) > 1  # several batches; the empty line is not decoded


def test_threads_share_the_batches_and_change_no_output(run, monkeypatch):
    """With n threads in force, whole batches go to n threads; the outputs and their order are one thread's."""
    from train.evaluate import translate
    from transformer import fast_search

    _, model, tokenizer = run
    lines = [" ".join(f"w{(7 * i + j) % 200}" for j in range(1 + i % 6)) for i in range(40)]
    alone = {beam: translate_lines(model, tokenizer, lines, beam=beam) for beam in (1, 3)}
    callers, decode = set(), fast_search.beam_search

    def recorded(*args, **kwargs):
        callers.add(threading.get_ident())
        return decode(*args, **kwargs)

    monkeypatch.setattr(fast_search, "beam_search", recorded)
    monkeypatch.setattr(translate, "current_threads", lambda: 3)
    seen = []
    assert translate_lines(model, tokenizer, lines, beam=3, on_batch=seen.append) == alone[3]
    assert translate_lines(model, tokenizer, lines, beam=1) == alone[1]
    assert len(callers) > 1 and threading.get_ident() not in callers, "batches decoded on the pool's threads"
    assert sum(seen) == 40 and len(seen) >= 3, "a batch per thread at least, each counted once"


def test_profile_search_runs_the_readable_search_beside_the_fast_one(run, tmp_path):
    """benchmarks/profile_search.py (docs/results.md, "CPU speed"): search.py's Tensor ops run Numba's parallel kernels,
    which must not be entered from several Python threads at once (Numba's workqueue aborts the process);
    translate's per-thread batches are for fast_search.py, so search.py decodes its batches in one thread."""
    ckpt, model, tokenizer = run
    source = tmp_path / "in.txt"
    source.write_text("".join(f"w{i} w{i + 1} w{i + 2}\n" for i in range(60)), encoding="utf-8")
    done = subprocess.run([sys.executable, "benchmarks/profile_search.py", "--ckpt", str(ckpt), "--src", str(source),
                           "--n", "60", "--repeats", "1", "--threads", "2", "--max-len-b", "5"],
                          capture_output=True, cwd=ROOT, env=ENV, timeout=300)
    assert done.returncode == 0, (done.stdout + done.stderr).decode()[-2000:]
    assert "outputs equal on 60/60" in done.stdout.decode()
