"""The search behind configs/multi30k_cpu.toml: the best Multi30k model a CPU trains in a fixed wall-clock budget.

    python benchmarks/multi30k_cpu_search.py [--minutes 30] [--only base,d256] [--out runs/multi30k_cpu_search]
    python benchmarks/multi30k_cpu_search.py --steps 3212 --only base,lr2 --set train.threads=1   # equal updates
    python benchmarks/multi30k_cpu_search.py --list
    python benchmarks/multi30k_cpu_search.py --minutes 0.5 --eval-sentences 20 --only base,lr2 \\
        --set tokenizer.vocab_size=500 --set model.d_model=32 --set model.d_ff=64 --out /tmp/search   # a smoke test

One paper-compatible knob at a time around the config (size, depth, vocabulary, batch, rate, warm-up,
dropout, label smoothing; SEARCH below), each trial trained by `train.run.loop.fit` for as many
updates as fit in --minutes of training time on this machine, with the config's threads. A trial
first trains PROBE_STEPS updates to time one update (the first one, which compiles or loads kernels,
left out), then resumes to the step count that fills the budget, checkpointing at the config's
spacing (train.ckpt_every / train.max_steps of the run); so every trial is an ordinary run that
`fit --set train.max_steps=N` reproduces. Each is scored with greedy decoding, sacreBLEU on val
(the selection) after averaging its last 1, 3 and 5 checkpoints (§6.1: the averaging is searched
too, at no training cost), and on test_2016_flickr with the best of those. Times are training
time (fit's, without data preparation, validation or checkpoint writing); the load average is
recorded, since other programs on the cores slow every trial. Which trial wins says what to put
in configs/multi30k_cpu.toml; beam size and α are then chosen on val by `python -m train tune-decoding`.

OUT/<trial>/ is the trial's run directory; OUT/results/<trial>.json its numbers, written once it is
scored (a rerun skips it, an interrupted trial resumes from its checkpoints); OUT/search.md the table.
"""
from __future__ import annotations

import argparse
import contextlib
import dataclasses
import json
import os
import sys
from pathlib import Path

from train import config as config_lib
from train.data.files import write_atomic
from train.errors import InputError
from train.evaluate.scores import corpus_scores
from train.evaluate.translate import translate_ids
from train.experiments.ablate import finished_result, result_path
from train.experiments.ablate_grid import Variant, count_parameters
from train.run import checkpointing
from train.run.loop import fit
from train.run.metrics import METRICS_FILE, read_metrics
from train.threads import cpu_threads

ROOT = Path(__file__).resolve().parents[1]
PROBE_STEPS = 30
AVERAGES = (1, 3, 5)                           # last K checkpoints averaged (§6.1), K = 1: the last alone

# (trial id, overrides): one change at a time around the config, every one a setting the paper varies
# or states (Table 3's sizes, §5.1 vocabulary and batch, §5.3 rate and warm-up, §5.4 dropout, smoothing).
SEARCH = (
    ("base", ()),
    ("d256", ("model.d_model=256", "model.d_ff=1024")),
    ("d64", ("model.d_model=64", "model.d_ff=256")),
    ("N3", ("model.N=3",)),
    ("N1", ("model.N=1",)),
    ("vocab2000", ("tokenizer.vocab_size=2000",)),
    ("vocab4000", ("tokenizer.vocab_size=4000",)),
    ("vocab16000", ("tokenizer.vocab_size=16000",)),
    ("batch4096", ("train.max_tokens=4096",)),
    ("batch1024", ("train.max_tokens=1024",)),
    ("lr0.5", ("train.lr_factor=0.5",)),
    ("lr2", ("train.lr_factor=2.0",)),
    ("lr3", ("train.lr_factor=3.0",)),
    ("warmup250", ("train.warmup_steps=250",)),
    ("warmup1000", ("train.warmup_steps=1000",)),
    ("pdrop0.2", ("model.p_drop=0.2",)),
    ("pdrop0", ("model.p_drop=0.0",)),
    ("ls0", ("model.eps_ls=0.0",)),
)


