"""Data preparation at WMT size: time, peak memory and disk of `python -m train prepare`.

Generates a synthetic parallel corpus with WMT14-like sentence lengths (default 1M pairs;
the real WMT14 En-De training set has 4.5M), then runs the same preparation `fit` runs:
content hashes of both files, a shared BPE tokenizer trained on a deterministic sample
(§5.1), and the token ids encoded into memory-mapped arrays by several processes.

    python benchmarks/bench_prepare.py                      # 1M pairs, vocab 37000, in /tmp
    python benchmarks/bench_prepare.py --pairs 4500000 --workers 8 --dir /scratch/bench

Lengths: English words per sentence ~ lognormal (median 20, mean ~23, a tail past 100),
German length = English length x N(1.0, 0.15); words drawn from Zipf-distributed
vocabularies (frequent words short, German ones longer, with umlauts and ß), about 300
bytes per pair as in WMT14 (1.3 GB for 4.5M pairs).
It prints one table (or --json): corpus size, then each phase's wall time, the peak
resident memory of the main process and of its workers, and the prepared data's size on disk.
Run it twice to also see the cost of reusing prepared data (a content-hash check).
No assertions: this is a measurement, not a test.
"""
import argparse
import json
import os
import shutil
import sys
import threading
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from train import config as config_lib  # noqa: E402
from train.config import RunConfig  # noqa: E402
from train.data.files import peak_rss_bytes  # noqa: E402
from train.data.store import prepare_data  # noqa: E402

SYLLABLES_EN = ["ka", "ri", "to", "men", "ste", "an", "ver", "lo", "pa", "di", "con", "tion", "ex", "pre",
                "ing", "al", "er", "ly", "ment", "com", "pro", "ed", "re", "de", "un", "in", "th", "ou"]
SYLLABLES_DE = ["ge", "ung", "keit", "schaft", "ver", "ein", "ü", "ä", "ö", "ß", "lich", "zu", "sch",
                "ber", "tag", "haus", "stra", "en", "er", "nach", "vor", "wirt", "recht", "zeit"]


def make_vocabulary(syllables: list[str], size: int, mean_syllables: float, rng) -> np.ndarray:
    """Word types, the frequent ones short (as in real text: the, der, und), ties in random order."""
    counts = 1 + rng.poisson(mean_syllables - 1, size)
    picks = np.array(syllables)[rng.integers(0, len(syllables), int(counts.sum()))]
    words = np.array(sorted({"".join(picks[end - n:end]) for end, n in zip(np.cumsum(counts), counts)}))
    return words[np.lexsort((rng.random(len(words)), np.char.str_len(words)))]


def zipf_words(vocab: np.ndarray, n: int, rng) -> np.ndarray:
    ranks = rng.zipf(1.18, n)                                   # a heavy-tailed word frequency
    return vocab[(ranks - 1) % len(vocab)]


def write_corpus(src_path: Path, tgt_path: Path, pairs: int, seed: int = 0, chunk: int = 100_000) -> None:
    """`pairs` sentence pairs, one a line, UTF-8, with WMT14-like lengths."""
    rng = np.random.default_rng(seed)
    vocab_en = make_vocabulary(SYLLABLES_EN, 400_000, 2.3, rng)
    vocab_de = make_vocabulary(SYLLABLES_DE, 400_000, 2.6, rng)
    punctuation = np.array([".", ",", "?", "!", ":", "-", '"', "(", ")", "'"])
    with open(src_path, "w", encoding="utf-8") as src, open(tgt_path, "w", encoding="utf-8") as tgt:
        for start in range(0, pairs, chunk):
            n = min(chunk, pairs - start)
            en_len = np.clip(rng.lognormal(np.log(20), 0.55, n).astype(int), 1, 400)
            de_len = np.clip((en_len * rng.normal(1.0, 0.15, n)).astype(int), 1, 400)
            for side, lengths, vocab in ((src, en_len, vocab_en), (tgt, de_len, vocab_de)):
                words = zipf_words(vocab, int(lengths.sum()), rng)
                marks = rng.random(len(words)) < 0.08
                words[marks] = np.char.add(words[marks], rng.choice(punctuation, int(marks.sum())))
                ends = np.cumsum(lengths)
                side.write("".join(" ".join(words[e - k:e]) + ".\n" for e, k in zip(ends, lengths)))


