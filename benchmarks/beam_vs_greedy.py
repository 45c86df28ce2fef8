"""Beam search against greedy decoding under the §6.1 score, sentence by sentence.

    python benchmarks/beam_vs_greedy.py --ckpt runs/demo/averaged_last5.safetensors \
        --src runs/prepared/builtin-*/test.en --ref runs/prepared/builtin-*/test.de

Decodes the first --n lines three ways: greedy, beam k stopped as tensor2tensor stops it
(the default), and beam k stopped as soon as k hypotheses have finished (`early_stop`).
Prints how often each beam scores below greedy (log P / lp(|Y|), α as given), the
sentences where the two stopping rules differ, and sacreBLEU of each with --ref. For each
sentence where beam k is below greedy it then says why, from a trace of search.py's beam: the
step at which greedy's prefix left the k live hypotheses (its log P below the k-th live one's).
No stopping rule can bring such a hypothesis back; only a wider beam can.
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
from transformer import search  # noqa: E402
from transformer.search import hypothesis_scores  # noqa: E402


class _Traced:
    """The model as search.py uses it, recording each step's live hypotheses (one sentence at a time)."""

    def __init__(self, model):
        self.model, self.config, self.steps = model, model.config, []

    def __getattr__(self, name):                                          # eval, train, encode, ...
        return getattr(self.model, name)

    def init_cache(self, src_ids, memory, beam):
        cache, trace = self.model.init_cache(src_ids, memory, beam), self
        histories = [()] * beam

        class Cache:
            def reorder(self, rows):
                nonlocal histories
                histories = [histories[r] for r in rows]
                cache.reorder(rows)

        def decode_step(_, tokens):
            nonlocal histories
            if trace.steps or tokens[0] != trace.config.bos_id:           # the first step feeds BOS
                histories = [h + (int(t),) for h, t in zip(histories, tokens)]
                trace.steps.append(list(histories))                       # the live ones after step t
            return self.model.decode_step(cache, tokens)

        self.decode_step = decode_step
        return Cache()


def _prefix_log_probs(model, src, tokens) -> np.ndarray:
    """log P(y_1..y_t | x) for t = 1..len(tokens), teacher-forced, as the search computes them."""
    tgt_in = np.array([[model.config.bos_id] + tokens[:-1]])
    with search._inference(model):
        logp, _ = search._log_probs(model(np.array([src]), tgt_in).data[0], model.config)
    return np.cumsum(logp[np.arange(len(tokens)), tokens].astype(np.float64))


def why_below(model, src, greedy, beam, alpha) -> str:
    """Where greedy's hypothesis left beam search's k live ones, or that it never did."""
    traced = _Traced(model)
    search.beam_search(traced, np.array([src]), beam=beam, alpha=alpha)
    mine = _prefix_log_probs(model, src, greedy)
    for t, live in enumerate(traced.steps, start=1):
        if t > len(greedy) or tuple(greedy[:t]) in live:
            continue
        kth = min(_prefix_log_probs(model, src, list(h))[-1] for h in live if model.config.eos_id not in h)
        return f"greedy's prefix left the beam at step {t}: log P {mine[t - 1]:.3f} < the k-th live {kth:.3f}"
    return "greedy's hypothesis stayed in the beam (a search.py bug if beam scored below it)"


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
    for i in np.flatnonzero(scores[beam] < scores["greedy"] - 1e-4):
        print(f"  line {i + 1} below greedy: {why_below(model, ids[i] + [eos], outputs['greedy'][i], args.beam, args.alpha)}")
    for i in [i for i in range(len(lines)) if outputs[beam][i] != outputs[early][i]]:
        print(f"  line {i + 1}: {lines[i]}\n    greedy     {scores['greedy'][i]:8.4f} {tokenizer.decode(outputs['greedy'][i])}"
              f"\n    {beam:10s} {scores[beam][i]:8.4f} {tokenizer.decode(outputs[beam][i])}"
              f"\n    early_stop {scores[early][i]:8.4f} {tokenizer.decode(outputs[early][i])}")


if __name__ == "__main__":
    main()
