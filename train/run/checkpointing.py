"""Training checkpoints: save, resume exactly, load for decoding, average (§6.1), keep the best.

A training checkpoint is two transformer.checkpoint files:

    ckpt_<step:08d>.safetensors            the weights, and in the metadata what an exact resume needs:
        progress        step, epoch, batch position, tokens seen, elapsed time, best validation so far
        rng_state       the dropout RNG's bit-generator state (PCG64: plain ints, JSON-safe)
        tokenizer_hash  sha256 of tokenizer.model, so a model never meets the wrong vocabulary
        loss_scaler     the fp16 loss scaler's state (mixed precision only)
        update          world size, micro-batches per rank (accumulation) and their token budget, tokens
                        per rank and per update (train/distributed/global_batch.py): a resume on
                        another world size keeps the same update
        run_config      the resolved run config
    ckpt_<step:08d>.optimizer.safetensors  Adam's moments and step: twice the weights' size

Only the newest `train.keep_last` checkpoints are kept, and only the newest
`train.keep_last_full` (default 1) keep their optimizer file; the older ones are
weights only, which is all that decoding and averaging (§6.1) read. A base model's
checkpoint is then 250 MB instead of 750 MB, a big model's 850 MB instead of 2.6 GB.

Both files are written atomically, the optimizer file first, so a weights file on disk
has its optimizer file beside it until it is pruned. Resuming uses the newest checkpoint
that has one; a newer weights-only checkpoint (its optimizer file lost or corrupt) is
named, never silently used for an exact resume. A failed write (disk full) is an
InputError that names the newest good checkpoint, which stays the newest.
"""

import dataclasses
import json
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from train.data.tokenizer import Tokenizer
from train.errors import InputError
from transformer.checkpoint import (OPTIMIZER_PREFIX, CheckpointError, average_checkpoints, checkpoint_path,
                                   latest_valid_checkpoint, list_checkpoints, load_checkpoint, load_model,
                                   load_weights, restore_optimizer, save_checkpoint, save_model)

BEST_FILE = "best.safetensors"


@dataclass
class Progress:
    """Where training stands; saved in every checkpoint's metadata."""

    step: int = 0  # optimizer updates done
    epoch: int = 0  # passes over the training data started
    batch_pos: int = 0  # next batch within this epoch's shuffled order
    tokens_seen: int = 0  # target tokens trained on
    elapsed_s: float = 0.0  # training wall time over all sessions
    best_score: float | None = None  # best validation BLEU so far (or -loss when BLEU is off)
    best_step: int = 0  # the step of best.safetensors
    bad_validations: int = 0  # validations since the best one (early stopping: train.patience)


@dataclass
class TrainState:
    """Everything a training checkpoint saves and an exact resume restores."""

    run_config: object  # train.config.RunConfig
    model: object  # transformer.Transformer
    optimizer: object  # minitensor.optim.Adam
    rng: np.random.Generator  # drew the initial weights; draws every dropout seed (§5.4)
    tokenizer: Tokenizer
    scaler: object = None  # fp16 mixed precision's DynamicLossScaler, else None
    plan: object = None  # train.distributed.global_batch.UpdatePlan: the update over the ranks
    progress: Progress = dataclasses.field(default_factory=Progress)


def optimizer_path(checkpoint: Path) -> Path:
    """ckpt_<step>.safetensors -> ckpt_<step>.optimizer.safetensors (Adam's state for that checkpoint)."""
    return checkpoint.with_name(checkpoint.name.removesuffix(".safetensors") + ".optimizer.safetensors")


def _metadata(state: TrainState) -> dict:
    return {"progress": dataclasses.asdict(state.progress), "rng_state": state.rng.bit_generator.state,
            "tokenizer_hash": state.tokenizer.model_hash,
            "loss_scaler": state.scaler.state_dict() if state.scaler is not None else None,
            "update": state.plan.record() if state.plan is not None else None,
            "run_config": state.run_config.to_dict()}


