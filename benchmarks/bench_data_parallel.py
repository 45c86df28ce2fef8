"""Data parallelism on one GPU: what `fit` pays for NCCL, and what NCCL moves per second.

    python benchmarks/bench_data_parallel.py [--steps 200] [--json OUT]

1. `fit` through the NCCL communicator with world size 1 against no communicator (train/run/loop.py's
   default), alternating A B A B on the same config: the base model (Table 3) on the built-in task,
   mixed precision, 25 MB buckets. Every collective, the bucketed gather, the side stream and the
   watchdog run exactly as on 8 GPUs; only the ring has one member. Target: <= 2% slower.
2. NCCL all-reduce of 256 MB with one rank (in place), beside a device-to-device copy of the same
   size: one GPU has no link to measure; `mpiexec -n 8 python -m train scale --backend cuda
   --allreduce-only` measures the real bus bandwidth on an 8-GPU node.
The projection to 8 GPUs is `python -m train scale --backend cuda`. Run by benchmarks/gpu_lease.sh (lane nccl),
which reads the --json file; each fit's time is printed as it ends. Benchmarks report; they never assert.
"""
from __future__ import annotations

import argparse
import json
import statistics
import tempfile
import time
import warnings
from pathlib import Path

from train import config as config_lib
from train.run.loop import fit
from train.run.metrics import read_metrics

# cupy and NCCL are imported where they are used: --help answers on any machine (the lease's dry run,
# tests/benchmarks/test_gpu_lease.py).

ROOT = Path(__file__).resolve().parents[1]
BASE_ON_DEMO_TASK = ["model.N=6", "model.d_model=512", "model.d_ff=2048", "model.h=8", "model.max_len=256",
                     "train.backend=cuda", "train.precision=fp16", "train.max_tokens=12000", "train.warmup_steps=4000",
                     "train.valid_every=0", "train.valid_bleu_sentences=0", "train.ckpt_every=100000",
                     "train.bucket_mb=25"]


def step_ms(run_dir: Path, log_every: int) -> float:
    """Median ms per update over the logged windows, the first one (compilation, allocation) left out."""
    windows = read_metrics(run_dir / "metrics.jsonl", "train")[1:]
    return statistics.median(1e3 * w["seconds"] / log_every for w in windows)


def fit_overhead(steps: int, log_every: int = 20, rounds: int = 2) -> dict:
    from train.distributed.communicators import SingleProcess
    from train.distributed.nccl import Nccl

    overrides = BASE_ON_DEMO_TASK + [f"train.max_steps={steps}", f"train.log_every={log_every}"]
    run_config = config_lib.load(ROOT / "configs" / "demo.toml", overrides)
    nccl = Nccl(SingleProcess())
    times = {"none": [], "nccl": []}
    with tempfile.TemporaryDirectory() as tmp, warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for r in range(rounds):
            for name, comm in (("none", None), ("nccl", nccl)):
                run_dir = Path(tmp) / f"{name}_{r}"
                fit(run_config, run_dir, progress=False, comm=comm)
                times[name].append(step_ms(run_dir, log_every))
                print(f"fit {r + 1}/{rounds}, {name:4s}: {times[name][-1]:.2f} ms/update", flush=True)
    none, with_nccl = min(times["none"]), min(times["nccl"])
    return {"step_ms_no_comm": none, "step_ms_nccl_world1": with_nccl, "overhead": with_nccl / none - 1,
            "all_runs_ms": times}


def allreduce_one_rank(nbytes: int = 256 * 2**20, repeats: int = 20) -> dict:
    import cupy

    from train.distributed.communicators import SingleProcess
    from train.distributed.nccl import Nccl

    comm = Nccl(SingleProcess())
    x = cupy.ones(nbytes // 4, dtype=cupy.float32)
    y = cupy.empty_like(x)
    stream = cupy.cuda.get_current_stream()

    def timed(fn):
        fn()
        stream.synchronize()
        start = time.perf_counter()
        for _ in range(repeats):
            fn()
        stream.synchronize()
        return (time.perf_counter() - start) / repeats

    t_allreduce = timed(lambda: comm.all_reduce(x))
    t_copy = timed(lambda: cupy.copyto(y, x))
    return {"bytes": nbytes, "nccl_one_rank_ms": t_allreduce * 1e3, "nccl_one_rank_gbps": nbytes / t_allreduce / 1e9,
            "device_copy_ms": t_copy * 1e3, "device_copy_gbps": 2 * nbytes / t_copy / 1e9}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=200, help="updates per fit run (default 200)")
    parser.add_argument("--json", type=Path, default=None, help="also write the results here")
    args = parser.parse_args()
    import cupy

    result = {"device": cupy.cuda.runtime.getDeviceProperties(0)["name"].decode()}
    print(f"{result['device']}: {args.steps} updates per fit, no communicator and NCCL alternating", flush=True)
    result["fit"] = fit_overhead(args.steps)
    result["allreduce"] = allreduce_one_rank()
    fit_r, ar = result["fit"], result["allreduce"]
    print(f"{result['device']}: fit, base model, fp16, built-in task, ~12k tokens per batch")
    print(f"  no communicator  {fit_r['step_ms_no_comm']:8.2f} ms/update")
    print(f"  NCCL, 1 rank     {fit_r['step_ms_nccl_world1']:8.2f} ms/update   overhead {100 * fit_r['overhead']:+.2f}% "
          f"(target <= 2%)")
    print(f"  256 MB: NCCL all-reduce with 1 rank {ar['nccl_one_rank_ms']:.3f} ms; device copy {ar['device_copy_ms']:.3f} ms "
          f"({ar['device_copy_gbps']:.0f} GB/s read+write); one GPU has no link to measure")
    if args.json:
        args.json.write_text(json.dumps(result, indent=1), encoding="utf-8")


if __name__ == "__main__":
    main()
