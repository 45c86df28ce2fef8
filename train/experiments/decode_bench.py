"""`python -m train bench --decode`: translation time, ours beside CTranslate2's, same weights, same run (§6.1).

Models (each skipped, with the reason said, when what it needs is missing):
  demo  the built-in demo's trained model (`python -m train` makes runs/demo): its last
        checkpoints averaged as the demo decodes them (§6.1), on its test split
  base  d_model 512, N 6, h 8, d_ff 2048 (Table 3 base) with an 8,000-piece vocabulary trained
        on newstest2012/13/15-17, untrained weights, on newstest2014's English (../shared/data)
  or --ckpt CKPT --src FILE: any checkpoint of ours on any text.

Each model is exported to CTranslate2 (train/evaluate/export_ct2.py) and both decode the
same sentences, greedy and beam 4 (α 0.6), with the same thread count (ours: one batch per
thread, train/evaluate/translate.py; CTranslate2 both ways it has, all threads on one batch at a
time and one batch per thread, the faster of the two each repeat, Intel MKL's products:
_ct2_at_its_best). Ours is `translate_ids`, what `python -m train translate` runs; CTranslate2
runs in a process of its own (in ours, its threads slowed our decoding), timed there.
CTranslate2 gets our batches (length-sorted, the same source-token budget, shared among the
threads) with each batch's length limit as its `max_decoding_length`; an
untrained model never says EOS, so both decode to the limit: CTranslate2 runs more positions,
and the report adds the ratio of wall time per decoder position (the best output's tokens and
EOS, at most the limit; for beam search an estimate). Repeats interleave the two
(ours first on even repeats, CTranslate2 first on odd ones); the report gives the medians of
wall-clock and CPU seconds and their ratios (ours / CTranslate2: below 1, we are faster), the
spread of the per-repeat ratios, and how many greedy outputs are equal (an untrained model's
too, up to our length limit where CTranslate2 went on to its batch's). Beam outputs are not
compared: CTranslate2 ranks by log P / |Y|^α, not GNMT's penalty.
Benchmarks report; they never assert.
"""
from __future__ import annotations

import json
import multiprocessing
import os
import platform
import statistics
import sys
import tempfile
import time
import warnings
from pathlib import Path

import numpy as np

from train.data.files import SHARED_DATA, iter_lines
from train.data.tokenizer import Tokenizer
from train.errors import InputError
from train.evaluate.export_ct2 import ct2_translate, export, vocabulary
from train.evaluate.translate import length_batches, translate_ids
from train.threads import cpu_threads
from transformer.config import TransformerConfig
from transformer.model import Transformer

NEWSTEST = SHARED_DATA / "wmt_newstest"
MAX_TOKENS = 4096          # translate's default source-token budget per batch
BEAMS = (1, 4)


def _demo_model(run_dir: Path):
    """(model, tokenizer, test sentences) of a demo run, averaged as the demo averages (§6.1)."""
    from train.run import checkpointing

    checkpoints = checkpointing.run_checkpoints(run_dir)                  # the run's own, as the demo averages
    record = run_dir / "prepared.json"
    if not checkpoints or not record.is_file():
        return None, f"no trained demo in {run_dir} (run `python -m train` first, ~3 min on a CPU)"
    model, tokenizer = checkpointing.load_for_inference(checkpoints[-1])
    last = json.loads((run_dir / "config.json").read_text())["train"]["average_last"]
    model = checkpointing.averaged_model(model, checkpoints, last)
    test = Path(json.loads(record.read_text(encoding="utf-8"))["files"]["test_src"]["path"])
    return (model, tokenizer, [line for _, line in iter_lines(test)]), None


