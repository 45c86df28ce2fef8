"""`python -m train ablate`: Table 3's variations (§6.2) of a run's config, trained and set beside the paper.

    python -m train ablate --grid table3 --config configs/multi30k.toml [--rows A,D] [--steps N] [--list]
    python -m train ablate --grid recipe --config configs/multi30k.toml      warm-up, lr, dropout, vocab, steps

The grid (train/experiments/ablate_grid.py) is the base and every variant of the chosen rows,
scaled to the config by a printed rule; each trains with `train.run.loop.fit` in its own
run directory, with the same step budget and seed. What lands in OUT (default
runs/<grid>-<config name>):

    grid.txt                    the scaling rule and every variant (what --list prints)
    <variant>/                  the variant's run directory (checkpoints, metrics.jsonl, ...)
    results/<variant>.json      the variant's final dev numbers, written atomically once it reached its steps
    table3.md, table3.csv       ours beside the paper, with each side's change from its own base
    table3.png                  that change per variant, ours vs the paper (BLEU points, PPL %)
                                (recipe.md, .csv, .png for --grid recipe, without the paper's columns)

A variant is finished when results/<variant>.json holds its exact config: a rerun skips
it. An unfinished one resumes from its newest checkpoint (fit's resume), so the same
command continues a grid after a kill, Ctrl-C or SIGTERM. A variant whose config equals
an earlier one's (small bases round some sizes together) shares that run.

Dev numbers are fit's final validation (train/run/validation.py `validate`): perplexity over the
whole dev split per subword token of our BPE (Table 3's is per word-piece: compare changes,
not levels), and sacreBLEU on the first train.valid_bleu_sentences sentences.
DEVIATION(§6.2): the paper decodes all of newstest2013 with beam 4, α 0.6; the grid decodes
as train.valid_beam says (greedy by default, to keep the grid cheap). For the paper's
decoding pass --set train.valid_beam=4 --set train.valid_bleu_sentences=100000.
"""
import json
from pathlib import Path

from train import config as config_lib
from train.data.files import write_atomic
from train.errors import InputError
from train.experiments import ablate_report
from train.experiments.ablate_grid import ROWS, Variant, expand, expand_recipe, list_text
from train.run.metrics import MetricsWriter, read_metrics

GRID_FILE = "grid.txt"


def command(args) -> int:
    """The `ablate` subcommand: list the grid, or train it (resuming) and write the table and plot."""
    overrides = list(args.set) + ([f"train.backend={args.backend}"] if args.backend else [])
    run_config = config_lib.load(args.config, overrides)
    if args.grid == "recipe":
        if args.rows is not None:
            raise InputError("--rows picks rows of --grid table3; the recipe grid has none")
        variants = expand_recipe(run_config, args.steps)
    else:
        rows = ROWS if args.rows is None else tuple(r.strip() for r in args.rows.split(",") if r.strip())
        variants = expand(run_config, rows, args.steps)
    text = list_text(run_config, variants, str(args.config))
    print(text, flush=True)
    if args.list:
        return 0
    out = args.out if args.out is not None else Path("runs") / f"{args.grid}-{run_config.name}"
    _check_out_dir(out)
    out.mkdir(parents=True, exist_ok=True)
    write_atomic(out / GRID_FILE, (text + "\n").encode("utf-8"))
    results, stopped = run_grid(variants, out, progress=not args.no_progress)
    written = ablate_report.write(out, variants, results)
    print("\n" + written[0].read_text(encoding="utf-8"))
    if stopped:
        print(f"stopped by {stopped} during variant {stopped_variant(variants, results)}; "
              f"run the same command again to resume")
    print("wrote " + ", ".join(str(p) for p in written))
    return 0


def _check_out_dir(out: Path) -> None:
    """OUT is new, empty, or a grid this command started (it holds grid.txt): nothing else is written into."""
    if out.exists() and not out.is_dir():
        raise InputError(f"{out}: exists and is not a directory; choose another --out")
    if out.is_dir() and any(out.iterdir()) and not (out / GRID_FILE).is_file():
        raise InputError(f"{out}: exists and is not empty but holds no ablation grid ({GRID_FILE}); "
                         f"choose another --out")


def stopped_variant(variants: list[Variant], results: dict) -> str:
    return next((v.id for v in variants if v.id not in results), "?")


