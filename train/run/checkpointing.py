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
has its optimizer file beside it until it is pruned. A run's checkpoints are the ones its
manifest lists (train/run/manifest.py): a file the user put there, whatever its name, is
never resumed from, averaged or pruned. Resuming uses the newest checkpoint
that has one; a newer weights-only checkpoint (its optimizer file lost or corrupt) is
named, never silently used for an exact resume. A failed write (disk full) is an
InputError that names the newest good checkpoint, which stays the newest.
"""

import contextlib
import dataclasses
import json
import re
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from train.data.tokenizer import Tokenizer
from train.errors import InputError
from train.run.manifest import MANIFEST_FILE, Manifest
from train.run.run_names import output_in_run
from transformer.checkpoint import (OPTIMIZER_PREFIX, CheckpointError, average_checkpoints, checkpoint_path,
                                   is_weight, load_checkpoint, load_model, load_weights, newest_valid,
                                   restore_optimizer, save_checkpoint, save_model)

BEST_FILE = "best.safetensors"
WEIGHTS = re.compile(r"ckpt_(\d{8})\.safetensors")  # transformer.checkpoint.checkpoint_path's names


@dataclass
class Progress:
    """Where training stands; saved in every checkpoint's metadata."""

    step: int = 0  # optimizer updates done
    epoch: int = 0  # passes over the training data started
    batch_pos: int = 0  # next batch within this epoch's shuffled order
    tokens_seen: int = 0  # target tokens trained on
    elapsed_s: float = 0.0  # training wall time over all sessions
    best_score: float | None = None  # best validation so far: its BLEU or -loss (train.best_metric)
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


def run_checkpoints(run_dir: Path) -> list[Path]:
    """The run's checkpoints (weights files its manifest lists and that are there), oldest step first."""
    manifest = Manifest.find(run_dir)
    if manifest is None:
        return []
    names = [n for n in manifest.listed() if WEIGHTS.fullmatch(n) and (manifest.run_dir / n).is_file()]
    return [manifest.run_dir / n for n in sorted(names)]


def latest_valid(run_dir: Path) -> Path | None:
    """The run's newest checkpoint that loads and verifies; corrupt ones are skipped with a warning."""
    return newest_valid(run_checkpoints(run_dir))


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
    manifest = Manifest.load(run_dir)
    path = checkpoint_path(run_dir, state.progress.step)
    adam = {OPTIMIZER_PREFIX + k: np.asarray(v) for k, v in state.optimizer.state_dict().items()}
    try:  # atomic: a failed write leaves no ckpt_* file behind, and older ones are not pruned
        with manifest.writing(optimizer_path(path).name) as side:
            save_checkpoint(side, adam, {"step": state.progress.step, "weights": path.name})
        with manifest.writing(path.name):
            save_model(path, state.model, metadata=_metadata(state))
    except OSError as err:  # disk full, quota, the folder went read-only
        manifest.remove(optimizer_path(path).name)
        good = latest_valid(run_dir)
        kept = f"the newest good checkpoint is still {good.name}" if good else "no checkpoint was kept"
        raise InputError(f"{path}: cannot write the checkpoint ({err.strerror or err}); {kept}; "
                         f"free some space and run the same command again") from None
    _prune(manifest, state.run_config.train.keep_last, state.run_config.train.keep_last_full)
    return path


def _prune(manifest: Manifest, keep_last: int, keep_last_full: int) -> None:
    """Delete the run's older checkpoints and optimizer files; only files the manifest lists, never another."""
    checkpoints = run_checkpoints(manifest.run_dir)
    for old in checkpoints[:-keep_last]:
        manifest.remove(old.name)
    for old in checkpoints[:-keep_last_full]:
        manifest.remove(optimizer_path(old).name)
    for name in manifest.listed():  # a killed save's optimizer file, without its weights
        weights = manifest.run_dir / name.replace(".optimizer", "")
        if name.endswith(".optimizer.safetensors") and not weights.is_file():
            manifest.remove(name)


