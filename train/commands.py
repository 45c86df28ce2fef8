"""What each CLI command does (argument parsing lives in train/__main__.py).

The demo: generate the built-in task, train the small model on the CPU (configs/demo.toml), average the
last checkpoints (§6.1), decode the test split with beam search (beam 4, α 0.6, §6.1), print sacreBLEU and
exact match with a few example translations, and write the plots; stopped by a signal, it stops there."""

import contextlib
import os
import sys
import time
from pathlib import Path

from train import config as config_lib
from train.data.files import iter_lines, output_writer, write_new
from train.data.progress import progress_bar
from train.errors import InputError
from train.evaluate.scores import corpus_scores
from train.run import checkpointing
from train.run.manifest import Manifest
from train.run.run_data import recorded_file
from train.run.run_names import output_in_run
from train.threads import busy_note, cpu_threads, current_threads, decoding_threads
from transformer.checkpoint import CheckpointError


def fit(args) -> int:
    """Train or resume; 0 when done or stopped by SIGINT/SIGTERM (resumable), 3 when the run diverged."""
    from train.distributed import communicators
    from train.run.faults import DivergedError
    from train.run.loop import fit as run_fit
    from train.run.loss_scaler import LossScaleOverflowError

    overrides = (list(args.set) + ([f"train.backend={args.backend}"] if args.backend else [])
                 + ([f"train.patience={args.patience}"] if args.patience is not None else []))
    host = communicators.host_from_launcher()  # MPI first: a rank that fails before MPI_Init hangs the others in it
    exit_codes = {InputError: 2, CheckpointError: 2, DivergedError: 3, LossScaleOverflowError: 3, KeyboardInterrupt: 130}
    try:
        with communicators.abort_on_error(host, exit_codes):  # many ranks: a failure anywhere ends the job
            run_config, run_dir, data_dir = _fit_target(args, overrides)
            train = run_config.train        # under mpiexec: one rank per device; NCCL set-up fails here too
            comm = communicators.for_backend(host, train.backend, train.collective_timeout_s)
            result = run_fit(run_config, run_dir, force=args.force, reset_optimizer=args.reset_optimizer,
                             progress=not args.no_progress, data_dir=data_dir, comm=comm,
                             tensorboard=args.tensorboard, init_from=args.init_from)
    except (DivergedError, LossScaleOverflowError) as err:  # the run, not the input: exit status 3
        if args.debug:
            raise
        print(f"error: {err}", file=sys.stderr)
        return 3
    if comm.rank != 0:
        return 0
    if result.stopped == "early stopping":
        print(f"stopped early at step {result.progress.step}: the best validation is step "
              f"{result.progress.best_step}, in {run_dir / checkpointing.BEST_FILE}")
    elif result.stopped:
        print(f"stopped by {result.stopped} at step {result.progress.step}; to resume, run the same command again "
              f"(or python -m train fit --resume {run_dir})")
    else:
        print(f"done: step {result.progress.step}; checkpoints in {run_dir}")
    return 0


def _fit_target(args, overrides: list[str]):
    """(config, run dir, data dir) of `fit --config X [--run-dir D]` or of `fit --resume RUN_DIR`."""
    from train.run.run_data import resumed_run

    if (args.config is None) == (args.resume is None):
        raise InputError("fit needs --config CONFIG (a new run, or the same command again) or --resume RUN_DIR, "
                         "one of them")
    if args.config is not None:
        run_config = config_lib.load(args.config, overrides)
        return run_config, args.run_dir if args.run_dir is not None else Path("runs") / run_config.name, args.data_dir
    if args.run_dir is not None or args.init_from is not None:
        raise InputError("--resume RUN_DIR is the run directory, and it resumes from its own checkpoints; "
                         "leave out --run-dir and --init-from")
    return resumed_run(args.resume, overrides, args.data_dir)