def _base_model(folder: Path):
    """(untrained base-sized model, its 8k tokenizer, newstest2014 English) or the reason there is none."""
    if not (NEWSTEST / "newstest2014.en").is_file():
        return None, f"{NEWSTEST}: not here (the WMT test sets of ../shared/data)"
    texts = [NEWSTEST / f"newstest{year}.{side}" for year in (2012, 2013, 2015, 2016, 2017) for side in ("en", "de")]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        tokenizer = Tokenizer.train(texts, folder / "tokenizer", vocab_size=8000)
    lines = [line for _, line in iter_lines(NEWSTEST / "newstest2014.en")]
    config = TransformerConfig(vocab_size=tokenizer.vocab_size, max_len=1024, p_drop=0.0)   # Table 3 base
    return (Transformer(config, np.random.default_rng(0), backend="cpu"), tokenizer, lines), None


def _limits(sources, max_len: int, max_len_b: int = 50) -> np.ndarray:
    """search.py's length limit per sentence: source tokens + EOS + max_len_b, at most max_len."""
    return np.minimum(np.array([len(s) + 1 for s in sources]) + max_len_b, max_len)


def _ct2_at_its_best() -> str:
    """CTranslate2's float32 matrix products as fast as its Linux x86-64 wheel can do them: Intel MKL.

    The wheel takes MKL only on Intel CPUs unless CT2_USE_MKL says otherwise; on this project's AMD
    EPYC machine its other path made the demo's greedy decoding ~15x slower (docs/serving.md). A CT2_USE_MKL the user set is kept; CTranslate2 reads it once, at its first
    translator in the process. Returns what the report records.
    """
    if platform.system() == "Linux" and platform.machine() == "x86_64":
        os.environ.setdefault("CT2_USE_MKL", "1")
    return os.environ.get("CT2_USE_MKL", "CTranslate2's default")


def _positions(outputs, limits) -> int:
    """Decoder positions run for these outputs: each output's tokens plus its EOS, at most its limit."""
    return int(sum(min(len(y) + 1, int(limit)) for y, limit in zip(outputs, limits)))


def _timed(fn):
    wall, cpu = time.perf_counter(), time.process_time()
    out = fn()
    return out, time.perf_counter() - wall, time.process_time() - cpu


def _serve_ct2(conn, model_dir: str, threads: int, pieces: list[str]) -> None:
    """The CTranslate2 process: load the model, then decode (batches, limits, beam, layout) requests until None.

    Its two ways to use `threads`: "intra", one batch at a time on all of them (its default), and
    "inter", `threads` batches at once on one thread each (as ours decodes, train/evaluate/translate.py).
    """
    from concurrent.futures import ThreadPoolExecutor

    import ctranslate2

    translators = {"intra": ctranslate2.Translator(model_dir, device="cpu", inter_threads=1, intra_threads=threads),
                   "inter": ctranslate2.Translator(model_dir, device="cpu", inter_threads=threads, intra_threads=1)}
    conn.send("loaded")
    with ThreadPoolExecutor(threads) as pool:
        while (request := conn.recv()) is not None:
            batches, limits, beam, layout = request

            def one(batch_and_limit, translator=translators[layout]):
                return ct2_translate(translator, batch_and_limit[0], pieces, beam=beam, max_length=batch_and_limit[1])
            run = map if layout == "intra" else pool.map                   # translate_batch frees the GIL
            conn.send(_timed(lambda: list(run(one, zip(batches, limits)))))


class _Ct2Process:
    """CTranslate2 in a process of its own: in ours, its OpenMP/MKL threads slowed our decoding 2-10x
    (docs/serving.md). Times are taken in that process, CPU seconds its own."""

    def __init__(self, model_dir: Path, threads: int, pieces: list[str]):
        context = multiprocessing.get_context("spawn")                    # nothing of ours in it
        self.conn, theirs = context.Pipe()
        self.process = context.Process(target=_serve_ct2, args=(theirs, str(model_dir), threads, pieces), daemon=True)
        self.process.start()
        self.conn.recv()

    def decode(self, batches: list[list[list[int]]], limits: list[int], beam: int, layout: str):
        """(outputs per batch, wall seconds, CPU seconds) of CTranslate2 decoding the batches ("intra" or "inter")."""
        self.conn.send((batches, limits, beam, layout))
        return self.conn.recv()

    def close(self) -> None:
        self.conn.send(None)
        self.process.join(timeout=60)


