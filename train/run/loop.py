"""The training loop (§5): Adam with the warm-up schedule, label smoothing, dropout, checkpoints.

    fit(run_config, run_dir)   # trains, validates, checkpoints; re-run the same call to resume

What one update does (§5.3, §5.4) is `train.run.step.train_step`: take the update's token-budget batches
(§5.1: train.tokens_per_update over every rank), run forward and backward on each (dropout on, label-smoothed
loss), add the gradients up weighted by target tokens, optionally clip, and take one Adam step (β₁ 0.9, β₂ 0.98,
ε 1e-9) at the rate of Eq. (3). This file is the bookkeeping around it: data order, logging (with
`train.log_norms`, per-layer norms: train/run/layer_norms.py), validation, checkpoints, signals.

The run directory holds the run: manifest.jsonl (every file listed below, with its sha256:
train/run/manifest.py), config.json (the resolved config), prepared.json (which prepared data
it trains on: train/run/run_data.py; the data itself is shared, in `data_dir`),
tokenizer.model, metrics.jsonl, ckpt_<step:08d>.safetensors (the last `keep_last`;
train/run/checkpointing.py) and best.safetensors (the best validation so far:
train/run/validation.py). A checkpoint stores the weights, the Adam moments and step, the
data position (epoch, batch) and the dropout RNG state, so that stopping at step N and running
again continues exactly as if the run had never stopped. Nothing in a run directory is
overwritten or deleted unless the manifest lists it (`force=True` starts the run over,
deleting those files only), and one process at a time trains in it (train/run/run_dir.py).

Many devices (docs/many_gpus.md): `fit(..., comm=)` trains data-parallel over the ranks
of a train/distributed/communicators.py communicator; every rank takes its share of each update
(batching.shard, train/run/ranks.py), rank 0 alone writes, logs and validates.

Faults (tests/train/test_reliability.py): SIGINT/SIGTERM finish the current update,
write a checkpoint and return (FitResult.stopped says why); a non-finite loss
or gradient in fp32 raises DivergedError before the optimizer step, so the
newest checkpoint stays the last good one; an unwritable run directory is an
InputError before anything is trained. With `train.patience` the run also stops
after that many validations without a better `train.best_metric` (FitResult.stopped = "early stopping").

Shapes: B pairs in a batch, S source length, T target length, V vocab.
"""

import contextlib
import math
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
from tqdm import tqdm

import minitensor as mt
from minitensor.optim import Adam, NoamSchedule
from train.config import RunConfig
from train.data.batching import epoch_batches, shard
from train.data.inputs import Prepared, absolute_task_paths, corpus_batch, default_data_dir, prepare
from train.distributed.communicators import Silent, SingleProcess, agree, agree_on_signal, rank_zero_first
from train.distributed.grad_sync import GradSync
from train.errors import InputError
from train.run import checkpointing, ranks, run_data
from train.run.checkpointing import Progress, TrainState, run_checkpoints
from train.run.faults import StopSignals, raise_diverged
from train.run.layer_norms import layer_norms
from train.run.loss_scaler import DynamicLossScaler
from train.run.manifest import Manifest
from train.run.metrics import METRICS_FILE, MetricsWriter, mfu, peak_tflops, train_flops
from train.run.run_dir import RunLock, check_run_dir, commit_start, identity_of, open_run, plan_start, start_of
from train.run.step import StepStats, train_step
from train.run.tensorboard import LIVE_DIR, TensorBoardLog, summary_writer_class
from train.run.validation import check_best_metric, run_validation
from train.threads import cpu_threads
from transformer.loss import LabelSmoothingLoss
from transformer.model import Transformer


@dataclass
class FitResult:
    run_dir: Path
    model: object
    tokenizer: object
    prepared: Prepared
    progress: Progress
    checkpoints: list[Path] = field(default_factory=list)
    last_valid: dict | None = None
    stopped: str | None = None  # "SIGINT" / "SIGTERM" / "early stopping" when the run ended before max_steps


class Logger:
    """Prints through tqdm when a bar is showing, so log lines do not break it."""

    def __init__(self, bar: tqdm | None):
        self.bar = bar

    def __call__(self, message: str) -> None:
        if self.bar is not None and not self.bar.disable:
            self.bar.write(message)
        else:
            print(message, flush=True)