def prepare(args) -> int:
    """Prepare the data of a config (tokenizer + token ids) into the shared data directory, as `fit` would."""
    import shlex

    from train.data.inputs import read_split
    from train.data.store import prepare_data

    run_config = config_lib.load(args.config, list(args.set))
    data = prepare_data(run_config, args.data_dir, workers=args.workers, progress=not args.no_progress, rebuild=True)
    limit = min(run_config.task.max_len, run_config.model.max_len - 1)
    for split in ("valid", "test"):  # the dev and test files must be readable too, before anyone trains
        if data.paths.get(split):
            read_split(data.paths[split], data.tokenizer, limit, log=lambda message: None)
    stats = data.corpus.stats
    size = sum(p.stat().st_size for p in data.folder.iterdir())
    command = ["python", "-m", "train", "fit", "--config", str(args.config), "--data-dir", str(args.data_dir),
               *[arg for item in args.set for arg in ("--set", item)]]
    print(f"prepared data: {data.folder} ({size / 2**20:.1f} MiB)")
    print(f"  made from   {data.paths['train'][0]} + {data.paths['train'][1]} (sha256 "
          f"{data.files['train_src']['sha256'][:12]}.. + {data.files['train_tgt']['sha256'][:12]}..)")
    print(f"  tokenizer   {data.tokenizer.vocab_size} pieces ({run_config.tokenizer.model_type}), "
          f"{data.manifest['ids_dtype']} ids")
    print(f"  pairs       {stats.n_kept:,} ({stats.n_empty} with an empty side skipped)")
    print(f"  train with  {shlex.join(command)}")
    print("              (the same --config and --set; add --run-dir DIR and any options of fit)")
    return 0


def _check_decoding(args, defaults: dict | None = None, on_stdout: bool = True) -> None:
    """--beam/--alpha left out: the run's tuned choice, else `defaults` (beam 4, α 0.6); then decoding options
    that would silently do something else (beam 0 = greedy) are errors."""
    from train.experiments.tune_decoding import PAPER_DEFAULT, resolve_args

    resolve_args(args, defaults or PAPER_DEFAULT, on_stdout)
    for flag, value in (("--beam", args.beam), ("--max-tokens", args.max_tokens), ("--max-len-b", args.max_len_b),
                        ("--threads", 1 if args.threads is None else args.threads)):
        if value < (0 if flag == "--max-len-b" else 1):
            raise InputError(f"{flag} must be {'0 or more' if flag == '--max-len-b' else 'at least 1'}, got {value}")
    if args.alpha < 0:
        raise InputError(f"--alpha must be 0 or more, got {args.alpha}")
    nbest = getattr(args, "nbest", 0)
    if nbest and not 1 <= nbest <= args.beam:
        raise InputError(f"--nbest must be between 1 and --beam ({args.beam}), got {nbest}")


@contextlib.contextmanager
def _decoding_threads(args, on_stdout: bool = True):
    """A fixed number of CPU threads for decoding (--threads, default train/threads.py's), said on stdout
    (or, where stdout carries the translations, on stderr if a person watches it, as progress bars are)."""
    with cpu_threads(decoding_threads(args.threads)):
        if on_stdout or sys.stderr.isatty():
            said = filter(None, [f"{current_threads()}, each decoding whole batches", busy_note()])
            print(f"CPU threads: {'; '.join(said)}", file=sys.stdout if on_stdout else sys.stderr, flush=True)
        yield


def _progress(total: int, what: str):  # a tqdm bar on a terminal; in a log, a line every 30 s (as prepare's)
    return progress_bar(True, total=total, unit=" sentences", desc=what)


def _load(args):
    return checkpointing.load_for_inference(args.ckpt, tokenizer_path=args.tokenizer, backend=args.backend)


def translate(args) -> int:
    """A file (--input) or stdin, line by line as it arrives; to --output or stdout, written as it is produced."""
    from train.evaluate.translate import read_source, translate_in_chunks, translate_stream

    _check_decoding(args, on_stdout=False)
    lines = read_source(args.input) if args.input is not None else None
    run = output_in_run(args.output, "translate")  # a link: its target's run
    if run is not None:  # --force in a run directory replaces only a file of the run's, and the output is one
        run[0].refuse_if_foreign(run[1])
    model, tokenizer = _load(args)
    options = dict(beam=args.beam, alpha=args.alpha, max_len_b=args.max_len_b, max_tokens=args.max_tokens,
                   nbest=args.nbest, early_stop=args.early_stop)
    with _decoding_threads(args, on_stdout=False), \
            run[0].writing(run[1]) if run is not None else contextlib.nullcontext(), \
            output_writer(args.output, args.force) as write:
        if lines is None:  # a line in, a line out
            stdin = sys.stdin.fileno()
            translate_stream(model, tokenizer, lambda n: os.read(stdin, n), write, **options)
            return 0
        with _progress(len(lines), "translating") as bar:
            translate_in_chunks(model, tokenizer, lines, write, where=str(args.input), on_batch=bar.update, **options)
    return 0