def trials(run_config, only: list[str] | None) -> list[Variant]:
    known = [name for name, _ in SEARCH]
    unknown = [name for name in only or () if name not in known]
    if unknown:
        raise InputError(f"--only: unknown trial {unknown[0]!r}; the trials are {', '.join(known)}")
    chosen = []
    for name, changes in SEARCH:
        if only and name not in only:
            continue
        config = config_lib.apply_overrides(run_config, list(changes)).replace(name=f"{run_config.name}-{name}")
        chosen.append(Variant(name, None, config, change=", ".join(changes) or "the config"))
    return chosen


def budget_config(config, steps: int):
    """The trial trained to `steps`, checkpointing at the config's spacing, keeping what AVERAGES needs."""
    train = config.train
    every = max(1, round(steps * train.ckpt_every / train.max_steps))
    return config.replace(train=dataclasses.replace(train, max_steps=steps, ckpt_every=every, valid_every=steps,
                                                    valid_bleu_sentences=0, keep_last=max(AVERAGES),
                                                    average_last=min(train.average_last, max(AVERAGES))))


def seconds_per_update(run_dir: Path) -> float:
    """Training time per update after the first (which compiles or loads kernels), from fit's log."""
    records = read_metrics(run_dir / METRICS_FILE, "train")
    later = [r for r in records if r["step"] > 1]
    return sum(r["seconds"] for r in later) / max(1, records[-1]["step"] - 1)


def train_trial(variant: Variant, run_dir: Path, minutes: float, quiet: bool, steps: int | None = None):
    """fit() the trial for its budget: a probe of PROBE_STEPS updates, then resumed to fill the rest;
    with `steps`, that many updates whatever they take."""
    with contextlib.redirect_stdout(sys.stderr) if quiet else contextlib.nullcontext():
        if steps:
            config = budget_config(variant.config, steps)
            return fit(config, run_dir, progress=not quiet), config
        probe = budget_config(variant.config, PROBE_STEPS)
        result = fit(probe, run_dir, progress=not quiet)
        if result.stopped:
            return result, probe
        steps = max(PROBE_STEPS, int(60 * minutes / seconds_per_update(run_dir)))
        config = budget_config(variant.config, steps)
        return fit(config, run_dir, progress=not quiet), config


def greedy_bleu(model, tokenizer, split, n: int | None) -> float:
    ids = translate_ids(model, split.src_ids[:n], beam=1, max_len_b=50)
    return corpus_scores([tokenizer.decode(h) for h in ids], split.tgt_text[:n], paper=None).bleu


def score_trial(result, config, n: int | None) -> dict:
    """Greedy sacreBLEU on val for each K of AVERAGES, and on test for the best K (§6.1 averaging)."""
    model, prepared, tokenizer = result.model, result.prepared, result.tokenizer
    final = model.state_dict()
    val = {}
    with cpu_threads(config.train.threads):
        for k in AVERAGES:
            if k <= len(result.checkpoints):
                model.load_state_dict(final)
                checkpointing.averaged_model(model, result.checkpoints, k)
                val[k] = round(greedy_bleu(model, tokenizer, prepared.valid, n), 2)
        best = max(val, key=val.get)
        model.load_state_dict(final)
        checkpointing.averaged_model(model, result.checkpoints, best)
        test = round(greedy_bleu(model, tokenizer, prepared.test, n), 2)
    return {"val_bleu": {str(k): v for k, v in val.items()}, "best_average": best, "test_bleu": test}


def run_trials(variants: list[Variant], out: Path, minutes: float, n: int | None, quiet: bool, say,
               base: tuple[Path, list[str]], steps: int | None = None) -> dict:
    """Train and score every unfinished trial; `base`: the config file and --set overrides (for the commands)."""
    results = {}
    for number, variant in enumerate(variants, start=1):
        head = f"[{number}/{len(variants)}] {variant.id} ({variant.change})"
        record = finished_result(out, variant)
        if record is None:
            say(f"{head}: training for {f'{steps} updates' if steps else f'{minutes:g} min'} in {out / variant.id}")
            load_before = os.getloadavg()[0]
            result, config = train_trial(variant, out / variant.id, minutes, quiet, steps)
            if result.stopped:
                say(f"stopped by {result.stopped} during {variant.id}; run the same command again to resume")
                break
            record = {"config": variant.config.to_dict(), "steps": result.progress.step,
                      "train_minutes": result.progress.elapsed_s / 60, "tgt_tokens": result.progress.tokens_seen,
                      "params": count_parameters(variant.config.model.replace(vocab_size=result.tokenizer.vocab_size)),
                      "load_before": load_before, "load_after": os.getloadavg()[0],
                      "command": fit_command(*base, variant, config), **score_trial(result, config, n)}
            write_atomic(result_path(out, variant), (json.dumps(record, indent=1) + "\n").encode("utf-8"))
        results[variant.id] = record
        say(f"{head}: {record['steps']} updates in {record['train_minutes']:.1f} min, val BLEU "
            f"{max(record['val_bleu'].values()):.2f} (last {record['best_average']} averaged), test {record['test_bleu']:.2f}")
    return results


