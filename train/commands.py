"""What each CLI command does (argument parsing lives in train/__main__.py).

The demo: generate the built-in task, train the small model on the CPU
(configs/demo.toml), average the last checkpoints (§6.1), decode the test split
with beam search (beam 4, α 0.6, §6.1), print sacreBLEU and exact match with a
few example translations, and write the plots.
"""

import sys
import time
from pathlib import Path

from train import checkpointing, config as config_lib
from train.data import iter_parallel
from train.errors import InputError
from train.evaluate import corpus_scores


def fit(args) -> int:
    from train.loop import fit as run_fit

    overrides = list(args.set) + ([f"train.backend={args.backend}"] if args.backend else [])
    run_config = config_lib.load(args.config, overrides)
    run_dir = args.run_dir if args.run_dir is not None else Path("runs") / run_config.name
    result = run_fit(run_config, run_dir, force=args.force, reset_optimizer=args.reset_optimizer,
                     progress=not args.no_progress)
    print(f"done: step {result.state.step}; checkpoints in {run_dir}")
    return 0


def _load_for_decoding(args):
    model, tokenizer = checkpointing.load_for_inference(args.ckpt, tokenizer_path=args.tokenizer,
                                                        backend=args.backend)
    return model, tokenizer


def translate(args) -> int:
    from train.translate import read_stdin_lines, translate_lines

    lines = read_stdin_lines(sys.stdin.buffer)
    if not lines:
        raise InputError("<stdin>: empty input, nothing to translate")
    model, tokenizer = _load_for_decoding(args)
    outputs = translate_lines(model, tokenizer, lines, beam=args.beam, alpha=args.alpha,
                              max_len_b=args.max_len_b, max_tokens=args.max_tokens, where="<stdin>")
    sys.stdout.write("".join(line + "\n" for line in outputs))
    return 0


def evaluate(args) -> int:
    from train.translate import translate_lines

    pairs = [(src, ref) for _, src, ref in iter_parallel(args.src, args.ref)]  # checks both files first
    if args.out is not None and args.out.exists():
        raise InputError(f"{args.out}: exists; choose another --out (nothing is overwritten)")
    model, tokenizer = _load_for_decoding(args)
    hyps = translate_lines(model, tokenizer, [s for s, _ in pairs], beam=args.beam, alpha=args.alpha,
                           max_len_b=args.max_len_b, max_tokens=args.max_tokens, where=str(args.src))
    if args.out is not None:
        args.out.write_text("".join(h + "\n" for h in hyps), encoding="utf-8")
    print(corpus_scores(hyps, [r for _, r in pairs]).format())
    return 0


def average(args) -> int:
    out = checkpointing.average_last(args.run_dir, args.last, args.out, force=args.force)
    print(f"wrote {out} (average of the last {args.last} checkpoints, §6.1)")
    return 0


def plot(args) -> int:
    from train.plots import plot_run

    if not (args.run_dir / "metrics.jsonl").is_file():
        raise InputError(f"{args.run_dir}: no metrics.jsonl here; is it a run directory?")
    for path in plot_run(args.run_dir):
        print(f"wrote {path}")
    return 0


def demo(run_dir: Path, overrides: list[str], force: bool, progress: bool, config_path: Path) -> int:
    """The built-in task end to end; prints test BLEU and example translations."""
    from train.loop import fit as run_fit
    from train.plots import attention_for_sentence, plot_run
    from train.translate import translate_ids

    start = time.perf_counter()
    run_config = config_lib.load(config_path, overrides)
    print(f"demo: the built-in English->German number task, config {config_path.name}, run dir {run_dir}")
    result = run_fit(run_config, run_dir, force=force, progress=progress)
    prepared, tokenizer = result.prepared, result.tokenizer
    model = checkpointing.averaged_model(result.model, result.checkpoints, run_config.train.average_last)
    test = prepared.test
    decode = run_config.decode
    print(f"decoding {len(test.src_ids)} test sentences: beam {decode.beam}, alpha {decode.alpha} (§6.1)")
    hyp_ids = translate_ids(model, test.src_ids, beam=decode.beam, alpha=decode.alpha,
                            max_len_b=decode.max_len_b, max_tokens=decode.max_tokens)
    hyps = [tokenizer.decode(h) for h in hyp_ids]
    (run_dir / "test.hyp").write_text("".join(h + "\n" for h in hyps), encoding="utf-8")
    scores = corpus_scores(hyps, test.tgt_text)
    print("examples (source => model | reference):")
    for src, hyp, ref in list(zip(test.src_text, hyps, test.tgt_text))[:5]:
        print(f"  {src}\n    => {hyp}\n     | {ref}")
    plots = plot_run(run_dir)
    plots.append(attention_for_sentence(model, tokenizer, test.src_text[0], hyps[0] or test.tgt_text[0],
                                        run_dir / "plots" / "attention.png"))
    print(f"plots: {', '.join(p.name for p in plots)} in {run_dir / 'plots'}")
    print(scores.format())
    print(f"test BLEU {scores.bleu:.2f} (sacreBLEU), exact match {scores.exact_match:.1f} %, "
          f"total time {time.perf_counter() - start:.0f} s")
    return 0


__all__ = ["fit", "translate", "evaluate", "average", "plot", "demo"]