def evaluate(args) -> int:
    """Translate a test set (written to --out as it goes) and score it: sacreBLEU, chrF, paper BLEU."""
    from train.evaluate.translate import read_pairs, translate_in_chunks

    _check_decoding(args)
    sources, refs = read_pairs(args.src, args.ref)
    output_in_run(args.out, "evaluate", new=True)
    model, tokenizer = _load(args)
    with _decoding_threads(args), _progress(len(sources), "translating") as bar, \
            output_writer(args.out, False) if args.out is not None else contextlib.nullcontext(lambda text: None) as write:
        hyps = translate_in_chunks(model, tokenizer, sources, write, beam=args.beam, alpha=args.alpha,
                                   max_len_b=args.max_len_b, max_tokens=args.max_tokens, where=str(args.src),
                                   on_batch=bar.update, early_stop=args.early_stop)
    print(corpus_scores(hyps, refs, paper=args.paper_recipe).format())
    return 0


def tune_decoding(args) -> int:
    """Beam size and α chosen on a dev set (§6.1) and stored with the run (train/experiments/tune_decoding.py)."""
    from train.evaluate.translate import read_pairs
    from train.experiments import tune_decoding as tuning

    sources, refs = read_pairs(args.src, args.ref)
    model, tokenizer = _load(args)
    with _decoding_threads(args):
        return tuning.command(args, model, tokenizer, sources, refs)


def score(args) -> int:
    """Score an existing hypothesis file against references: sacreBLEU, chrF, paper BLEU (no model needed)."""
    from train.evaluate.translate import pair_up

    hyps, refs = ([line for _, line in iter_lines(path)] for path in (args.hyp, args.ref))
    pair_up(args.hyp, hyps, args.ref, refs)
    print(corpus_scores(hyps, refs, paper=args.paper_recipe).format())
    return 0


def average(args) -> int:
    out, names = checkpointing.average_last(args.run_dir, args.last, args.out, force=args.force)
    print(f"wrote {out} (average of the last {len(names)} checkpoints, {names[0]} .. {names[-1]}, §6.1)")
    return 0


def export_tensorboard(args) -> int:
    """metrics.jsonl as a TensorBoard event file (train/run/tensorboard.py), for runs logged without --tensorboard."""
    from train.run.tensorboard import export_run

    folder, count = export_run(args.run_dir, args.out)
    print(f"wrote {count} scalars to {folder}; view with: tensorboard --logdir {folder}")
    return 0


def plot(args) -> int:
    """Curves from metrics.jsonl; with a checkpoint, also the attention of one sentence and its translation."""
    from train.evaluate.translate import translate_lines
    from train.run.plots import attention_for_sentence, plot_run

    if not (args.run_dir / "metrics.jsonl").is_file():
        raise InputError(f"{args.run_dir}: no metrics.jsonl here; is it a run directory?")
    Manifest.load(args.run_dir)  # the figures go into RUN_DIR/plots as the run's files
    written = plot_run(args.run_dir)
    checkpoints = checkpointing.run_checkpoints(args.run_dir)
    sentence = args.sentence
    valid_src = recorded_file(args.run_dir, "valid_src")
    if sentence is None and valid_src is not None and valid_src.is_file():
        sentence = next((line for _, line in iter_lines(valid_src) if line), None)
    if checkpoints and sentence:
        model, tokenizer = checkpointing.load_for_inference(checkpoints[-1])
        translation = translate_lines(model, tokenizer, [sentence], beam=1)[0]
        written.append(attention_for_sentence(model, tokenizer, sentence, translation,
                                              args.run_dir / "plots" / "attention.png"))
    for path in written:
        print(f"wrote {path}")
    return 0