def _backend_name(run_config: RunConfig) -> str:
    train = run_config.train
    if train.precision != "fp32" and train.backend not in ("cupy", "cuda"):
        raise InputError(f"train.precision = {train.precision!r} needs train.backend = 'cuda' "
                         f"(mixed precision is for GPUs); use precision = 'fp32' on the CPU")
    if not mt.available(train.backend):
        raise InputError(f"train.backend = {train.backend!r} is not available here: "
                         f"{mt.why_unavailable(train.backend)} (see `python -m train doctor`)")
    return train.backend


# ------------------------------------------------------------------ the loop
def _next_batches(prepared: Prepared, progress: Progress, seed: int, count: int) -> list[np.ndarray]:
    """The next `count` batches in the epoch's shuffled order, advancing the progress (§5.1)."""
    out = []
    order = epoch_batches(prepared.batches, progress.epoch, seed)
    while len(out) < count:
        if progress.batch_pos >= len(order):
            progress.epoch, progress.batch_pos = progress.epoch + 1, 0
            order = epoch_batches(prepared.batches, progress.epoch, seed)
        out.append(order[progress.batch_pos])
        progress.batch_pos += 1
    return out


def fit(run_config: RunConfig, run_dir: str | Path, force: bool = False, reset_optimizer: bool = False,
        progress: bool = True, data_dir: str | Path | None = None, comm=None,
        tensorboard: bool = False, init_from: str | Path | None = None) -> FitResult:
    """Train `run_config` in `run_dir` to train.max_steps, resuming from the latest valid checkpoint.

    The prepared data lives in `data_dir` (default: `prepared/` beside the run directory).
    Raises InputError for problems with the config, the data or the run directory
    (checked before anything is written), CheckpointError for an unusable checkpoint.
    `comm` (train/distributed/communicators.py; default one process): data-parallel training over its ranks.
    Rank 0 alone writes the run directory, logs, validates and checkpoints; the others read
    what it prepared and train their share of every update (docs/many_gpus.md).
    `tensorboard`: also write every metric live to run_dir/tensorboard (train/run/tensorboard.py).
    `init_from`: a new run starts from this model file's weights and tokenizer (fine-tuning); a run
    that has a checkpoint resumes from it instead.
    """
    comm = SingleProcess() if comm is None else comm
    run_dir, run_config = Path(run_dir), absolute_task_paths(run_config)  # config.json: the corpus from anywhere
    backend = _backend_name(run_config)
    main = comm.rank == 0                      # rank 0 alone owns the run directory
    if tensorboard and main:
        summary_writer_class()                 # a missing extra is said before anything is written
    if init_from is not None and main and not run_checkpoints(run_dir):  # a new run's start, before it is made
        checkpointing.check_init_from(init_from, run_config.model)
    adopt = check_run_dir(run_dir) if main else None
    with RunLock(run_dir) if main else contextlib.nullcontext() as lock:
        plan = plan_start(run_config, open_run(run_dir, adopt), force, init_from) if main else None
        with cpu_threads(run_config.train.threads) as threads:
            if threads and main:
                print(f"CPU threads: {', '.join(threads)}", flush=True)
            return _train(run_config, run_dir, backend, plan, reset_optimizer, progress, data_dir, comm,
                          tensorboard, init_from, lock)