def fit_command(config_path: Path, sets: list[str], variant: Variant, config) -> str:
    budget = {"max_steps": config.train.max_steps, "ckpt_every": config.train.ckpt_every,
              "keep_last": config.train.keep_last}
    changes = sets + [c for c in variant.change.split(", ") if "=" in c] + [f"train.{k}={v}" for k, v in budget.items()]
    return f"python -m train fit --config {config_path} " + " ".join(f"--set {c}" for c in changes)


def table(variants: list[Variant], results: dict) -> str:
    head = ("trial", "change", "params", "updates", "train min", *(f"val avg{k}" for k in AVERAGES), "test", "load")
    rows = [head]
    for v in variants:
        r = results.get(v.id)
        if r is None:
            rows.append((v.id, v.change, *["-"] * (len(head) - 2)))
            continue
        rows.append((v.id, v.change, f"{r['params'] / 1e6:.2f}M", str(r["steps"]), f"{r['train_minutes']:.1f}",
                     *(f"{r['val_bleu'][str(k)]:.2f}" if str(k) in r["val_bleu"] else "-" for k in AVERAGES),
                     f"{r['test_bleu']:.2f}", f"{r['load_before']:.1f}"))
    widths = [max(len(row[i]) for row in rows) for i in range(len(head))]
    lines = ["| " + " | ".join(cell.ljust(w) for cell, w in zip(row, widths)) + " |" for row in rows]
    lines.insert(1, "|" + "|".join("-" * (w + 2) for w in widths) + "|")
    if results:
        best = max(results, key=lambda k: max(results[k]["val_bleu"].values()))
        lines += ["", f"best on val: {best} ({results[best]['command']}, then python -m train average RUN_DIR "
                      f"--last {results[best]['best_average']})"]
    return "\n".join(lines)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter, epilog=__doc__)
    ap.add_argument("--config", type=Path, default=ROOT / "configs" / "multi30k_cpu.toml")
    ap.add_argument("--set", action="append", default=[], metavar="KEY=VALUE", help="override the base config")
    ap.add_argument("--minutes", type=float, default=30.0, help="training time per trial (default 30)")
    ap.add_argument("--steps", type=int, default=0,
                    help="train every trial for this many updates instead of --minutes: for the knobs that leave an "
                         "update's cost as it is (rate, warm-up, dropout, smoothing), equal updates are equal time, "
                         "and the scores do not depend on what else the machine runs")
    ap.add_argument("--only", default=None, help="comma-separated trial ids (default all; see --list)")
    ap.add_argument("--eval-sentences", type=int, default=0, help="score the first N of val and test (default all)")
    ap.add_argument("--out", type=Path, default=Path("runs") / "multi30k_cpu_search")
    ap.add_argument("--list", action="store_true", help="print the trials and train nothing")
    ap.add_argument("--json", action="store_true", help="print one JSON object {trial: result} at the end")
    args = ap.parse_args(argv)
    say = (lambda m: print(m, file=sys.stderr, flush=True)) if args.json else (lambda m: print(m, flush=True))
    try:
        if args.minutes <= 0 or args.steps < 0:
            raise InputError(f"--minutes and --steps must be positive, got {args.minutes} and {args.steps}")
        run_config = config_lib.load(args.config, args.set)
        only = [t.strip() for t in args.only.split(",") if t.strip()] if args.only else None
        variants = trials(run_config, only)
        if args.list:
            for v in variants:
                print(f"{v.id:<12} {v.change}")
            return 0
        results = run_trials(variants, args.out, args.minutes, args.eval_sentences or None, args.json, say,
                              (args.config, args.set), args.steps or None)
    except InputError as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    text = table(variants, results)
    write_atomic(args.out / "search.md", (text + "\n").encode("utf-8"))
    print(json.dumps(results) if args.json else text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
