"""Beam size and length penalty chosen on the dev set, as the paper chose them (§6.1).

"We used beam search with a beam size of 4 and length penalty α = 0.6. These
hyperparameters were chosen after experimentation on the development set." Those values
fit the paper's big WMT models; a small model's probabilities often favour short outputs,
so beam 4 with α = 0.6 can score below greedy search only through the brevity penalty.
`tune` decodes the dev set once per grid point (greedy, and each beam size with each α),
scores each with sacreBLEU and picks the best; `save_choice` stores it with the run as
`decoding.json`, and `translate`, `evaluate` and `parse-eval` decode with it unless told
otherwise (`resolve`). `command` is `python -m train tune-decoding`.

The score of a finished hypothesis is log P(Y|X) / lp(Y), lp(Y) = ((5 + |Y|) / 6)^α (GNMT,
Wu et al. 2016, which the paper's α refers to): α = 0 ranks by log-probability alone, a
larger α favours longer outputs. Greedy search has no α.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path

from sacrebleu.metrics import BLEU

from train.data.progress import progress_bar
from train.errors import InputError
from train.evaluate.translate import translate_lines
from train.run.manifest import run_containing

DECODING_FILE = "decoding.json"
ALPHAS = (0.0, 0.6, 1.0, 1.5, 2.0)
BEAMS = (4,)
PAPER_DEFAULT = {"beam": 4, "alpha": 0.6}


@dataclass(frozen=True)
class GridPoint:
    """One decoding of the dev set: its settings and sacreBLEU with the brevity penalty's parts."""

    beam: int
    alpha: float | None  # None for greedy (beam 1): no length penalty
    bleu: float
    brevity_penalty: float
    length_ratio: float  # hypothesis tokens / reference tokens (13a), as sacreBLEU counts them

    def label(self) -> str:
        return "greedy" if self.beam == 1 else f"beam {self.beam}, α {self.alpha:g}"


def grid(beams: Sequence[int] = BEAMS, alphas: Sequence[float] = ALPHAS) -> list[tuple[int, float | None]]:
    """(beam, α) pairs to try: greedy first, then each beam size with each α."""
    if any(b < 1 for b in beams) or any(a < 0 for a in alphas) or not alphas:
        raise InputError("beam sizes must be at least 1 and α values 0 or more, with at least one α")
    points: list[tuple[int, float | None]] = [(1, None)]
    points += [(b, float(a)) for b in sorted(set(beams)) if b > 1 for a in sorted(set(alphas))]
    return points


def score(hyps: list[str], refs: list[str]) -> tuple[float, float, float]:
    """(sacreBLEU, brevity penalty, length ratio) of detokenized hypotheses against references."""
    result = BLEU().corpus_score(hyps, [refs])
    return float(result.score), float(result.bp), float(result.sys_len / max(result.ref_len, 1))


def tune(decode: Callable[[int, float | None], list[str]], refs: list[str],
         points: Sequence[tuple[int, float | None]], say: Callable[[str], None] = print) -> list[GridPoint]:
    """Decode with every (beam, α) of `points` (`decode(beam, alpha)` gives the hypotheses) and score each;
    returns the rows in grid order. `best` picks among them."""
    rows = []
    for beam, alpha in points:
        row = GridPoint(beam, alpha, *score(decode(beam, alpha), refs))
        say(f"  {row.label():<20} BLEU {row.bleu:6.2f}   brevity penalty {row.brevity_penalty:.3f}   "
            f"length ratio {row.length_ratio:.3f}")
        rows.append(row)
    return rows


def best(rows: Sequence[GridPoint]) -> GridPoint:
    """The highest dev BLEU; on a tie the cheaper search (smaller beam), then the α nearest the paper's 0.6."""
    return max(rows, key=lambda r: (round(r.bleu, 6), -r.beam, -abs((r.alpha or 0.0) - PAPER_DEFAULT["alpha"])))


def choice_record(rows: Sequence[GridPoint], chosen: GridPoint, ckpt: Path, dev: tuple[Path, Path]) -> dict:
    """What decoding.json holds: the choice, the grid it came from, and what it was measured on."""
    return {"beam": chosen.beam, "alpha": PAPER_DEFAULT["alpha"] if chosen.alpha is None else chosen.alpha,
            "dev_bleu": chosen.bleu, "checkpoint": ckpt.name, "dev_src": str(dev[0]), "dev_ref": str(dev[1]),
            "grid": [asdict(r) for r in rows]}