def _start(run_config: RunConfig, run_dir: Path, backend: str, reset_optimizer: bool, say, progress: bool,
           data_dir, comm, init_from=None, start=None, lock=None) -> tuple[TrainState, Prepared, Path | None, str]:
    """The model, optimizer (§5.3), schedule (Eq. (3)), update plan and data state, fresh or restored.

    Rank 0 checks everything (data, tokenizer, shapes) before the run directory changes: then it carries
    out `start` (run_dir.StartPlan) and records the data. Ranks other than 0 only check the run's record
    of its prepared data (they read, never write).
    """
    train = run_config.train
    verify_data = comm.rank != 0
    fresh = not verify_data and start.start_over   # the run's files are deleted once the checks pass
    resumed = None if fresh else checkpointing.resume_point(run_dir, reset_optimizer, say)
    plan, how = ranks.update_plan(train, comm.world_size, resumed)      # §5.1: the update over every rank
    started = not fresh and bool(run_checkpoints(run_dir))   # its data is the run's from the first checkpoint on
    record = run_data.recorded(run_dir) if started or verify_data else None
    init_from = None if started else init_from
    given = checkpointing.init_tokenizer(init_from) if init_from else run_data.given_tokenizer(run_dir, record)
    prepared = prepare(run_config, Path(data_dir) if data_dir else default_data_dir(run_dir), plan.batch_tokens,
                       check_files=run_data.check_same_data(run_dir, record), log=say, progress=progress,
                       tokenizer=given)
    if not verify_data:
        run_data.check_recorded_data(run_dir, prepared.data, started, start.manifest.identity)
    check_best_metric(run_config, prepared)
    model_config = run_config.model.replace(vocab_size=prepared.tokenizer.vocab_size)
    rng = np.random.default_rng(train.seed)  # model init and every dropout mask (§5.4)
    model = Transformer(model_config, rng, backend=backend, precision=train.precision)
    schedule = NoamSchedule(model_config.d_model, warmup=train.warmup_steps, factor=train.lr_factor)  # §5.3 Eq. (3)
    optimizer = Adam(list(model.named_parameters()), lr=schedule, betas=(train.adam_beta1, train.adam_beta2),
                     eps=train.adam_eps, half_dtype=model.compute_dtype)   # mixed precision: the half weights
    scaler = DynamicLossScaler() if train.precision == "fp16" else None
    state = TrainState(run_config, model, optimizer, rng, prepared.tokenizer, scaler, plan)
    if resumed is not None:
        checkpointing.restore(resumed, state, reset_optimizer)
        at = state.progress
        say(f"restored {resumed.name} (step {at.step}, epoch {at.epoch}, batch {at.batch_pos})"
            + ("; optimizer reset" if reset_optimizer else ""))
    elif init_from is not None:
        checkpointing.init_weights(init_from, state)
        say(f"initialised from {init_from}: its weights and tokenizer (Adam, the schedule and the data order "
            f"start afresh)")
    if not verify_data:   # every check has passed: now the run directory changes
        identity = identity_of(run_config, prepared.data.key, prepared.tokenizer.model_hash,
                               start_of(start.manifest, started, init_from))
        manifest = commit_start(start, run_config, identity, say)
        run_data.record_data(manifest, prepared.data)
        lock.announce(manifest)
    say(f"model: {model.num_parameters():,} parameters, vocab {model_config.vocab_size}, backend {backend}, "
        f"{model_config.impl} ops; {len(prepared.batches)} batches per epoch")
    return state, prepared, resumed, how


def logged_step(step: int, log_every: int) -> bool:
    """Steps with a log line: every `log_every`, and before that 1, 2, 4, 8, ... so a run speaks at once."""
    return step % log_every == 0 or (step < log_every and step & (step - 1) == 0)