def save_best(run_dir: Path, state: TrainState, record: dict) -> Path:
    """best.safetensors: the weights (no optimizer state) of the best validation so far, and its scores."""
    with Manifest.load(run_dir).writing(BEST_FILE) as path:
        save_model(path, state.model, metadata={"tokenizer_hash": state.tokenizer.model_hash, "valid": record,
                                                "step": state.progress.step, "run_config": state.run_config.to_dict()})
    return path


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
    newest = latest_valid(run_dir)
    if newest is None or reset_optimizer or has_optimizer_state(newest):
        return newest
    full = next((p for p in reversed(run_checkpoints(run_dir)) if p.name < newest.name and has_optimizer_state(p)),
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


# TransformerConfig fields that fine-tuning may change: they are not in the weights.
_NOT_ARCHITECTURE = ("p_drop", "attention_dropout", "eps_ls", "impl")


def init_tokenizer(ckpt: Path) -> Tokenizer:
    """`fit --init-from CKPT`: the tokenizer the checkpoint was trained with (tokenizer.model beside it)."""
    return _init_source(ckpt)[0]


def _init_source(ckpt: Path) -> tuple[Tokenizer, dict]:
    """(init_tokenizer's tokenizer, the checkpoint's metadata), the header read once."""
    ckpt = Path(ckpt)
    if not ckpt.is_file():
        raise InputError(f"{ckpt}: checkpoint not found (--init-from)")
    path = ckpt.parent / "tokenizer.model"
    if not path.is_file():
        raise InputError(f"{path}: not found; --init-from needs the tokenizer its checkpoint was trained with, "
                         f"beside the checkpoint")
    tokenizer = Tokenizer(path)
    _, metadata = load_checkpoint(ckpt, select=lambda name: False)  # the header (verified) only
    _check_tokenizer(ckpt, metadata, tokenizer)
    return tokenizer, metadata


def init_weights(ckpt: Path, state: TrainState) -> None:
    """Fine-tuning: `ckpt`'s weights in state.model (any model file of this tool: a checkpoint, best, an
    average); Adam, the schedule and the data order start afresh. The architecture must be the same."""
    tensors, metadata = load_checkpoint(ckpt, select=is_weight)
    _same_architecture(ckpt, metadata, state.model.config)
    load_weights(ckpt, tensors, state.model)


def check_init_from(ckpt: Path, model_config) -> None:
    """`fit --init-from CKPT` for a new run, checked before its run directory is made: the file, the tokenizer
    beside it and the architecture (`model_config`, the run's, at the tokenizer's vocabulary)."""
    tokenizer, metadata = _init_source(ckpt)
    _same_architecture(ckpt, metadata, model_config.replace(vocab_size=tokenizer.vocab_size))


def _same_architecture(ckpt: Path, metadata: dict, model_config) -> None:
    saved, mine = metadata.get("config", {}), model_config.to_dict()
    differ = [k for k in mine if k not in _NOT_ARCHITECTURE and saved.get(k) != mine[k]]
    if differ:
        shown = ", ".join(f"model.{k} {saved.get(k)!r} (checkpoint) vs {mine[k]!r} (config)" for k in differ[:3])
        raise InputError(f"{ckpt}: --init-from needs the checkpoint's architecture: {shown}")


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
    """§6.1: `model` with the mean weights of the last `last` of a run's checkpoints (unchanged if fewer than 2)."""
    chosen = list(checkpoints)[-last:]
    if len(chosen) < 2:
        return model
    _refuse_changed(chosen)
    tensors, _ = average_checkpoints(chosen)
    model.load_state_dict({k: v for k, v in tensors.items() if not k.startswith(OPTIMIZER_PREFIX)})
    return model


def average_last(run_dir: Path, last: int | None = None, out: Path | None = None,
                 force: bool = False) -> tuple[Path, list[str]]:
    """Write the average of a run's last `last` checkpoints (weights only) to `out`; returns (out, their names).

    `last` defaults to the run's train.average_last (§6.1: 5 for base, 20 for big). Only the
    checkpoints the run's manifest lists are averaged, and only their weights files are read.
    Inside a run directory the output is a file of that run's (never one of the user's).
    """
    run_dir = Path(run_dir)
    Manifest.load(run_dir)  # a run directory, or an InputError
    if last is None:
        last = _run_average_last(run_dir)
    if last < 1:
        raise InputError(f"--last must be at least 1, got {last}")
    paths = run_checkpoints(run_dir)
    if len(paths) < last:
        raise InputError(f"{run_dir}: has {len(paths)} checkpoints, fewer than --last {last}")
    out = Path(out) if out is not None else run_dir / f"averaged_last{last}.safetensors"
    if out.suffix != ".safetensors":  # not over the run's config.json, metrics.jsonl, ... (--force or not)
        raise InputError(f"{out}: --out must be a .safetensors file (averaged weights)")
    if any(out.resolve() == p.resolve() for p in paths):
        raise InputError(f"{out}: one of the run's checkpoints; choose another --out (an average never replaces one)")
    run = output_in_run(out, "average")  # in a run directory (this one or another, at any depth): a file of that run's
    if run is not None:
        run[0].refuse_if_foreign(run[1])
    if out.exists() and not force:
        raise InputError(f"{out}: exists; pass --force to overwrite or choose another --out")
    try:
        _refuse_changed(paths[-last:])  # hashes every checkpoint: after the quick checks of --out
        tensors, metadata = average_checkpoints(paths[-last:])
    except FileNotFoundError as err:  # pruned meanwhile by a `fit` still training in the run
        raise _pruned(run_dir, next((p for p in paths[-last:] if not p.exists()), err.filename)) from None
    weights = {k: v for k, v in tensors.items() if not k.startswith(OPTIMIZER_PREFIX)}
    metadata = {k: v for k, v in metadata.items() if k not in ("progress", "rng_state", "loss_scaler", "update")}
    metadata["averaged_from"] = [p.name for p in paths[-last:]]
    with run[0].writing(run[1]) if run is not None else contextlib.nullcontext():
        save_checkpoint(out, weights, metadata)
    return out, metadata["averaged_from"]


def _pruned(run_dir: Path, name) -> InputError:
    return InputError(f"{name}: deleted while it was being averaged (a `fit` training in {run_dir} keeps only its "
                      f"newest train.keep_last checkpoints); nothing was written; run average again")


def _refuse_changed(checkpoints: list[Path]) -> None:
    """InputError unless the run's manifest lists each of these checkpoints with the bytes it has now (a file
    that changed since this tool wrote it is the user's: never averaged into a model of ours)."""
    gone = [p for p in checkpoints if not p.exists()]
    if gone:
        raise _pruned(checkpoints[0].parent, gone[0])
    manifest = Manifest.find(checkpoints[0].parent)
    changed = [p.name for p in checkpoints if manifest is None or not manifest.owns(p.name)]
    if changed:
        raise InputError(f"{checkpoints[0].parent}: {', '.join(changed)} changed since this tool wrote it (its sha256 "
                         f"is not the one in the run's {MANIFEST_FILE}); nothing was averaged; move it out of the run "
                         f"directory or average fewer")


def _run_average_last(run_dir: Path) -> int:
    try:
        return int(json.loads((run_dir / "config.json").read_text(encoding="utf-8"))["train"]["average_last"])
    except (OSError, ValueError, KeyError, TypeError):
        raise InputError(f"{run_dir}: no run config (config.json) to take train.average_last from; "
                         f"pass --last K") from None
