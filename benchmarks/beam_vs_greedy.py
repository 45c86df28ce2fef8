"""Beam search against greedy decoding under the §6.1 score, sentence by sentence (issue #33).

    python benchmarks/beam_vs_greedy.py --ckpt runs/demo/averaged_last5.safetensors \
        --src runs/prepared/builtin-*/test.en --ref runs/prepared/builtin-*/test.de

Decodes the first --n lines three ways: greedy, beam k stopped as tensor2tensor stops it
(the default), and beam k stopped as soon as k hypotheses have finished (`early_stop`).
Prints how often each beam scores below greedy (log P / lp(|Y|), α as given), the
sentences where the two stopping rules differ, and sacreBLEU of each with --ref.
"""
import argparse
import sys
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from train.data.files import iter_lines  # noqa: E402
from train.evaluate.scores import corpus_scores  # noqa: E402
from train.evaluate.translate import translate_ids  # noqa: E402
from train.run.checkpointing import load_for_inference  # noqa: E402
from train.threads import cpu_threads  # noqa: E402
from transformer.search import hypothesis_scores  # noqa: E402


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--ckpt", type=Path, required=True)
    parser.add_argument("--src", type=Path, required=True, help="source sentences, one a line (.gz allowed)")
    parser.add_argument("--ref", type=Path, default=None, help="references, for sacreBLEU")
    parser.add_argument("--n", type=int, default=0, help="first N lines (default all)")
    parser.add_argument("--beam", type=int, default=4)
    parser.add_argument("--alpha", type=float, default=0.6)
    parser.add_argument("--threads", type=int, default=2)
    args = parser.parse_args()
    model, tokenizer = load_for_inference(args.ckpt)
    lines = [line for _, line in iter_lines(args.src)]
    refs = [line for _, line in iter_lines(args.ref)] if args.ref else None
    if args.n:
        lines, refs = lines[:args.n], (refs[:args.n] if refs else None)
    ids = tokenizer.encode_batch(lines)
    eos = model.config.eos_id
    with cpu_threads(args.threads):
        outputs = {"greedy": translate_ids(model, ids, beam=1),
                   f"beam {args.beam}": translate_ids(model, ids, beam=args.beam, alpha=args.alpha),
                   f"beam {args.beam} early_stop": translate_ids(model, ids, beam=args.beam, alpha=args.alpha,
                                                                early_stop=True)}
        scores = {name: np.concatenate([hypothesis_scores(model, np.array([s + [eos]]), [y], args.alpha)
                                        for s, y in zip(ids, hyps)]) for name, hyps in outputs.items()}
    print(f"{len(lines)} sentences of {args.src}, {args.ckpt}")
    for name in outputs:
        below = np.flatnonzero(scores[name] < scores["greedy"] - 1e-4)
        bleu = f", sacreBLEU {corpus_scores([tokenizer.decode(y) for y in outputs[name]], refs).bleu:.2f}" if refs else ""
        print(f"  {name:22s} mean score {scores[name].mean():8.4f}, below greedy on {len(below)}"
              f"{' (lines ' + ', '.join(str(i + 1) for i in below[:10]) + ')' if len(below) else ''}{bleu}")
    beam, early = f"beam {args.beam}", f"beam {args.beam} early_stop"
    for i in [i for i in range(len(lines)) if outputs[beam][i] != outputs[early][i]]:
        print(f"  line {i + 1}: {lines[i]}\n    greedy     {scores['greedy'][i]:8.4f} {tokenizer.decode(outputs['greedy'][i])}"
              f"\n    {beam:10s} {scores[beam][i]:8.4f} {tokenizer.decode(outputs[beam][i])}"
              f"\n    early_stop {scores[early][i]:8.4f} {tokenizer.decode(outputs[early][i])}")


if __name__ == "__main__":
    main()
