"""The command line: `python -m train [command] ...` (the project's only CLI).

    python -m train                                   the built-in demo, end to end (CPU, minutes)
    python -m train prepare --config configs/X.toml [--data-dir runs/prepared] [--workers N]
    python -m train fit --config configs/X.toml [--set k=v ...] [--run-dir DIR] [--data-dir DIR] [--force]
                        [--reset-optimizer] [--patience N] [--backend numpy|numba|cupy|cpu|cuda] [--tensorboard]
                        [--init-from CKPT]                        a new run from a model's weights (fine-tuning)
    python -m train fit --resume RUN_DIR [--set k=v ...]          resume from the run's own config.json
    python -m train translate --ckpt CKPT [--beam 4 --alpha 0.6] [--nbest K] < input.txt > output.txt
    python -m train translate --ckpt CKPT --input FILE --output FILE [--force]
    python -m train evaluate --ckpt CKPT --src SRC --ref REF      sacreBLEU + signature, chrF, paper BLEU
    python -m train tune-decoding --ckpt CKPT --src DEV.src --ref DEV.ref   beam and α chosen on dev (§6.1)
    python -m train score --hyp HYP --ref REF                     the same scores for a file of translations
    python -m train average RUN_DIR [--last K] [--out PATH]        §6.1 checkpoint averaging
    python -m train plot RUN_DIR                                   PNG curves (+ attention heat-map)
    python -m train export-tensorboard RUN_DIR                     metrics.jsonl as TensorBoard scalars (fit --tensorboard: live)
    python -m train bench [--backend cpu|numpy|cuda] [--precision fp32|bf16|fp16]   one step, ours vs PyTorch
    python -m train bench --decode [--ckpt CKPT --src FILE]        translation time, ours vs CTranslate2
    python -m train export --format ctranslate2 --ckpt CKPT --out DIR   serve a trained model with CTranslate2
    python -m train scale [--backend cpu|cuda] [--step-ms MS] [--gpu H100] [--nodes 2] [--validate]   GPU projection
    python -m train doctor                                         versions, devices, backends
    python -m train ablate --grid table3 --config configs/X.toml [--rows A,D] [--steps N] [--list]
                                                                   Table 3's variations, ours beside the paper
    python -m train evalb GOLD TEST [--prm COLLINS.prm] [--layout 1997]   EVALB bracket scores (§6.3)
    python -m train parse-eval --ckpt CKPT --gold GOLD             parse, EVALB, right-branching baseline

Problems with your input (files, configs, checkpoints) print one line,
`error: <file>:<line>: what is wrong`, and exit with status 2, as does a
write the disk refuses (full, over quota, read-only: the file and the free
space); `--debug` shows the full traceback instead. A run that diverges (non-finite loss or
gradient) exits with status 3; SIGINT/SIGTERM stop `fit` after the current
update with a checkpoint and status 0 (run the same command to resume).
"""

import argparse
import sys
import warnings
from pathlib import Path

from train.errors import InputError, disk_error
from transformer.checkpoint import CheckpointError

REPO_ROOT = Path(__file__).resolve().parents[1]
DEMO_CONFIG = REPO_ROOT / "configs" / "demo.toml"
BACKENDS = ("numpy", "numba", "cupy", "cpu", "cuda", "gpu")  # minitensor's (cpu = numba, cuda = gpu = cupy)


def _add_debug(parser: argparse.ArgumentParser, default=argparse.SUPPRESS) -> None:
    parser.add_argument("--debug", action="store_true", default=default,
                        help="show full tracebacks instead of one-line errors")


def _add_search(parser: argparse.ArgumentParser, beam: int = 4, alpha: float = 0.6, section: str = "§6.1") -> None:
    parser.add_argument("--beam", type=int, default=None,
                        help=f"beam size; 1 = greedy (default: the run's choice of tune-decoding, else {beam}, {section})")
    parser.add_argument("--alpha", type=float, default=None,
                        help=f"length penalty α (default: the run's choice of tune-decoding, else {alpha}, {section})")