def demo(run_dir: Path, overrides: list[str], force: bool, progress: bool, config_path: Path) -> int:
    """The built-in task end to end; prints test BLEU and example translations."""
    from train.run.loop import fit as run_fit

    start = time.perf_counter()
    run_config = config_lib.load(config_path, overrides)
    print(f"demo: the built-in English->German number task, config {config_path.name}, run dir {run_dir}")
    result = run_fit(run_config, run_dir, force=force, progress=progress)
    if result.stopped not in (None, "early stopping"):  # Ctrl-C, SIGTERM: the checkpoint is written; stop, as fit
        print(f"stopped by {result.stopped} at step {result.progress.step}; to resume, run the same command again")
        return 0
    with cpu_threads(run_config.train.threads):
        _demo_test(run_config, run_dir, result)
    print(f"total time {time.perf_counter() - start:.0f} s")
    return 0


def _demo_test(run_config, run_dir: Path, result) -> None:
    """Decode the test split with the averaged model, print scores and examples, write the plots."""
    from train.evaluate.translate import translate_ids
    from train.run.plots import attention_for_sentence, plot_run

    prepared, tokenizer = result.prepared, result.tokenizer
    last = run_config.train.average_last
    model = checkpointing.averaged_model(result.model, result.checkpoints, last)
    if last > 1 and len(result.checkpoints) > 1:
        names = [p.name for p in result.checkpoints[-last:]]
        print(f"averaged {len(names)} checkpoints, {names[0]} .. {names[-1]} (§6.1)")
    test = prepared.test
    decode = run_config.decode
    print(f"decoding {len(test.src_ids)} test sentences: beam {decode.beam}, alpha {decode.alpha} (§6.1)")
    hyp_ids = translate_ids(model, test.src_ids, beam=decode.beam, alpha=decode.alpha,
                            max_len_b=decode.max_len_b, max_tokens=decode.max_tokens, early_stop=decode.early_stop)
    hyps = [tokenizer.decode(h) for h in hyp_ids]
    Manifest.load(run_dir).write_bytes("test.hyp", "".join(h + "\n" for h in hyps).encode("utf-8"))
    scores = corpus_scores(hyps, test.tgt_text)
    print("examples (source => model | reference):")
    for src, hyp, ref in list(zip(test.src_text, hyps, test.tgt_text))[:5]:
        print(f"  {src}\n    => {hyp}\n     | {ref}")
    plots = plot_run(run_dir)
    plots.append(attention_for_sentence(model, tokenizer, test.src_text[0], hyps[0] or test.tgt_text[0],
                                        run_dir / "plots" / "attention.png"))
    print(f"plots: {', '.join(p.name for p in plots)} in {run_dir / 'plots'}")
    print(scores.format())
    print(f"test BLEU {scores.bleu:.2f} (sacreBLEU), exact match {scores.exact_match:.1f} %")


def bench(args) -> int:
    """Time one training step, ours and the PyTorch peer's in the same run (train/experiments/bench.py);
    with --decode, translation, ours and CTranslate2's (train/experiments/decode_bench.py)."""
    from train.experiments import bench as bench_lib

    if args.decode:
        from train.experiments import decode_bench

        if args.threads < 1 or args.repeats < 0 or args.sentences < 0:
            raise InputError("--threads must be at least 1, --repeats and --sentences 0 (the default) or more")
        decode_bench.run(args.ckpt, args.src, args.models, args.sentences, args.repeats, args.threads,
                         args.demo_dir, args.json)
        return 0
    backend = args.backend
    preset = args.preset or ("base" if backend in ("cuda", "cupy", "gpu") else "cpu")
    bench_lib.run(preset, backend=backend, precision=args.precision, steps=args.steps, warmup=args.warmup,
                  peer=not args.no_peer, batch=args.batch, profile=args.profile, as_json=args.json,
                  host_only=args.host_only)
    return 0


def export(args) -> int:
    """A checkpoint as a CTranslate2 model directory (train/evaluate/export_ct2.py)."""
    from train.evaluate.export_ct2 import export as export_ct2

    output_in_run(args.out, "export")
    model, tokenizer = checkpointing.load_for_inference(args.ckpt, tokenizer_path=args.tokenizer, backend="numpy")
    out = export_ct2(model, tokenizer, args.out)
    print(f"wrote {out} (CTranslate2: ctranslate2.Translator({str(out)!r}); the vocabulary is the tokenizer's "
          f"pieces, so feed it tokenizer.pieces(sentence))")
    return 0