def _train(run_config: RunConfig, run_dir: Path, backend: str, start, reset_optimizer: bool,
           progress: bool, data_dir, comm, tensorboard: bool, init_from, lock) -> FitResult:
    train = run_config.train
    main = comm.rank == 0                      # rank 0 alone logs, validates and writes
    say = Logger(None) if main else Silent()
    resuming, changes = (start.resuming, start.changes) if main else (None, {})
    say(f"{'resuming' if resuming else 'starting'} run {run_config.name!r} in {run_dir}")
    if changes:
        say("settings changed on resume, applied from the resumed step on: "
            + ", ".join(f"{key} {old!r} -> {new!r}" for key, (old, new) in changes.items()))
    with rank_zero_first(comm):                # rank 0 prepares the data; the other ranks then read it
        state, prepared, resumed, how = _start(run_config, run_dir, backend, reset_optimizer, say, progress and main,
                                               data_dir, comm, init_from, start, lock)
    sync = GradSync(state.optimizer, comm, train.bucket_mb)
    ranks.join(comm, state, resumed, sync, say, how)   # every rank agrees, then starts from rank 0's weights
    model, at = state.model, state.progress
    loss_fn = LabelSmoothingLoss(model.config.eps_ls, model.config.pad_id, model.config.impl)  # §5.4
    result = FitResult(run_dir, model, state.tokenizer, prepared, at, run_checkpoints(run_dir))
    if at.step >= train.max_steps:
        say(f"already trained to step {at.step} (train.max_steps = {train.max_steps}); nothing to do")
        return result
    if train.patience and at.bad_validations >= train.patience:
        result.stopped = "early stopping"
        say(f"already stopped early at step {at.step} (no better validation in {at.bad_validations} validations, "
            f"train.patience = {train.patience}); nothing to do")
        return result

    metrics = _open_logs(run_dir, at.step, resumed, changes, tensorboard) if main else Silent()
    device = "cpu" if model.backend.device == "cpu" else _gpu_name()
    peak, _ = peak_tflops(device, train.precision)
    bar = tqdm(total=train.max_steps, initial=at.step, unit="step", dynamic_ncols=True,
               disable=not (progress and main and sys.stderr.isatty()))
    say = Logger(bar) if main else Silent()
    window = _Window()
    last_ckpt_time = time.perf_counter()
    first_step = at.step
    try:
        with StopSignals() as stop:
            model.train()
            while at.step < train.max_steps:
                t0 = time.perf_counter()
                update = _next_batches(prepared, at, train.seed, state.plan.batches)   # §5.1: one global batch
                batches = [None if b is None else corpus_batch(prepared.train, b)      # None: an empty slot
                           for b in shard(update, comm.rank, comm.world_size)]
                log_now = logged_step(at.step + 1, train.log_every)
                stats = train_step(model, batches, state.optimizer, loss_fn, state.scaler, train.clip_norm,
                                   measure_grad_norm=log_now, sync=sync, rng=state.rng)
                if train.check_replicas and at.step == first_step:
                    sync.check_replicas()      # debug: every rank holds rank 0's weights after the first update
                if not stats.finite and state.scaler is None:  # fp32: the run diverged; stop before it spreads
                    raise_diverged(model, stats.loss_sum, at.step + 1, run_dir)
                at.step += 1
                at.tokens_seen += stats.tgt_tokens
                dt = time.perf_counter() - t0
                at.elapsed_s += dt
                window.add(stats, dt, _flops(model.config, batches))
                bar.update(1)
                if log_now:
                    record = window.summary(state.optimizer.current_lr(), state.scaler, peak)
                    metrics.write("train", at.step, epoch=at.epoch, **record)
                    if train.log_norms and main:
                        metrics.write("norms", at.step, **layer_norms(model, batches[0]))
                    bar.set_postfix(loss=f"{record['loss']:.3f}", lr=f"{record['lr']:.2e}",
                                    tok_s=f"{record['tgt_tokens_per_s']:.0f}")
                    say(_format_train(at.step, record))
                    window = _Window()
                early_stop = False
                if (train.valid_every and at.step % train.valid_every == 0) or at.step == train.max_steps:
                    if main:
                        with comm.busy("validation"):   # the other ranks wait for it in `agree`
                            result.last_valid = run_validation(model, loss_fn, prepared, run_config, state,
                                                               run_dir, metrics, say)
                        early_stop = bool(train.patience) and at.bad_validations >= train.patience
                    early_stop = agree(comm, early_stop)   # rank 0 decides; every rank stops with it
                stopping = agree_on_signal(comm, stop.received)   # all ranks stop after the same update
                minutes_due = train.ckpt_minutes > 0 and time.perf_counter() - last_ckpt_time >= 60 * train.ckpt_minutes
                if main and (at.step % train.ckpt_every == 0 or minutes_due or at.step == train.max_steps or stopping
                             or early_stop):
                    with comm.busy("writing a checkpoint"):
                        saved = checkpointing.save(run_dir, state)
                    last_ckpt_time = time.perf_counter()
                if stopping:  # SIGINT/SIGTERM: the update is done and saved
                    result.stopped = stopping
                    if main:
                        say(f"{stopping}: stopped after step {at.step}, checkpoint {saved.name} written; "
                            f"run the same command again to resume")
                    break
                if early_stop:
                    result.stopped = "early stopping"
                    say(f"early stopping at step {at.step}: no better validation in {at.bad_validations} "
                        f"validations (train.patience = {train.patience}); the best is step {at.best_step}, "
                        f"{checkpointing.BEST_FILE}")
                    break
    except KeyboardInterrupt:
        say(f"interrupted at step {at.step}; run the same command again to resume from the last checkpoint")
        raise
    finally:
        bar.close()
        metrics.close()
    result.progress = state.progress
    result.checkpoints = run_checkpoints(run_dir)
    return result