# ------------------------------------------------------------------ running the grid
def run_grid(variants: list[Variant], out: Path, progress: bool = True) -> tuple[dict[str, dict], str | None]:
    """Train every unfinished variant in turn; returns ({variant id: result record}, signal that stopped it or None).

    After each variant the table is rewritten, so a long grid can be watched as it goes.
    """
    results: dict[str, dict] = {}
    first_with: dict[str, str] = {}                         # model+train config -> first variant id with it
    for number, variant in enumerate(variants, start=1):
        head = f"[{number}/{len(variants)}] {variant.id} ({variant.paper_label or variant.change or 'base'})"
        key = json.dumps({k: v for k, v in variant.config.to_dict().items() if k != "name"}, sort_keys=True)
        if key in first_with and first_with[key] in results:
            twin = first_with[key]
            results[variant.id] = {**results[twin], "same_as": twin}
            print(f"{head}: same config as {twin}, shares its run", flush=True)
            continue
        first_with.setdefault(key, variant.id)
        record = finished_result(out, variant)
        if record is not None:
            print(f"{head}: finished earlier ({_summary(record)}), skipped", flush=True)
        else:
            print(f"{head}: training {variant.config.train.max_steps} steps in {out / variant.id}", flush=True)
            record, stopped = train_variant(variant, out / variant.id, progress)
            if stopped:
                return results, stopped
            write_atomic(result_path(out, variant), (json.dumps(record, indent=1, sort_keys=True) + "\n").encode())
            print(f"{head}: {_summary(record)}", flush=True)
        results[variant.id] = record
        ablate_report.write(out, variants, results, plot=False)
    return results, None


def result_path(out: Path, variant: Variant) -> Path:
    path = out / "results" / f"{variant.id}.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    return path


def finished_result(out: Path, variant: Variant) -> dict | None:
    """The recorded result of a variant, or None when it has none for exactly this config (steps included)."""
    path = out / "results" / f"{variant.id}.json"
    if not path.is_file():
        return None
    try:
        record = json.loads(path.read_text(encoding="utf-8"))
    except (json.JSONDecodeError, UnicodeDecodeError):
        raise InputError(f"{path}: not a result this command wrote (not JSON); move it away to retrain the "
                         f"variant") from None
    return record if record.get("config") == variant.config.to_dict() else None


def train_variant(variant: Variant, run_dir: Path, progress: bool) -> tuple[dict | None, str | None]:
    """fit() one variant to its steps; (its result record, None), or (None, signal) when a signal stopped it."""
    from train.run.faults import DivergedError
    from train.run.loop import fit
    from train.run.loss_scaler import LossScaleOverflowError

    config = variant.config
    steps = config.train.max_steps
    try:
        result = fit(config, run_dir, progress=progress)
    except (DivergedError, LossScaleOverflowError) as err:     # a finding, not a crash: the grid goes on
        return {"config": config.to_dict(), "status": "diverged", "error": str(err)}, None
    if result.stopped:
        return None, result.stopped
    if result.progress.step != steps:
        raise InputError(f"{run_dir}: this variant was trained to step {result.progress.step}, past "
                         f"--steps {steps}; use another --out for a smaller budget")
    final = [r for r in read_metrics(run_dir / "metrics.jsonl", "valid") if r["step"] == steps]
    valid = final[-1] if final else _validate_final(result, config, run_dir)
    return {"config": config.to_dict(), "status": "done", "steps": steps,
            "params": result.model.num_parameters(), "vocab": result.tokenizer.vocab_size,
            "ppl": valid["ppl"], "nll": valid["nll"], "loss": valid["loss"], "bleu": valid.get("bleu"),
            "bleu_sentences": valid.get("bleu_sentences", 0), "valid_beam": config.train.valid_beam,
            "train_seconds": result.progress.elapsed_s}, None


def _validate_final(result, config, run_dir: Path) -> dict:
    """The final validation of a run killed after its last checkpoint but before validating (fit returns
    at once then): run it on the restored weights and record it as fit would have."""
    from train.run.validation import validate
    from transformer.loss import LabelSmoothingLoss

    model = result.model
    loss_fn = LabelSmoothingLoss(model.config.eps_ls, model.config.pad_id, model.config.impl)   # §5.4
    record = validate(model, loss_fn, result.prepared, config)
    with MetricsWriter(run_dir / "metrics.jsonl") as metrics:
        metrics.write("valid", result.progress.step, **record)
    return record


def _summary(record: dict) -> str:
    if record.get("status") != "done":
        return record.get("status", "?")
    bleu = f", BLEU {record['bleu']:.2f}" if record.get("bleu") is not None else ""
    return f"dev PPL {record['ppl']:.2f}{bleu}, {record['params'] / 1e6:.2f}M params"
