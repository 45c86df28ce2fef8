"""Where beam search spends its time on a CPU: search.py (the chapters') beside fast_search.py.

    python benchmarks/profile_search.py --ckpt runs/demo/averaged_last5.safetensors \
        --src runs/prepared/builtin-*/test.en --n 200

Decodes the first --n lines with both searches (beam --beam, α 0.6, translate's batches),
interleaved, --repeats times, and prints the median wall and CPU seconds of each, their ratio,
whether the outputs are equal, and the functions that take the most time in one profiled
run of each (cProfile, own time: where the Python per step, the copies and the full-vocabulary
log-softmax show up). Without --ckpt: an untrained d_model 512, N 6 model (Table 3 base) with a
vocabulary of --vocab pieces on random sources of 20-40 tokens. Benchmarks report; they never assert.
"""
import argparse
import cProfile
import io
import pstats
import statistics
import sys
import time
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from train.data.files import iter_lines  # noqa: E402
from train.evaluate.translate import _decode_batches  # noqa: E402
from train.threads import cpu_threads  # noqa: E402
from transformer import fast_search, search  # noqa: E402


def _model_and_sources(args):
    if args.ckpt is None:
        from transformer.config import TransformerConfig
        from transformer.model import Transformer

        config = TransformerConfig(vocab_size=args.vocab, max_len=256, p_drop=0.0)
        rng = np.random.default_rng(0)
        sources = [list(rng.integers(4, args.vocab, size=int(n))) for n in rng.integers(20, 41, size=args.n)]
        return Transformer(config, rng, backend="cpu"), sources, f"untrained base, vocabulary {args.vocab}"
    from train.run.checkpointing import load_for_inference

    model, tokenizer = load_for_inference(args.ckpt)
    return model, tokenizer.encode_batch([line for _, line in iter_lines(args.src)][:args.n]), str(args.ckpt)


def _decode(model, sources, which, beam, max_len_b):
    """translate_ids' batches and order, decoded by `which` (search or fast_search): fast_search.py's a batch
    per thread, as translate decodes; search.py's in this thread (as where the fast search does not apply)."""
    def decode(src):
        if beam == 1:
            return which.greedy_decode(model, src, max_len_b=max_len_b)
        return which.beam_search(model, src, beam=beam, max_len_b=max_len_b)
    return _decode_batches(model, sources, decode, 4096, None, which)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--ckpt", type=Path, default=None, help="a checkpoint (default: an untrained base model)")
    parser.add_argument("--src", type=Path, default=None, help="with --ckpt: source sentences, one a line")
    parser.add_argument("--n", type=int, default=100, help="first N sentences")
    parser.add_argument("--vocab", type=int, default=8000, help="without --ckpt: vocabulary size")
    parser.add_argument("--beam", type=int, default=4)
    parser.add_argument("--max-len-b", type=int, default=50, help="output length limit: input + this")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--top", type=int, default=12, help="functions listed per profile")
    args = parser.parse_args()
    if args.ckpt is not None and args.src is None:
        parser.error("--ckpt needs --src")
    model, sources, name = _model_and_sources(args)
    searches = {"search.py": search, "fast_search.py": fast_search}
    print(f"{len(sources)} sentences, {name}, beam {args.beam}, {args.threads} threads")
    with cpu_threads(args.threads):
        outputs = {who: _decode(model, sources, which, args.beam, args.max_len_b) for who, which in searches.items()}
        times = {who: [] for who in searches}
        for r in range(args.repeats):
            for who in (list(searches) if r % 2 == 0 else list(searches)[::-1]):
                wall, cpu = time.perf_counter(), time.process_time()
                _decode(model, sources, searches[who], args.beam, args.max_len_b)
                times[who].append((time.perf_counter() - wall, time.process_time() - cpu))
        for who, which in searches.items():
            profile = cProfile.Profile()
            profile.runcall(_decode, model, sources, which, args.beam, args.max_len_b)
            text = io.StringIO()
            pstats.Stats(profile, stream=text).sort_stats("tottime").print_stats(args.top)
            wall = statistics.median(t[0] for t in times[who])
            cpu = statistics.median(t[1] for t in times[who])
            print(f"\n{who}: median wall {wall:.2f} s, CPU {cpu:.2f} s; profile (own time):")
            print("\n".join(line for line in text.getvalue().splitlines()[6:] if line.strip()))
    walls, cpus = ([statistics.median(t[i] for t in times[who]) for who in searches] for i in (0, 1))
    print(f"\nsearch.py / fast_search.py: wall {walls[0] / walls[1]:.2f}x, CPU {cpus[0] / cpus[1]:.2f}x; "
          f"outputs equal on {sum(a == b for a, b in zip(*outputs.values()))}/{len(sources)}")


if __name__ == "__main__":
    main()