def _add_decoding(parser: argparse.ArgumentParser, max_len_b: int = 50, section: str = "§6.1") -> None:
    parser.add_argument("--max-len-b", type=int, default=max_len_b,
                        help=f"longest output = source length + this (default {max_len_b}, {section})")
    parser.add_argument("--max-tokens", type=int, default=4096, help="source tokens per decoding batch (default 4096)")
    parser.add_argument("--early-stop", action="store_true",
                        help="stop a sentence's beam search once --beam hypotheses have finished (faster; by default "
                             "it goes on while a live hypothesis can still win, as tensor2tensor does)")
    parser.add_argument("--tokenizer", type=Path, default=None,
                        help="tokenizer.model (default: the one in the checkpoint's run directory)")
    parser.add_argument("--backend", default="cpu", choices=BACKENDS, metavar="BACKEND",
                        help="numpy, numba, cupy, cpu or cuda (default cpu)")
    parser.add_argument("--threads", type=int, default=None,
                        help="CPU threads, each decoding whole batches (default 4, at most the cores this process "
                             "may use; printed on stderr)")


def _add_paper_recipe(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--paper-recipe", choices=["paper-2017", "paper-current"], default="paper-2017",
                        help="paper BLEU as tensor2tensor's get_ende_bleu.sh computed it for the paper (paper-2017, "
                             "the default) or as it does today (paper-current: unicode punctuation normalised first)")