def save_choice(ckpt: Path, record: dict) -> Path | None:
    """Store the choice as decoding.json of the run `ckpt` lies in (one of the run's files); None when the
    checkpoint is in no run directory."""
    run = run_containing(Path(ckpt).resolve())
    if run is None:
        return None
    manifest, _ = run
    data = (json.dumps(record, indent=1, sort_keys=True) + "\n").encode("utf-8")
    return manifest.write_bytes(DECODING_FILE, data)


def stored_choice(ckpt: Path) -> tuple[dict, Path] | None:
    """(the run's tuned decoding, its file) for a checkpoint in a run directory with a decoding.json of ours."""
    run = run_containing(Path(ckpt).resolve())
    if run is None or not run[0].owns(DECODING_FILE):
        return None
    path = run[0].run_dir / DECODING_FILE
    try:
        record = json.loads(path.read_text(encoding="utf-8"))
        return {"beam": int(record["beam"]), "alpha": float(record["alpha"])}, path
    except (OSError, ValueError, KeyError, TypeError) as err:
        raise InputError(f"{path}: not a decoding choice of `tune-decoding` ({err}); run it again") from None


def resolve(ckpt: Path, beam: int | None, alpha: float | None, defaults: dict = PAPER_DEFAULT) -> tuple[int, float, str]:
    """(beam, α, where they come from): given on the command line > tuned for the checkpoint's run >
    `defaults` (the paper's beam 4, α 0.6 for translation)."""
    if beam is not None and alpha is not None:
        return beam, alpha, "given"
    stored = stored_choice(ckpt)
    choice, source = (stored[0], f"tuned on dev, {stored[1]}") if stored else (defaults, "default")
    return (choice["beam"] if beam is None else beam), (choice["alpha"] if alpha is None else alpha), source


def resolve_args(args, defaults: dict, on_stdout: bool) -> None:
    """Set args.beam / args.alpha that the command line left out (`resolve`) and say where they come from: on
    stdout, or where stdout carries translations on stderr when a person watches it or the choice was tuned."""
    args.beam, args.alpha, source = resolve(args.ckpt, args.beam, args.alpha, defaults)
    if on_stdout or source != "default" or sys.stderr.isatty():
        print(f"decoding: beam {args.beam}, α {args.alpha:g} ({source})", file=sys.stdout if on_stdout else sys.stderr,
              flush=True)


def command(args, model, tokenizer, sources: list[str], refs: list[str]) -> int:
    """Decode the dev set at every grid point, print the scores and the choice, store it with the run."""
    points = grid(args.beams, args.alphas)
    if args.n:
        sources, refs = sources[:args.n], refs[:args.n]
    print(f"decoding {len(sources)} dev sentences of {args.src} at {len(points)} settings (§6.1: \"chosen after "
          f"experimentation on the development set\"); sacreBLEU against {args.ref}")
    with progress_bar(True, total=len(sources) * len(points), unit=" sentences", desc="decoding") as bar:
        def decode(beam, alpha):
            return translate_lines(model, tokenizer, sources, beam=beam, alpha=0.0 if alpha is None else alpha,
                                   max_len_b=args.max_len_b, max_tokens=args.max_tokens, where=str(args.src),
                                   on_batch=bar.update, early_stop=args.early_stop)
        rows = tune(decode, refs, points, say=bar.write)
    chosen, greedy = best(rows), rows[0]
    print(f"best on dev: {chosen.label()}, BLEU {chosen.bleu:.2f} (greedy {greedy.bleu:.2f}; brevity penalty "
          f"{chosen.brevity_penalty:.3f}, greedy's {greedy.brevity_penalty:.3f})")
    record = choice_record(rows, chosen, args.ckpt, (args.src, args.ref))
    stored = None if args.no_save else save_choice(args.ckpt, record)
    if stored is not None:
        print(f"stored in {stored}: translate, evaluate and parse-eval with this run's checkpoints decode with "
              f"beam {record['beam']}, α {record['alpha']:g} unless given --beam/--alpha")
    else:
        print(f"not stored ({'--no-save' if args.no_save else f'{args.ckpt} is in no run directory'}); decode with "
              f"--beam {record['beam']} --alpha {record['alpha']:g}")
    return 0
