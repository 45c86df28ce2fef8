"""Training checkpoints: save, resume exactly, load for decoding, average (§6.1).

A training checkpoint is a transformer.model_io file (weights + Adam moments and
step) whose metadata also holds what an exact resume needs:

    train_state     step, epoch, batch position, tokens seen, elapsed time
    rng_state       the dropout RNG's bit-generator state (PCG64: plain ints, JSON-safe)
    tokenizer_hash  sha256 of tokenizer.model, so a model never meets the wrong vocabulary
    loss_scaler     the fp16 loss scaler's state (mixed precision only)
    run_config      the resolved run config

Files are run_dir/ckpt_<step:08d>.safetensors, written atomically; only the
last `keep_last` are kept. A failed write (disk full) is an InputError that
names the newest good checkpoint, which stays the newest.
"""

import dataclasses
from pathlib import Path

import numpy as np

from train.errors import InputError
from train.tokenizer import Tokenizer
from transformer.checkpoint import (CheckpointError, average_checkpoints, check_shapes, checkpoint_path,
                                   latest_valid_checkpoint, list_checkpoints, load_checkpoint,
                                   save_checkpoint)
from transformer.model_io import OPTIMIZER_PREFIX, load_model, save_model


def save(run_dir: Path, model, model_config, optimizer, rng: np.random.Generator, tokenizer, state,
         scaler, run_config, keep_last: int) -> Path:
    """Write ckpt_<step>.safetensors for the current state and delete all but the newest `keep_last`."""
    path = checkpoint_path(run_dir, state.step)
    metadata = {
        "train_state": dataclasses.asdict(state),
        "rng_state": rng.bit_generator.state,
        "tokenizer_hash": tokenizer.model_hash,
        "loss_scaler": scaler.state_dict() if scaler is not None else None,
        "run_config": run_config.to_dict(),
    }
    try:  # atomic: a failed write leaves no ckpt_* file behind, and older ones are not pruned
        save_model(path, model, model_config, optimizer=optimizer, metadata=metadata)
    except OSError as err:  # disk full, quota, the folder went read-only
        good = latest_valid_checkpoint(run_dir)
        kept = f"the newest good checkpoint is still {good.name}" if good else "no checkpoint was kept"
        raise InputError(f"{path}: cannot write the checkpoint ({err.strerror or err}); {kept}; "
                         f"free some space and run the same command again") from None
    for old in list_checkpoints(run_dir)[:-keep_last]:
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


def restore(path: Path, model, optimizer, rng: np.random.Generator, tokenizer: Tokenizer,
            reset_optimizer: bool = False) -> dict:
    """Load weights, Adam state (unless reset) and the RNG state from `path`; returns its metadata."""
    tensors, metadata = load_checkpoint(path)
    _check_tokenizer(path, metadata, tokenizer)
    for key in ("train_state", "rng_state"):
        if key not in metadata:
            raise CheckpointError(f"{path}: metadata has no {key!r}; not a training checkpoint of this tool")
    weights = {k: v for k, v in tensors.items() if not k.startswith(OPTIMIZER_PREFIX)}
    check_shapes({name: p.shape for name, p in model.named_parameters()}, weights, path)
    model.load_state_dict(weights)
    if not reset_optimizer:
        state = {k[len(OPTIMIZER_PREFIX):]: v for k, v in tensors.items() if k.startswith(OPTIMIZER_PREFIX)}
        try:
            optimizer.load_state_dict(state)
        except (KeyError, ValueError) as err:
            raise CheckpointError(f"{path}: optimizer state does not fit the model: {err}") from None
    rng.bit_generator.state = metadata["rng_state"]  # the Dropout modules share this generator
    return metadata


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
    metadata = {k: v for k, v in metadata.items() if k not in ("train_state", "rng_state", "loss_scaler")}
    metadata["averaged_from"] = [p.name for p in paths[-last:]]
    save_checkpoint(out, weights, metadata)
    return out
