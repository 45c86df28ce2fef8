"""`python tests/train/distributed/nccl_worker.py OUT.json RUN_ROOT`: the NCCL backend, one rank on one GPU.

(Two NCCL ranks cannot share a GPU: the multi-rank logic is tested on CPU ranks, test_mpi.py.)
No MPI: with one rank the host communicator is SingleProcess. Written to OUT.json for test_nccl_gpu.py:
  collectives  all-reduce (sync and async), max, broadcast leave one rank's array as it is
  train        GradSync over NCCL with many buckets vs no communicator: 3 float32 updates on the GPU
  fit          `fit` through NCCL vs no communicator: the same checkpoint
"""
import json
import sys
import warnings
from pathlib import Path

import cupy
import numpy as np

from minitensor.optim import Adam, NoamSchedule
from train import config as config_lib
from train.config import RunConfig
from train.distributed.communicators import SingleProcess
from train.distributed.grad_sync import GradSync
from train.distributed.nccl import Nccl
from train.run.loop import fit
from train.run.step import train_step
from transformer import LabelSmoothingLoss, Transformer, TransformerConfig
from transformer.checkpoint import load_checkpoint

TINY = ["task.n_train=200", "task.n_valid=8", "task.n_test=8", "tokenizer.vocab_size=80", "model.N=1",
        "model.d_model=32", "model.d_ff=64", "model.h=2", "model.max_len=64", "train.max_tokens=512",
        "train.warmup_steps=4", "train.backend=cuda", "train.log_every=2", "train.valid_every=0",
        "train.valid_bleu_sentences=0", "train.ckpt_every=4", "train.max_steps=4", "train.bucket_mb=0.01"]


def collectives(comm) -> bool:
    x = cupy.arange(1000, dtype=cupy.float32)
    expected = x.copy()
    comm.all_reduce(x)
    comm.all_reduce_async(x).wait()
    comm.all_reduce(x, op="max")
    comm.broadcast(x)
    halves = cupy.full(7, 0.5, dtype=cupy.float64)
    comm.all_reduce(halves)
    cupy.cuda.get_current_stream().synchronize()
    return bool((x == expected).all()) and bool((halves == 0.5).all())


def train(comm, bucket_mb: float) -> np.ndarray:
    config = TransformerConfig(vocab_size=13, N=2, d_model=16, d_ff=32, h=2, max_len=32, impl="fused")
    rng = np.random.default_rng(0)
    model = Transformer(config, rng, backend="cuda")
    optimizer = Adam(list(model.named_parameters()), lr=NoamSchedule(16, warmup=4))
    loss_fn = LabelSmoothingLoss(config.eps_ls, config.pad_id, config.impl)
    sync = None if comm is None else GradSync(optimizer, comm, bucket_mb)
    data = np.random.default_rng(1)
    for _ in range(3):
        batches = []
        for _ in range(2):
            src, tgt = data.integers(4, 13, (3, 6)), data.integers(4, 13, (3, 5))
            batches.append((src, np.concatenate([np.full((3, 1), 2), tgt[:, :-1]], axis=1), tgt))
        train_step(model, batches, optimizer, loss_fn, clip_norm=1.0, sync=sync, rng=rng)
    return cupy.asnumpy(optimizer.flat_parameters())


def fit_checkpoints(run_root: Path, comm) -> dict:
    run_config = config_lib.apply_overrides(RunConfig(name="nccl"), TINY)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        fit(run_config, run_root / "plain", progress=False)
        fit(run_config, run_root / "nccl", progress=False, comm=comm)
    a, _ = load_checkpoint(run_root / "plain" / "ckpt_00000004.safetensors")
    b, _ = load_checkpoint(run_root / "nccl" / "ckpt_00000004.safetensors")
    return {"max_abs": max(float(np.abs(a[k] - b[k]).max()) for k in a), "same_keys": a.keys() == b.keys()}


def main(out_path: str, run_root: str) -> None:
    comm = Nccl(SingleProcess())
    plain, bucketed = train(None, 0.0), train(comm, 1e-3)
    result = {"world_size": comm.world_size, "collectives": collectives(comm),
              "train_max_abs": float(np.abs(plain - bucketed).max()), "train_scale": float(np.abs(plain).max()),
              "fit": fit_checkpoints(Path(run_root), comm), "describe": comm.describe()}
    Path(out_path).write_text(json.dumps(result, indent=1), encoding="utf-8")


if __name__ == "__main__":
    main(*sys.argv[1:3])