def save(run_dir: Path, state: TrainState) -> Path:
    """Write ckpt_<step> (weights, and optimizer file) and prune to `train.keep_last` / `train.keep_last_full`."""
    path = checkpoint_path(run_dir, state.progress.step)
    adam = {OPTIMIZER_PREFIX + k: np.asarray(v) for k, v in state.optimizer.state_dict().items()}
    try:  # atomic: a failed write leaves no ckpt_* file behind, and older ones are not pruned
        save_checkpoint(optimizer_path(path), adam, {"step": state.progress.step, "weights": path.name})
        save_model(path, state.model, metadata=_metadata(state))
    except OSError as err:  # disk full, quota, the folder went read-only
        optimizer_path(path).unlink(missing_ok=True)
        good = latest_valid_checkpoint(run_dir)
        kept = f"the newest good checkpoint is still {good.name}" if good else "no checkpoint was kept"
        raise InputError(f"{path}: cannot write the checkpoint ({err.strerror or err}); {kept}; "
                         f"free some space and run the same command again") from None
    _prune(Path(run_dir), state.run_config.train.keep_last, state.run_config.train.keep_last_full)
    return path


def _prune(run_dir: Path, keep_last: int, keep_last_full: int) -> None:
    checkpoints = list_checkpoints(run_dir)
    for old in checkpoints[:-keep_last]:
        old.unlink()
    for old in checkpoints[:-keep_last_full]:
        optimizer_path(old).unlink(missing_ok=True)
    for side in run_dir.glob("ckpt_*.optimizer.safetensors"):  # a killed save's, without its weights
        if not side.with_name(side.name.replace(".optimizer", "")).is_file():
            side.unlink(missing_ok=True)


def save_best(run_dir: Path, state: TrainState, record: dict) -> Path:
    """best.safetensors: the weights (no optimizer state) of the best validation so far, and its scores."""
    path = Path(run_dir) / BEST_FILE
    save_model(path, state.model, metadata={"tokenizer_hash": state.tokenizer.model_hash, "valid": record,
                                            "step": state.progress.step, "run_config": state.run_config.to_dict()})
    return path


def latest(run_dir: Path) -> Path | None:
    """The newest checkpoint that verifies (corrupt ones are skipped with a warning).

    Also deletes the temporary files of writes that a killed run left half done
    (ckpt_*.safetensors.tmp-<pid>); they never count as checkpoints.
    """
    for stale in Path(run_dir).glob("ckpt_*.safetensors.tmp-*"):
        stale.unlink(missing_ok=True)
    return latest_valid_checkpoint(run_dir)


def has_optimizer_state(checkpoint: Path) -> bool:
    """True when the checkpoint's optimizer file is there and verifies."""
    try:
        load_checkpoint(optimizer_path(checkpoint), verify=True)
    except (CheckpointError, OSError):
        return False
    return True


def resume_point(run_dir: Path, reset_optimizer: bool, say=print) -> Path | None:
    """The checkpoint to resume from: the newest with optimizer state (or, with `reset_optimizer`, the newest).

    A newest checkpoint without optimizer state is never resumed from as if it were exact:
    an older full one is used and named, and if there is none, an InputError says what to do.
    """
    newest = latest(run_dir)
    if newest is None or reset_optimizer or has_optimizer_state(newest):
        return newest
    full = next((p for p in reversed(list_checkpoints(run_dir)) if p.name < newest.name and has_optimizer_state(p)),
                None)
    if full is None:
        raise InputError(f"{newest}: no optimizer state to resume from (its {optimizer_path(newest).name} is missing "
                         f"or corrupt, and no older checkpoint has one); --reset-optimizer continues from its "
                         f"weights with a fresh Adam (not an exact resume), --force starts over")
    say(f"{newest.name} holds weights only (its optimizer file is missing or corrupt); "
        f"resuming exactly from {full.name}, the newest checkpoint with optimizer state")
    return full


def recorded_update(path: Path) -> dict | None:
    """The update plan a training checkpoint recorded (read from its header only), or None if it has none."""
    _, metadata = load_checkpoint(path, select=lambda name: False)
    return metadata.get("update")


def _check_tokenizer(path: Path, metadata: dict, tokenizer: Tokenizer) -> None:
    vocab = metadata.get("config", {}).get("vocab_size")
    if vocab is not None and vocab != tokenizer.vocab_size:
        raise CheckpointError(f"{path}: the model has a vocabulary of {vocab} but the tokenizer "
                              f"{tokenizer.model_path} has {tokenizer.vocab_size}; use the tokenizer the "
                              f"model was trained with")
    saved_hash = metadata.get("tokenizer_hash")
    if saved_hash is not None and saved_hash != tokenizer.model_hash:
        raise CheckpointError(f"{path}: the model was trained with a different tokenizer than "
                              f"{tokenizer.model_path} (sha256 {saved_hash[:12]} vs {tokenizer.model_hash[:12]})")


