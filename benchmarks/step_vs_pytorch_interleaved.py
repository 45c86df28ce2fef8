"""One training step, ours against the PyTorch peer, timed interleaved in one process on one thread (needs torch).

    python benchmarks/step_vs_pytorch_interleaved.py [--preset multi30k_cpu] [--rounds 8] [--profile] [--json]

`python -m train bench` times the two one after the other, in two processes; on a machine other
programs share, the load moves between them and so does the ratio. Here both models (ours:
`train.run.step.train_step`, the fit loop's update; the peer: benchmarks/torch_peer.py, the same
post-norm model, with torch's label-smoothed cross-entropy and Adam) take turns, `--steps` updates
each per round, alternating which goes first; the medians over the rounds and their ratio are
printed, with the load average. `--profile` adds where each spends a step: our per-Function
breakdown (train/experiments/bench.py OpProfiler) and torch.profiler's per-operator table.
The preset's batch (train/experiments/bench.py PRESETS) is random tokens, no padding.
"""
import os
import sys

for _name in ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS", "NUMBA_NUM_THREADS"):
    os.environ[_name] = "1"                    # one thread, before NumPy, Numba and torch start their pools

import argparse  # noqa: E402
import json  # noqa: E402
import statistics  # noqa: E402
import time  # noqa: E402

import torch  # noqa: E402

from torch_peer import PeerTransformer  # noqa: E402
from train.distributed.grad_sync import GradSync  # noqa: E402
from train.experiments.bench import PRESETS, OpProfiler  # noqa: E402
from train.experiments.step_setup import setup  # noqa: E402
from train.run.step import train_step  # noqa: E402
from transformer.config import TransformerConfig  # noqa: E402


def steppers(preset: str):
    """(our update, the peer's update) on the preset's one batch."""
    spec = PRESETS[preset]
    cfg = TransformerConfig(**spec["model"])
    model, opt, loss_fn, scaler, batch = setup(cfg, "cpu", "fp32", spec["batch"], spec["src_len"], spec["tgt_len"])
    sync = GradSync(opt)
    torch.manual_seed(0)
    peer = PeerTransformer(cfg.vocab_size, cfg.d_model, cfg.N, cfg.h, cfg.d_ff, cfg.p_drop, cfg.layernorm_eps)
    peer_opt = torch.optim.Adam(peer.parameters(), lr=1e-4, betas=(0.9, 0.98), eps=1e-9)
    loss = torch.nn.CrossEntropyLoss(ignore_index=cfg.pad_id, label_smoothing=cfg.eps_ls)
    src, tgt_in, tgt_out = (torch.from_numpy(a) for a in batch[0])

    def theirs():
        value = loss(peer(src, tgt_in).reshape(-1, cfg.vocab_size), tgt_out.reshape(-1))
        peer_opt.zero_grad(set_to_none=True)
        value.backward()
        peer_opt.step()

    return (lambda: train_step(model, batch, opt, loss_fn, scaler, sync=sync)), theirs


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter, epilog=__doc__)
    ap.add_argument("--preset", choices=sorted(PRESETS), default="multi30k_cpu")
    ap.add_argument("--rounds", type=int, default=8, help="rounds, each timing both (default 8)")
    ap.add_argument("--steps", type=int, default=5, help="updates per side and round (default 5)")
    ap.add_argument("--profile", action="store_true", help="also print where each side spends a step")
    ap.add_argument("--json", action="store_true", help="print one JSON object")
    args = ap.parse_args()
    if args.rounds < 1 or args.steps < 1:
        print("error: --rounds and --steps must be at least 1", file=sys.stderr)
        return 2
    torch.set_num_threads(1)
    ours, theirs = steppers(args.preset)
    for _ in range(3):                          # compile, allocate, warm caches
        ours()
        theirs()
    times = {"ours": [], "pytorch": []}
    load_before = os.getloadavg()[0]
    for r in range(args.rounds):
        for side, fn in (("ours", ours), ("pytorch", theirs))[:: 1 if r % 2 == 0 else -1]:
            start = time.perf_counter()
            for _ in range(args.steps):
                fn()
            times[side].append((time.perf_counter() - start) / args.steps * 1e3)
    report = {"preset": args.preset, "threads": 1, "torch": torch.__version__, "rounds": args.rounds,
              "ours_ms": statistics.median(times["ours"]), "pytorch_ms": statistics.median(times["pytorch"]),
              "ours_ms_rounds": times["ours"], "pytorch_ms_rounds": times["pytorch"],
              "load_before": load_before, "load_after": os.getloadavg()[0]}
    report["ratio_ours_over_pytorch"] = report["ours_ms"] / report["pytorch_ms"]
    if args.profile:
        with OpProfiler() as profiler:
            for _ in range(args.steps):
                ours()
        report["ours_op_ms"] = {k: v / args.steps * 1e3 for k, v in sorted(profiler.seconds.items(), key=lambda kv: -kv[1])}
        from torch.profiler import ProfilerActivity, profile
        with profile(activities=[ProfilerActivity.CPU]) as prof:
            for _ in range(args.steps):
                theirs()
        report["pytorch_op_ms"] = {e.key: e.self_cpu_time_total / 1e3 / args.steps for e in
                                   sorted(prof.key_averages(), key=lambda e: -e.self_cpu_time_total)[:25]}
    if args.json:
        print(json.dumps(report))
        return 0
    print(f"one update, preset {args.preset}, one thread, {args.rounds} interleaved rounds of {args.steps}: "
          f"ours {report['ours_ms']:.1f} ms, PyTorch {report['pytorch_ms']:.1f} ms (medians), ours / PyTorch "
          f"{report['ratio_ours_over_pytorch']:.2f}; load average {load_before:.1f} -> {report['load_after']:.1f}")
    for side in ("ours", "pytorch"):
        if f"{side}_op_ms" in report:
            print(f"{side}: ms per update")
            for name, ms in list(report[f"{side}_op_ms"].items())[:15]:
                print(f"  {name[:60]:60s} {ms:8.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