def bench_model(name: str, model, tokenizer, lines: list[str], sentences: int, repeats: int, threads: int,
                say=print) -> dict:
    ids = [s for s in tokenizer.encode_batch(lines[:sentences]) if s]
    limits = _limits(ids, model.config.max_len)
    lengths = [len(s) + 1 for s in ids]
    batches = length_batches(lengths, MAX_TOKENS, threads)             # translate's, for `threads` threads
    sources, batch_limits = [[ids[i] for i in batch] for batch in batches], [int(limits[b].max()) for b in batches]
    ct2_limits = np.empty(len(ids), dtype=np.int64)                       # an untrained model runs to the limit:
    for batch, limit in zip(batches, batch_limits):                       # ours each sentence's, CTranslate2
        ct2_limits[batch] = limit                                         # its batch's (more work)
    pieces = vocabulary(tokenizer)
    ct2_use_mkl = _ct2_at_its_best()
    with tempfile.TemporaryDirectory() as folder:
        ct2 = _Ct2Process(export(model, tokenizer, Path(folder) / "ct2"), threads, pieces)

    def theirs(beam):
        """CTranslate2's faster layout of this repeat: (outputs, wall, CPU), and the wall time of each."""
        tries = {layout: ct2.decode(sources, batch_limits, beam, layout) for layout in ("intra", "inter")}
        per_batch, wall, cpu = min(tries.values(), key=lambda t: t[1])
        outputs = [None] * len(ids)
        for batch, batch_out in zip(batches, per_batch):
            for i, out in zip(batch, batch_out):
                outputs[i] = out
        return outputs, wall, cpu, {layout: t[1] for layout, t in tries.items()}

    result = dict(model=name, sentences=len(ids), threads=threads, repeats=repeats, ct2_use_mkl=ct2_use_mkl,
                  d_model=model.config.d_model, N=model.config.N, vocab=model.config.vocab_size)
    try:
        with cpu_threads(threads):
            for beam in BEAMS:
                ours_one = lambda: translate_ids(model, ids, beam=beam, alpha=0.6)   # noqa: E731
                ours_one(), theirs(beam)                                             # untimed: compiles, warm caches
                runs, layouts = {"ours": [], "ct2": []}, []
                for r in range(repeats):
                    for who in (("ours", "ct2") if r % 2 == 0 else ("ct2", "ours")):
                        if who == "ours":
                            outputs, wall, cpu = _timed(ours_one)
                        else:
                            outputs, wall, cpu, walls = theirs(beam)
                            layouts.append(walls)
                        runs[who].append((wall, cpu, outputs))
                    say(f"  {name} beam {beam} repeat {r + 1}/{repeats}: ours {runs['ours'][-1][0]:.2f} s, "
                        f"CTranslate2 " + ", ".join(f"{layout} {wall:.2f} s" for layout, wall in layouts[-1].items()))
                entry = {"ct2_wall_s_by_layout": {layout: statistics.median(walls[layout] for walls in layouts)
                                                  for layout in layouts[0]}}
                for clock, index in (("wall", 0), ("cpu", 1)):
                    ours_s, ct2_s = [run[index] for run in runs["ours"]], [run[index] for run in runs["ct2"]]
                    ratios = [a / b for a, b in zip(ours_s, ct2_s)]
                    entry.update({f"ours_{clock}_s": statistics.median(ours_s),
                                  f"ct2_{clock}_s": statistics.median(ct2_s),
                                  f"ratio_{clock}": statistics.median(ours_s) / statistics.median(ct2_s),
                                  f"ratio_{clock}_range": [min(ratios), max(ratios)]})
                entry["ours_positions"] = _positions(runs["ours"][0][2], limits)
                entry["ct2_positions"] = _positions(runs["ct2"][0][2], ct2_limits)
                entry["ratio_wall_per_position"] = entry["ratio_wall"] * entry["ct2_positions"] / entry["ours_positions"]
                if beam == 1:                                  # CTranslate2 may go on to its batch's limit
                    ours_out, ct2_out = runs["ours"][0][2], runs["ct2"][0][2]
                    entry["same_outputs"] = sum(a == (b[:limit] if len(a) == limit else b)
                                                for a, b, limit in zip(ours_out, ct2_out, limits))
                result["greedy" if beam == 1 else f"beam{beam}"] = entry
    finally:
        ct2.close()
    return result