def restore(path: Path, state: TrainState, reset_optimizer: bool = False) -> None:
    """Load weights, Adam state (unless reset), the RNG, the loss scale and the progress from `path`."""
    tensors, metadata = load_checkpoint(path)
    _check_tokenizer(path, metadata, state.tokenizer)
    for key in ("progress", "rng_state"):
        if key not in metadata:
            raise CheckpointError(f"{path}: metadata has no {key!r}; not a training checkpoint of this tool")
    load_weights(path, tensors, state.model)
    if not reset_optimizer:
        if not any(k.startswith(OPTIMIZER_PREFIX) for k in tensors):  # the usual case: state in its own file
            path = optimizer_path(path)
            tensors, _ = load_checkpoint(path)
        try:
            restore_optimizer(path, tensors, state.optimizer)
        except (KeyError, ValueError) as err:
            raise CheckpointError(f"{path}: optimizer state does not fit the model: {err}") from None
    state.rng.bit_generator.state = metadata["rng_state"]  # the Dropout modules share this generator
    if state.scaler is not None and metadata.get("loss_scaler"):
        state.scaler.load_state_dict(metadata["loss_scaler"])
    state.progress = Progress(**metadata["progress"])


def load_for_inference(ckpt: Path, tokenizer_path: Path | None = None, backend: str = "cpu"):
    """(model in eval mode, tokenizer) for decoding; the tokenizer defaults to the one beside the checkpoint."""
    ckpt = Path(ckpt)
    if not ckpt.is_file():
        raise InputError(f"{ckpt}: checkpoint not found")
    tokenizer_path = Path(tokenizer_path) if tokenizer_path is not None else ckpt.parent / "tokenizer.model"
    if not tokenizer_path.is_file():
        raise InputError(f"{tokenizer_path}: tokenizer not found; pass --tokenizer PATH")
    tokenizer = Tokenizer(tokenizer_path)
    try:
        model, _, metadata = load_model(ckpt, backend=backend)
    except RuntimeError as err:  # an unavailable backend
        raise InputError(str(err)) from None
    _check_tokenizer(ckpt, metadata, tokenizer)
    return model, tokenizer


def averaged_model(model, checkpoints: list[Path], last: int):
    """§6.1: `model` with the mean weights of the last `last` checkpoints (unchanged if fewer than 2)."""
    chosen = list(checkpoints)[-last:]
    if len(chosen) < 2:
        return model
    tensors, _ = average_checkpoints(chosen)
    model.load_state_dict({k: v for k, v in tensors.items() if not k.startswith(OPTIMIZER_PREFIX)})
    return model


def average_last(run_dir: Path, last: int | None = None, out: Path | None = None,
                 force: bool = False) -> tuple[Path, list[str]]:
    """Write the average of a run's last `last` checkpoints (weights only) to `out`; returns (out, their names).

    `last` defaults to the run's train.average_last (§6.1: 5 for base, 20 for big). Only the
    weights files are read, never the optimizer state.
    """
    run_dir = Path(run_dir)
    if last is None:
        last = _run_average_last(run_dir)
    if last < 1:
        raise InputError(f"--last must be at least 1, got {last}")
    paths = list_checkpoints(run_dir)
    if len(paths) < last:
        raise InputError(f"{run_dir}: has {len(paths)} checkpoints, fewer than --last {last}")
    out = Path(out) if out is not None else run_dir / f"averaged_last{last}.safetensors"
    if out.exists() and not force:
        raise InputError(f"{out}: exists; pass --force to overwrite or choose another --out")
    tensors, metadata = average_checkpoints(paths[-last:])
    weights = {k: v for k, v in tensors.items() if not k.startswith(OPTIMIZER_PREFIX)}
    metadata = {k: v for k, v in metadata.items() if k not in ("progress", "rng_state", "loss_scaler", "update")}
    metadata["averaged_from"] = [p.name for p in paths[-last:]]
    save_checkpoint(out, weights, metadata)
    return out, metadata["averaged_from"]


def _run_average_last(run_dir: Path) -> int:
    try:
        return int(json.loads((run_dir / "config.json").read_text(encoding="utf-8"))["train"]["average_last"])
    except (OSError, ValueError, KeyError, TypeError):
        raise InputError(f"{run_dir}: no run config (config.json) to take train.average_last from; "
                         f"pass --last K") from None