def scale(args) -> int:
    """Project data-parallel training on 1-8 devices from a measured step and all-reduce (train/experiments/scale.py)."""
    from train.experiments import scale_report

    return scale_report.command(args)


def evalb(args) -> int:
    """EVALB's report for TEST against GOLD, printed as evalb prints it; where evalb stops (MAX_ERROR, a line
    it cannot read) the rows before it are printed, and then the one-line error."""
    from train.parsing.evalb import COLLINS, EvalbParams, EvalbStopped, evaluate, read_lines

    params = EvalbParams.read(args.prm) if args.prm else COLLINS
    try:
        evaluate(read_lines(args.gold), read_lines(args.test), params,
                 where=(str(args.gold), str(args.test))).print(args.layout)
    except EvalbStopped as stop:
        stop.report.print(args.layout)
        raise
    return 0


def parse_eval(args) -> int:
    """Parse the gold trees' sentences (§6.3), score with EVALB, and print the right-branching baseline beside."""
    from train.evaluate.translate import translate_lines
    from train.parsing import scoring as parsing
    from train.parsing.evalb import COLLINS, EvalbParams

    _check_decoding(args, defaults={"beam": 21, "alpha": 0.3})
    params = EvalbParams.read(args.prm) if args.prm else COLLINS
    output_in_run(args.out, "parse-eval", new=True)
    gold_path = args.gold
    if gold_path.is_dir():  # a ptb run: the gold trees of the test split it was prepared with
        test_trees = recorded_file(gold_path, "test_tgt")
        if test_trees is None or test_trees.suffix != ".tree":  # a translation run's is test.de, say
            raise InputError(f"{gold_path}: not a ptb run directory (no test split of trees in its prepared.json)")
        gold_path = test_trees.with_suffix(".gold")
    gold = parsing.read_gold(gold_path)
    model, tokenizer = _load(args)
    start = time.perf_counter()
    with _decoding_threads(args), _progress(len(gold), "parsing") as bar:
        outputs = translate_lines(model, tokenizer, [" ".join(tree.words()) for tree in gold], beam=args.beam,
                                  alpha=args.alpha, max_len_b=args.max_len_b, max_tokens=args.max_tokens,
                                  where=str(gold_path), on_batch=bar.update, early_stop=args.early_stop)
    parses, repaired = parsing.parses_from_outputs(outputs, gold)
    print(f"parsed {len(parses)} sentences of {gold_path} in {time.perf_counter() - start:.0f} s (beam {args.beam}, "
          f"α {args.alpha}, at most input + {args.max_len_b} tokens); {repaired} outputs needed repair")
    if args.out is not None:
        try:
            write_new(args.out, "".join(f"{tree}\n" for tree in parses).encode("utf-8"))
        except FileExistsError:  # made while we parsed: it stays
            raise InputError(f"{args.out}: made while parsing; choose another --out (nothing is overwritten)") from None
    reports = {"model": parsing.score(gold, parses, params),
               "right-branching": parsing.score(gold, parsing.baseline(gold), params)}
    print(f"EVALB ({args.prm.name if args.prm else 'COLLINS.prm settings'}) on the same {len(gold)} gold trees, "
          f"gold POS tags on both systems' words (train/parsing/scoring.py says why)")
    print(parsing.compare(reports))
    return 0


def doctor(args) -> int:
    """Versions, devices, and which backends work here (train/doctor.py)."""
    from train.doctor import report

    print(report())
    return 0


def ablate(args) -> int:
    """Table 3's variations of a config, trained (resuming) and set beside the paper (train/experiments/ablate.py)."""
    from train.experiments import ablate as ablate_lib

    return ablate_lib.command(args)


__all__ = ["fit", "prepare", "translate", "evaluate", "score", "average", "export_tensorboard", "plot", "demo", "bench", "tune_decoding",
           "export", "doctor", "ablate", "scale", "evalb", "parse_eval"]