def run(ckpt: Path | None = None, src: Path | None = None, models: str = "demo,base", sentences: int = 0,
        repeats: int = 0, threads: int = 2, demo_dir: Path = Path("runs/demo"), as_json: bool = False) -> list[dict]:
    try:
        import ctranslate2  # noqa: F401
    except ImportError:
        raise InputError('bench --decode compares with CTranslate2: pip install -e ".[ct2]"') from None
    say = (lambda message: print(message, file=sys.stderr, flush=True)) if as_json else print
    results = []
    with tempfile.TemporaryDirectory() as folder:
        if ckpt is not None:
            from train.run.checkpointing import load_for_inference

            if src is None:
                raise InputError("--ckpt needs --src: the sentences to translate")
            model, tokenizer = load_for_inference(ckpt)
            wanted = {ckpt.name: ((model, tokenizer, [line for _, line in iter_lines(src)]), None)}
        else:
            names = [name for name in models.split(",") if name]
            unknown = set(names) - {"demo", "base"}
            if unknown:
                raise InputError(f"--models: unknown {', '.join(sorted(unknown))} (choose from demo, base)")
            wanted = {name: _demo_model(demo_dir) if name == "demo" else _base_model(Path(folder)) for name in names}
        for name, (found, reason) in wanted.items():
            if found is None:
                say(f"{name}: skipped: {reason}")
                results.append(dict(model=name, skipped=reason))
                continue
            model, tokenizer, lines = found
            count = sentences or (500 if name == "demo" else 200)
            times = repeats or (9 if name == "demo" else 3)                 # the demo's: a second or so each
            say(f"{name}: d_model {model.config.d_model}, N {model.config.N}, vocab {model.config.vocab_size}, "
                f"{min(count, len(lines))} sentences, {threads} threads each, {times} repeats")
            results.append(bench_model(name, model, tokenizer, lines, count, times, threads, say))
    print(json.dumps(results) if as_json else format_report(results))
    return results


def format_report(results: list[dict]) -> str:
    lines = ["decoding time, ours / CTranslate2 (same weights, same sentences, same run; medians; < 1: ours faster)"]
    for r in results:
        if "skipped" in r:
            lines.append(f"  {r['model']}: skipped ({r['skipped']})")
            continue
        lines.append(f"  {r['model']} (d_model {r['d_model']}, N {r['N']}, vocab {r['vocab']}), {r['sentences']} "
                     f"sentences, {r['threads']} threads, {r['repeats']} repeats, CT2_USE_MKL={r['ct2_use_mkl']}:")
        for key in ("greedy", "beam4"):
            e = r[key]
            same = f", {e['same_outputs']}/{r['sentences']} outputs equal" if "same_outputs" in e else ""
            lines.append(f"    {key:6s} wall {e['ours_wall_s']:7.2f} s / {e['ct2_wall_s']:7.2f} s "
                         f"= {e['ratio_wall']:.2f} "
                         f"(repeats {e['ratio_wall_range'][0]:.2f}-{e['ratio_wall_range'][1]:.2f}); "
                         f"cpu {e['ours_cpu_s']:7.2f} s / {e['ct2_cpu_s']:7.2f} s = {e['ratio_cpu']:.2f}{same}")
            by_layout = ", ".join(f"{layout} {wall:.2f} s" for layout, wall in e["ct2_wall_s_by_layout"].items())
            lines.append(f"           CTranslate2 by layout: {by_layout}; decoder positions {e['ours_positions']} / "
                         f"{e['ct2_positions']}: wall per position {e['ratio_wall_per_position']:.2f}")
    return "\n".join(lines)


__all__ = ["run", "bench_model", "format_report"]
