"""Training checkpoints: save, resume exactly, load for decoding, average (§6.1).

A training checkpoint is a transformer.checkpoint model file (weights + Adam moments
and step) whose metadata also holds what an exact resume needs:

    progress        step, epoch, batch position, tokens seen, elapsed time
    rng_state       the dropout RNG's bit-generator state (PCG64: plain ints, JSON-safe)
    tokenizer_hash  sha256 of tokenizer.model, so a model never meets the wrong vocabulary
    loss_scaler     the fp16 loss scaler's state (mixed precision only)
    run_config      the resolved run config

Files are run_dir/ckpt_<step:08d>.safetensors, written atomically; only the
last `keep_last` are kept. A failed write (disk full) is an InputError that
names the newest good checkpoint, which stays the newest.
"""

import dataclasses
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from train.errors import InputError
from train.tokenizer import Tokenizer
from transformer.checkpoint import (OPTIMIZER_PREFIX, CheckpointError, average_checkpoints, checkpoint_path,
                                   latest_valid_checkpoint, list_checkpoints, load_checkpoint, load_model,
                                   load_weights, restore_optimizer, save_checkpoint, save_model)


@dataclass
class Progress:
    """Where training stands; saved in every checkpoint's metadata."""

    step: int = 0  # optimizer updates done
    epoch: int = 0  # passes over the training data started
    batch_pos: int = 0  # next batch within this epoch's shuffled order
    tokens_seen: int = 0  # target tokens trained on
    elapsed_s: float = 0.0  # training wall time over all sessions


@dataclass
class TrainState:
    """Everything a training checkpoint saves and an exact resume restores."""

    run_config: object  # train.config.RunConfig
    model: object  # transformer.Transformer
    optimizer: object  # minitensor.optim.Adam
    rng: np.random.Generator  # drew the initial weights; draws every dropout seed (§5.4)
    tokenizer: Tokenizer
    scaler: object = None  # fp16 mixed precision's DynamicLossScaler, else None
    progress: Progress = dataclasses.field(default_factory=Progress)


def save(run_dir: Path, state: TrainState) -> Path:
    """Write ckpt_<step>.safetensors for the current state and delete all but the newest `train.keep_last`."""
    path = checkpoint_path(run_dir, state.progress.step)
    metadata = {
        "progress": dataclasses.asdict(state.progress),
        "rng_state": state.rng.bit_generator.state,
        "tokenizer_hash": state.tokenizer.model_hash,
        "loss_scaler": state.scaler.state_dict() if state.scaler is not None else None,
        "run_config": state.run_config.to_dict(),
    }
    try:  # atomic: a failed write leaves no ckpt_* file behind, and older ones are not pruned
        save_model(path, state.model, optimizer=state.optimizer, metadata=metadata)
    except OSError as err:  # disk full, quota, the folder went read-only
        good = latest_valid_checkpoint(run_dir)
        kept = f"the newest good checkpoint is still {good.name}" if good else "no checkpoint was kept"
        raise InputError(f"{path}: cannot write the checkpoint ({err.strerror or err}); {kept}; "
                         f"free some space and run the same command again") from None
    for old in list_checkpoints(run_dir)[:-state.run_config.train.keep_last]:
        old.unlink()
    return path


def latest(run_dir: Path) -> Path | None:
    """The newest checkpoint that verifies (corrupt ones are skipped with a warning).

    Also deletes the temporary files of writes that a killed run left half done
    (ckpt_*.safetensors.tmp-<pid>); they never count as checkpoints.
    """
    for stale in Path(run_dir).glob("ckpt_*.safetensors.tmp-*"):
        stale.unlink(missing_ok=True)
    return latest_valid_checkpoint(run_dir)


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


def average_last(run_dir: Path, last: int, out: Path | None = None, force: bool = False) -> Path:
    """Write the average of a run's last `last` checkpoints (weights only) to `out`."""
    run_dir = Path(run_dir)
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
    metadata = {k: v for k, v in metadata.items() if k not in ("progress", "rng_state", "loss_scaler")}
    metadata["averaged_from"] = [p.name for p in paths[-last:]]
    save_checkpoint(out, weights, metadata)
    return out