def _open_logs(run_dir: Path, step: int, resumed: Path | None, changes: dict, tensorboard: bool) -> MetricsWriter:
    """metrics.jsonl, mirrored live to TensorBoard with `tensorboard`, both listed in the run's manifest.

    A session that starts where the log already has records (a resume, or a rerun after a kill
    before the first checkpoint) writes a resume record first, so the steps it redoes replace the
    earlier ones in read_metrics, plots and the export, as TensorBoard's purge_step hides them live.
    """
    manifest = Manifest.load(run_dir)
    path = manifest.claim(METRICS_FILE, append=True)
    earlier = path.is_file() and path.stat().st_size > 0
    live = TensorBoardLog(run_dir / LIVE_DIR, purge_step=step + 1, suffix=f".from-step-{step + 1}",
                          manifest=manifest) if tensorboard else None
    metrics = MetricsWriter(path, mirror=live, manifest=manifest)
    if earlier or changes:
        metrics.write("resume", step, checkpoint=resumed.name if resumed else None,
                      **({"changed": {k: list(v) for k, v in changes.items()}} if changes else {}))
    return metrics


def _flops(config, batches) -> float:
    """Model FLOPs of one update's batches (for MFU)."""
    pad = config.pad_id
    return sum(train_flops(config, int((s != pad).sum()), int((t != pad).sum()), s.shape[1], t.shape[1])
               for s, _, t in filter(None, batches))


def _raw(value):
    """The backend array behind a Tensor (or the value itself)."""
    return value.data if isinstance(value, mt.Tensor) else value


def _gpu_name() -> str:
    try:
        import cupy

        props = cupy.cuda.runtime.getDeviceProperties(cupy.cuda.Device().id)
        return props["name"].decode() if isinstance(props["name"], bytes) else props["name"]
    except Exception:  # noqa: BLE001 - MFU is then reported as n/a
        return "unknown GPU"


class _Window:
    """Sums over the updates since the last log line (losses stay on the device until read)."""

    def __init__(self):
        self.updates = self.src_tokens = self.tgt_tokens = self.padded = 0
        self.loss_sum = self.nll_sum = 0.0
        self.seconds = self.flops = 0.0
        self.grad_norm = None

    def add(self, stats: StepStats, seconds: float, flops: float) -> None:
        self.updates += 1
        self.src_tokens += stats.src_tokens
        self.tgt_tokens += stats.tgt_tokens
        self.padded += stats.padded_tokens
        self.loss_sum = self.loss_sum + stats.loss_sum  # device scalars: no host sync
        self.nll_sum = self.nll_sum + _raw(stats.nll_sum)
        self.seconds += seconds
        self.flops += flops
        self.grad_norm = stats.grad_norm if stats.grad_norm is not None else self.grad_norm

    def summary(self, lr: float, scaler, peak) -> dict:
        updates, tgt = max(self.updates, 1), max(self.tgt_tokens, 1)
        loss, nll = float(self.loss_sum) / tgt, float(self.nll_sum) / tgt
        seconds = max(self.seconds, 1e-9)
        record = {
            "loss": loss, "nll": nll, "ppl": math.exp(min(nll, 50.0)), "lr": lr,
            "src_tokens_per_update": self.src_tokens / updates,
            "tgt_tokens_per_update": self.tgt_tokens / updates,
            "padding": 1.0 - (self.src_tokens + self.tgt_tokens) / max(self.padded, 1),
            "grad_norm": None if self.grad_norm is None else float(self.grad_norm),
            "tgt_tokens_per_s": self.tgt_tokens / seconds, "seconds": self.seconds,
            "mfu": mfu(self.flops / seconds, peak),
        }
        if scaler is not None:
            record.update(loss_scale=scaler.scale, skipped_steps=scaler.skipped_steps)
        return record


def _format_train(step: int, r: dict) -> str:
    parts = [f"step {step:>7}", f"loss {r['loss']:.3f}", f"nll {r['nll']:.3f}", f"ppl {r['ppl']:.2f}",
             f"lr {r['lr']:.2e}", f"gnorm {r['grad_norm']:.2f}" if r["grad_norm"] is not None else "",
             f"src/tgt tok/upd {r['src_tokens_per_update']:.0f}/{r['tgt_tokens_per_update']:.0f}",
             f"tgt tok/s {r['tgt_tokens_per_s']:.0f}", f"pad {100 * r['padding']:.1f}%",
             f"mfu {100 * r['mfu']:.1f}%" if r["mfu"] is not None else "mfu n/a"]
    if "loss_scale" in r:
        parts.append(f"scale {r['loss_scale']:g}")
    return " | ".join(p for p in parts if p)