def _numbers(kind):
    """A comma-separated list of numbers, e.g. 0,0.6,1.5."""
    def parse(text: str) -> list:
        try:
            return [kind(item) for item in text.split(",") if item.strip()]
        except ValueError:
            raise argparse.ArgumentTypeError(f"expected numbers separated by commas, got {text!r}") from None
    return parse


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m train", formatter_class=argparse.RawDescriptionHelpFormatter,
        description="Train and use a Transformer (Vaswani et al. 2017). With no command: run the demo.",
        epilog="Run `python -m train COMMAND --help` for each command's options.")
    _add_debug(parser, default=False)
    commands = parser.add_subparsers(dest="command", metavar="COMMAND")

    demo = commands.add_parser("demo", help="the built-in task end to end (also: no command at all)")
    demo.add_argument("--run-dir", type=Path, default=Path("runs/demo"), help="default runs/demo")
    demo.add_argument("--set", action="append", default=[], metavar="KEY=VALUE",
                      help="override a config value, e.g. train.max_steps=200 (repeatable)")
    demo.add_argument("--force", action="store_true", help="start over in an existing run directory")
    demo.add_argument("--no-progress", action="store_true", help="no progress bar")
    _add_debug(demo)

    prepare = commands.add_parser(
        "prepare", help="train the tokenizer and encode the corpus into the shared data directory (fit does it too)")
    prepare.add_argument("--config", type=Path, required=True, help="TOML run config, e.g. configs/demo.toml")
    prepare.add_argument("--set", action="append", default=[], metavar="KEY=VALUE",
                         help="override a config value, e.g. task.train_src=/data/train.en (repeatable)")
    prepare.add_argument("--data-dir", type=Path, default=Path("runs/prepared"),
                         help="where prepared data lives, shared by runs (default runs/prepared: the one `fit` "
                              "uses for run directories in runs/)")
    prepare.add_argument("--workers", type=int, default=0,
                         help="encoding processes (default 0: one per core for a large corpus)")
    prepare.add_argument("--no-progress", action="store_true",
                         help="no progress (by default a bar on a terminal, a line every 30 s in a log)")
    _add_debug(prepare)

    fit = commands.add_parser("fit", help="train (or resume) a run from a TOML config")
    fit.add_argument("--config", type=Path, default=None, help="TOML run config, e.g. configs/demo.toml")
    fit.add_argument("--resume", type=Path, default=None, metavar="RUN_DIR",
                     help="resume RUN_DIR with its own config.json and prepared data, instead of --config "
                          "(--set may change the settings docs/wmt.md 'Resuming' lists, e.g. train.lr_factor)")
    fit.add_argument("--set", action="append", default=[], metavar="KEY=VALUE",
                     help="override a config value, e.g. model.d_model=256 (repeatable)")
    fit.add_argument("--run-dir", type=Path, default=None, help="default runs/<config name>")
    fit.add_argument("--data-dir", type=Path, default=None,
                     help="prepared data, shared by runs (default: prepared/ beside the run directory)")
    fit.add_argument("--force", action="store_true",
                     help="start over: delete the files this tool wrote in the run dir (its manifest lists them; "
                          "never anything else)")
    fit.add_argument("--init-from", type=Path, default=None, metavar="CKPT",
                     help="start a new run from this model file's weights and tokenizer (fine-tuning; Adam and "
                          "the schedule start afresh)")
    fit.add_argument("--patience", type=int, default=None, metavar="N",
                     help="stop after N validations without a better train.best_metric (dev loss by default; "
                          "sets train.patience)")
    fit.add_argument("--reset-optimizer", action="store_true",
                     help="resume the weights but start Adam (moments, step, warm-up) afresh")
    fit.add_argument("--backend", default=None, help="numpy, numba, cupy, cpu or cuda (overrides train.backend)")
    fit.add_argument("--no-progress", action="store_true", help="no progress bar")
    fit.add_argument("--tensorboard", action="store_true",
                     help='also log every metric live to RUN_DIR/tensorboard (needs pip install -e ".[tb]")')
    _add_debug(fit)

    translate = commands.add_parser(
        "translate", help="translate one sentence a line: stdin to stdout as lines arrive, or --input to --output")
    translate.add_argument("--ckpt", type=Path, required=True, help="a checkpoint (.safetensors)")
    translate.add_argument("--input", type=Path, default=None, help="read this file (default: stdin, line by line)")
    translate.add_argument("--output", type=Path, default=None,
                           help="write this file (default: stdout); lines go to OUTPUT.tmp-<pid> as they are done, "
                                "renamed to OUTPUT once all are")
    translate.add_argument("--force", action="store_true", help="overwrite --output if it exists")
    translate.add_argument("--nbest", type=int, default=0, metavar="K",
                           help="the K best translations of each line, as LINE<TAB>SCORE<TAB>TEXT (K <= --beam)")
    _add_search(translate)
    _add_decoding(translate)
    _add_debug(translate)

    evaluate = commands.add_parser("evaluate", help="translate a test set and score it (sacreBLEU, chrF)")
    evaluate.add_argument("--ckpt", type=Path, required=True, help="a checkpoint (.safetensors)")
    evaluate.add_argument("--src", type=Path, required=True, help="source sentences, one a line")
    evaluate.add_argument("--ref", type=Path, required=True, help="reference translations, line by line")
    evaluate.add_argument("--out", type=Path, default=None,
                          help="also write the translations here (a new file; lines go to OUT.tmp-<pid> as they are "
                               "done, renamed to OUT once all are)")
    _add_paper_recipe(evaluate)
    _add_search(evaluate)
    _add_decoding(evaluate)
    _add_debug(evaluate)

    tune = commands.add_parser(
        "tune-decoding", help="choose beam size and length penalty α on a dev set (§6.1) and store the choice "
                              "with the run: translate, evaluate and parse-eval then use it")
    tune.add_argument("--ckpt", type=Path, required=True, help="a checkpoint (.safetensors), e.g. an averaged one")
    tune.add_argument("--src", type=Path, required=True, help="dev source sentences, one a line")
    tune.add_argument("--ref", type=Path, required=True, help="dev reference translations, line by line")
    tune.add_argument("--beams", type=_numbers(int), default=[4], metavar="B,B,...",
                      help="beam sizes to try beside greedy (default 4)")
    tune.add_argument("--alphas", type=_numbers(float), default=[0.0, 0.6, 1.0, 1.5, 2.0], metavar="A,A,...",
                      help="length penalties α to try with each beam size (default 0,0.6,1,1.5,2)")
    tune.add_argument("--n", type=int, default=0, help="only the first N dev sentences (default 0: all)")
    tune.add_argument("--no-save", action="store_true", help="print the choice, store nothing")
    _add_decoding(tune)
    _add_debug(tune)

    score = commands.add_parser("score", help="score a file of translations: sacreBLEU, chrF, paper BLEU")
    score.add_argument("--hyp", type=Path, required=True, help="translations, one a line")
    score.add_argument("--ref", type=Path, required=True, help="reference translations, line by line")
    _add_paper_recipe(score)
    _add_debug(score)

    average = commands.add_parser("average", help="average the last K checkpoints of a run (§6.1)")
    average.add_argument("run_dir", type=Path, metavar="RUN_DIR", help="a run directory of `fit`, e.g. runs/demo")
    average.add_argument("--last", type=int, default=None, metavar="K",
                         help="how many of the run's newest checkpoints (default: its train.average_last; "
                              "base 5, big 20, §6.1)")
    average.add_argument("--out", type=Path, default=None, help="default RUN_DIR/averaged_last<K>.safetensors")
    average.add_argument("--force", action="store_true", help="overwrite --out if it exists")
    _add_debug(average)

    plot = commands.add_parser("plot", help="write PNG curves and an attention heat-map (RUN_DIR/plots)")
    plot.add_argument("run_dir", type=Path, metavar="RUN_DIR", help="a run directory of `fit`, e.g. runs/demo")
    plot.add_argument("--sentence", default=None,
                      help="source sentence for the attention heat-map (default: the first validation sentence)")
    _add_debug(plot)

    tensorboard = commands.add_parser("export-tensorboard",
                                      help="write RUN_DIR/metrics.jsonl as a TensorBoard event file")
    tensorboard.add_argument("run_dir", type=Path, metavar="RUN_DIR",
                             help="a run directory of `fit`, e.g. runs/demo")
    tensorboard.add_argument("--out", type=Path, default=None, help="folder for the event file "
                                                                     "(default RUN_DIR/tensorboard-export)")
    _add_debug(tensorboard)

    evalb = commands.add_parser("evalb", help="score trees against gold trees exactly as EVALB does (§6.3)")
    evalb.add_argument("gold", type=Path, metavar="GOLD", help="gold trees, one a line")
    evalb.add_argument("test", type=Path, metavar="TEST", help="trees to score, one a line, line by line with GOLD")
    evalb.add_argument("--prm", type=Path, default=None,
                       help="EVALB parameter file, e.g. COLLINS.prm (default: COLLINS.prm's settings)")
    evalb.add_argument("--layout", choices=("2006", "1997"), default="2006",
                       help="2006 (default): what the current evalb.c prints (Words 0 on rows it did not compare, "
                            "an F-measure line, -nan for 0/0); 1997: the layout of EVALB's sample.rsl (gold word "
                            "counts on those rows, no F-measure line, sentences without crossings in the totals)")
    _add_debug(evalb)

    parse_eval = commands.add_parser("parse-eval", help="parse gold trees' sentences (§6.3) and score them "
                                                        "with EVALB beside a right-branching baseline")
    parse_eval.add_argument("--ckpt", type=Path, required=True, help="a parsing checkpoint (.safetensors)")
    parse_eval.add_argument("--gold", type=Path, required=True,
                            help="gold trees: a .mrg file, one tree a line, or a ptb run directory (the test split it "
                                 "was prepared with)")
    parse_eval.add_argument("--prm", type=Path, default=None,
                            help="EVALB parameter file (default: COLLINS.prm's settings)")
    parse_eval.add_argument("--out", type=Path, default=None,
                            help="also write the parsed trees here, one a line (for `python -m train evalb`)")
    _add_search(parse_eval, beam=21, alpha=0.3, section="§6.3")
    _add_decoding(parse_eval, max_len_b=300, section="§6.3")
    _add_debug(parse_eval)

    doctor = commands.add_parser("doctor", help="versions, devices, and which backends work here")
    _add_debug(doctor)

    bench = commands.add_parser("bench", help="time one training step, and the PyTorch peer in the same run")
    bench.add_argument("--preset", choices=["cpu", "multi30k_cpu", "base"], default=None,
                       help="cpu: d_model 256, 3+3 layers, 64×32 tokens; multi30k_cpu: configs/multi30k_cpu.toml's "
                            "model, 128×16 tokens; base: Table 3 base, 250×100 tokens "
                            "(default: base with --backend cuda, cpu otherwise)")
    bench.add_argument("--backend", default="cpu", choices=BACKENDS, metavar="BACKEND",
                       help="cpu (Numba), numpy (reference) or cuda (default cpu)")
    bench.add_argument("--precision", choices=["fp32", "bf16", "fp16"], default="fp32",
                       help="bf16 / fp16 = mixed precision (cuda; fp16 with loss scaling): the peer then uses bf16 "
                            "autocast; with fp32 the peer runs in fp32 and in TF32")
    bench.add_argument("--steps", type=int, default=5, help="timed steps (default 5)")
    bench.add_argument("--warmup", type=int, default=2, help="untimed steps after the first (default 2)")
    bench.add_argument("--batch", type=int, default=None, help="sentences per batch (default: the preset's)")
    bench.add_argument("--no-peer", action="store_true", help="do not run the PyTorch peer")
    bench.add_argument("--profile", action="store_true", default=None,
                       help="time each Function (synchronizing after each op on a GPU); on by default on the CPU")
    bench.add_argument("--json", action="store_true", help="print one JSON object (step_ms, tgt_tok_s, "
                                                            "peak_mem_bytes, peer_step_ms, ratio, ...)")
    bench.add_argument("--host-only", action="store_true",
                       help="with --backend cuda: time the step's Python at full size with every device call "
                            "recorded and none made (no GPU needed): host ms, launches, GB and TFLOP per step")
    decode = bench.add_argument_group("--decode: translation time, ours beside CTranslate2 (train/experiments/"
                                      "decode_bench.py; needs pip install -e \".[ct2]\")")
    decode.add_argument("--decode", action="store_true",
                        help="time greedy and beam-4 translation, ours and CTranslate2's, on the same weights")
    decode.add_argument("--models", default="demo,base",
                        help="demo (the trained runs/demo) and/or base (d_model 512, N 6, untrained, newstest2014) "
                             "(default demo,base)")
    decode.add_argument("--ckpt", type=Path, default=None, help="instead of --models: this checkpoint ...")
    decode.add_argument("--src", type=Path, default=None, help="... on these sentences, one a line")
    decode.add_argument("--demo-dir", type=Path, default=Path("runs/demo"), help="the demo run (default runs/demo)")
    decode.add_argument("--sentences", type=int, default=0, help="first N sentences (default: demo 500, base 200)")
    decode.add_argument("--repeats", type=int, default=0,
                        help="timed repeats of each, interleaved (default: demo 9, its repeats are short; else 3)")
    decode.add_argument("--threads", type=int, default=2, help="threads for each system (default 2)")
    _add_debug(bench)

    export = commands.add_parser("export", help="write a checkpoint as a CTranslate2 model (serving a trained model)")
    export.add_argument("--format", choices=["ctranslate2"], required=True, help="ctranslate2 (the only one)")
    export.add_argument("--ckpt", type=Path, required=True, help="a checkpoint (.safetensors)")
    export.add_argument("--out", type=Path, required=True, help="a new directory for the model")
    export.add_argument("--tokenizer", type=Path, default=None,
                        help="tokenizer.model (default: the one in the checkpoint's run directory)")
    _add_debug(export)

    ablate = commands.add_parser("ablate", help="train Table 3's model variations (§6.2) and compare with the paper")
    ablate.add_argument("--grid", choices=["table3", "recipe"], default="table3",
                        help="table3: the paper's rows A-E and big (default); recipe: warm-up, learning-rate "
                             "factor, dropout, vocabulary and steps, one at a time, chosen on dev")
    ablate.add_argument("--config", type=Path, required=True, help="the base run config, e.g. configs/multi30k.toml")
    ablate.add_argument("--rows", default=None, help="comma-separated rows of A,B,C,D,E,big (default all; "
                                                     "the base always runs)")
    ablate.add_argument("--steps", type=int, default=None, help="steps per variant (default the config's max_steps)")
    ablate.add_argument("--list", action="store_true", help="print the scaled grid and parameter counts; train nothing")
    ablate.add_argument("--out", type=Path, default=None, help="default runs/<grid>-<config name>")
    ablate.add_argument("--set", action="append", default=[], metavar="KEY=VALUE",
                        help="override a base config value, e.g. model.h=8 (repeatable)")
    ablate.add_argument("--backend", default=None, help="numpy, numba, cupy, cpu or cuda (overrides train.backend)")
    ablate.add_argument("--no-progress", action="store_true", help="no progress bars")
    _add_debug(ablate)
    scale = commands.add_parser("scale", help="project the step time and efficiency on 1-8 GPUs or nodes of them",
                                description="Measure the single-device step and the all-reduce here, then project "
                                            "data-parallel training on a setup (train/experiments/scale.py: "
                                            "straggler, latency per bucket, overlap); --validate checks the model "
                                            "against the published multi-GPU runs it was not fitted on.")
    scale.add_argument("--backend", default="cpu", choices=BACKENDS, metavar="BACKEND",
                       help="cpu (Numba), numpy or cuda (default cpu)")
    scale.add_argument("--preset", choices=["cpu", "base"], default=None,
                       help="the model whose step is measured (default: base with --backend cuda, cpu otherwise)")
    scale.add_argument("--step-ms", type=float, default=None,
                       help="use this single-device step time instead of measuring it (e.g. from `bench`)")
    scale.add_argument("--batch", type=int, default=None, help="sentences per batch (default: the preset's)")
    scale.add_argument("--tokens-per-gpu", type=int, default=None, metavar="N",
                       help="tokens per GPU and micro-batch instead of --batch (the preset's lengths)")
    scale.add_argument("--gpu", choices=["A100", "H100", "H200", "V100"], default=None,
                       help="the node's GPUs: their NVLink is the link, their datasheet peak rates the MFU check")
    scale.add_argument("--precision", choices=["fp32", "tf32", "fp16", "bf16"], default=None,
                       help="of the measured step and the --gpu peak (default fp16 on a GPU, fp32 on a CPU)")
    scale.add_argument("--link", action="append", default=[], metavar="NAME|GBPS",
                       help="nvlink3, nvlink4, pcie5 or a bus bandwidth in GB/s (repeatable; default: the --gpu's "
                            "NVLink, else measured + the presets)")
    scale.add_argument("--latency-us", type=float, default=None, help="one all-reduce call at 8 ranks (default 25)")
    scale.add_argument("--gpus-per-node", type=int, default=8, help="devices in one node (default 8)")
    scale.add_argument("--nodes", type=int, default=1, help="nodes (default 1); the ring crosses --network between them")
    scale.add_argument("--network", default="ib-ndr", metavar="NAME|GBPS",
                       help="what a node's adapters send: ib-hdr (8 x 200 Gb/s), ib-ndr (8 x 400 Gb/s, default) or GB/s")
    scale.add_argument("--bucket-mb", type=float, default=25.0, help="all-reduce bucket size (default 25; 0 = no overlap)")
    scale.add_argument("--accum", type=int, default=1, help="micro-batches per device and update (default 1)")
    scale.add_argument("--overlap", default="0", metavar="on|off|FRACTION",
                       help="the all-reduce hidden behind backward: on (all but the last bucket, as apex DDP and "
                            "our NCCL grad_sync run it), off, or the fraction --allreduce-only measured (default 0)")
    scale.add_argument("--straggler-scale", type=float, default=None, metavar="LAMBDA",
                       help="a batch's time spread over its FLOPs spread (default: fitted on the validation's fit "
                            "row; 1 reads FLOPs as time)")
    scale.add_argument("--validate", action="store_true",
                       help="print the model against the published runs (fit and held-out rows) and stop")
    scale.add_argument("--steps", type=int, default=3, help="timed steps when measuring (default 3)")
    scale.add_argument("--allreduce-only", action="store_true",
                       help="under mpiexec -n K: measure the all-reduce between the K ranks (bus bandwidth, latency, "
                            "overlap with compute) and stop")
    scale.add_argument("--json", action="store_true", help="print one JSON object")
    _add_debug(scale)
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        return _dispatch(args)
    except (InputError, CheckpointError) as err:
        if args.debug:
            raise
        print(f"error: {err}", file=sys.stderr)
        return 2
    except OSError as err:
        disk = disk_error(err)  # a full, read-only or forbidden disk: the file and the free space
        path_in_the_way = isinstance(err, (FileExistsError, IsADirectoryError, NotADirectoryError, PermissionError))
        if args.debug or not (disk or path_in_the_way):
            raise
        print(f"error: {disk or f'{err.filename}: {err.strerror}'} (--debug shows where)", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        if args.debug:
            raise
        print("interrupted", file=sys.stderr)
        return 130


def _one_line_warning(message, category, filename, lineno, file=None, line=None) -> None:
    print(f"warning: {message}", file=sys.stderr if file is None else file)


def _dispatch(args) -> int:
    from train import commands  # imported late: `--help` stays fast

    if not args.debug:
        warnings.simplefilter("ignore", category=DeprecationWarning)
        warnings.showwarning = _one_line_warning
    if args.command in (None, "demo"):
        return commands.demo(
            run_dir=getattr(args, "run_dir", Path("runs/demo")), overrides=getattr(args, "set", []),
            force=getattr(args, "force", False), progress=not getattr(args, "no_progress", False),
            config_path=DEMO_CONFIG)
    return getattr(commands, args.command.replace("-", "_"))(args)  # fit, prepare, ..., ablate, parse-eval -> parse_eval


if __name__ == "__main__":
    sys.exit(main())