class ChildMemory:
    """Samples the resident memory of this process's children (the encoding workers) twice a second.

    ru_maxrss of RUSAGE_CHILDREN would not do: a child started by fork+exec keeps the parent's
    peak at the fork in its own ru_maxrss, so it reports the parent's peak, not the worker's.
    """

    def __init__(self):
        self.peak, self.done = 0, threading.Event()
        self.thread = threading.Thread(target=self._sample, daemon=True)

    def _sample(self):
        me = os.getpid()
        while not self.done.wait(0.5):
            for status in Path("/proc").glob("[0-9]*/status"):
                try:
                    fields = dict(line.split(":", 1) for line in status.read_text().splitlines() if ":" in line)
                    if int(fields["PPid"]) == me:
                        self.peak = max(self.peak, int(fields["VmRSS"].split()[0]) * 1024)
                except (OSError, KeyError, ValueError):
                    continue

    def __enter__(self):
        self.thread.start()
        return self

    def __exit__(self, *exc):
        self.done.set()
        self.thread.join()


def disk_bytes(folder: Path) -> int:
    return sum(p.stat().st_size for p in folder.rglob("*") if p.is_file())


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--pairs", type=int, default=1_000_000, help="sentence pairs (default 1M)")
    parser.add_argument("--vocab", type=int, default=37_000, help="tokenizer.vocab_size (default 37000, §5.1)")
    parser.add_argument("--workers", type=int, default=0, help="encoding processes (default 0: one per core)")
    parser.add_argument("--dir", type=Path, default=Path("/tmp/bench_prepare"), help="work folder")
    parser.add_argument("--keep", action="store_true", help="keep the prepared data (default: delete it)")
    parser.add_argument("--json", action="store_true", help="print one JSON object")
    args = parser.parse_args()

    args.dir.mkdir(parents=True, exist_ok=True)
    src, tgt = args.dir / f"train{args.pairs}.en", args.dir / f"train{args.pairs}.de"
    generated = 0.0
    if not (src.is_file() and tgt.is_file()):
        start = time.perf_counter()
        write_corpus(src, tgt, args.pairs)
        generated = time.perf_counter() - start
    config = config_lib.apply_overrides(RunConfig(name="bench"), [
        "task.kind=files", f"task.train_src={src}", f"task.train_tgt={tgt}",
        f"task.valid_src={src}", f"task.valid_tgt={tgt}", f"tokenizer.vocab_size={args.vocab}"])
    data_dir = args.dir / "prepared"
    shutil.rmtree(data_dir, ignore_errors=True)
    start = time.perf_counter()
    with ChildMemory() as workers_memory:
        first = prepare_data(config, data_dir, workers=args.workers, log=lambda m: print(m, file=sys.stderr),
                             progress=sys.stderr.isatty())
    first_s = time.perf_counter() - start
    load = os.getloadavg()[0]
    phases = first.manifest["seconds"]
    start = time.perf_counter()
    prepare_data(config, data_dir, workers=args.workers, log=lambda m: None)
    reuse_s = time.perf_counter() - start
    children = workers_memory.peak
    result = {
        "pairs": args.pairs, "corpus_bytes": src.stat().st_size + tgt.stat().st_size,
        "generate_s": generated, **{f"{k}_s": v for k, v in phases.items()}, "prepare_s": first_s,
        "reuse_s": reuse_s, "peak_rss_main_bytes": peak_rss_bytes(), "peak_rss_worker_bytes": children,
        "prepared_bytes": disk_bytes(first.folder), "ids_dtype": str(first.corpus.src_ids.dtype),
        "tokens": int(len(first.corpus.src_ids) + len(first.corpus.tgt_ids)), "workers": first.workers,
        "cores": len(os.sched_getaffinity(0)), "load_average": load,
    }
    if not args.keep:
        shutil.rmtree(data_dir, ignore_errors=True)
    if args.json:
        print(json.dumps(result))
        return
    gib = 2.0 ** 30
    print(f"corpus          {result['pairs']:,} pairs, {result['corpus_bytes'] / gib:.2f} GiB "
          f"(generated in {generated:.0f} s)")
    for name, seconds in phases.items():
        print(f"  {name:<13} {seconds:7.1f} s")
    print(f"prepare total   {first_s:7.1f} s  ({result['workers']} encoding processes; {result['cores']} cores, "
          f"load average {load:.1f} at the end)")
    print(f"reuse           {reuse_s:7.1f} s  (content hash check only)")
    print(f"peak RSS        main {result['peak_rss_main_bytes'] / gib:.2f} GiB, "
          f"largest worker {children / gib:.2f} GiB")
    print(f"prepared data   {result['prepared_bytes'] / gib:.2f} GiB on disk, "
          f"{result['tokens']:,} tokens as {result['ids_dtype']}")


if __name__ == "__main__":
    main()
