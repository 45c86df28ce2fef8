"""Saving and loading a whole model (+ optimizer) as one checkpoint file (format: transformer/checkpoint.py).

Tensors in the file:
    <parameter name>             e.g. encoder.layers.0.self_attn.w_q.weight (float32)
    optimizer.m.<parameter name>  Adam first moments   (when an optimizer is saved)
    optimizer.v.<parameter name>  Adam second moments
    optimizer.step               int64 step count
Metadata (JSON): {"format": FORMAT, "config": config.to_dict(), ...caller's metadata}.
"""
from __future__ import annotations

from pathlib import Path

import numpy as np

from .checkpoint import CheckpointError, check_shapes, load_checkpoint, save_checkpoint
from .config import TransformerConfig
from .model import Transformer

FORMAT = "transformer-model/1"
OPTIMIZER_PREFIX = "optimizer."


def save_model(path, model: Transformer, config: TransformerConfig, optimizer=None, metadata: dict | None = None) -> None:
    """Write the model's parameters, the config (as JSON metadata) and optionally Adam's state to `path`."""
    tensors = model.state_dict()
    if optimizer is not None:
        for key, value in optimizer.state_dict().items():              # "step", "m.<name>", "v.<name>"
            tensors[OPTIMIZER_PREFIX + key] = np.asarray(value)
    meta = dict(metadata or {})
    meta.update(format=FORMAT, config=config.to_dict())
    save_checkpoint(path, tensors, meta)


def load_model(path, backend="cpu", vocab_size: int | None = None) -> tuple[Transformer, TransformerConfig, dict]:
    """(model, config, metadata) from a file written by save_model; the model is in eval mode.

    `vocab_size`, when given, must match the checkpoint's (e.g. the tokenizer you are about
    to use). Any missing, unexpected or mis-shaped tensor raises CheckpointError naming the
    file and the tensor.
    """
    path = Path(path)
    tensors, metadata = load_checkpoint(path)
    if "config" not in metadata:
        raise CheckpointError(f"{path.name}: no 'config' in the metadata (not written by save_model?)")
    try:
        config = TransformerConfig.from_dict(metadata["config"])
    except (TypeError, ValueError) as err:
        raise CheckpointError(f"{path.name}: bad config in the metadata: {err}") from None
    model = Transformer(config, np.random.default_rng(0), backend=backend)
    expected = {name: p.shape for name, p in model.named_parameters()}
    if vocab_size is not None and vocab_size != config.vocab_size:
        table = next(name for name in expected if name.startswith("embeddings."))
        raise CheckpointError(f"{path.name}: tensor {table!r} has a vocabulary of {config.vocab_size} "
                              f"but {vocab_size} was asked for")
    weights = {k: v for k, v in tensors.items() if not k.startswith(OPTIMIZER_PREFIX)}
    check_shapes(expected, weights, path)
    model.load_state_dict(weights)
    model.eval()
    return model, config, metadata


def load_optimizer_state(path, optimizer) -> None:
    """Restore Adam's moments and step saved by save_model(..., optimizer=...) into `optimizer`."""
    path = Path(path)
    tensors, _ = load_checkpoint(path)
    state = {k[len(OPTIMIZER_PREFIX):]: v for k, v in tensors.items() if k.startswith(OPTIMIZER_PREFIX)}
    if not state:
        raise CheckpointError(f"{path.name}: holds no optimizer state (saved without optimizer=?)")
    expected = {"step": ()}
    for name, p in optimizer.named_params:
        expected[f"m.{name}"] = expected[f"v.{name}"] = p.shape
    check_shapes({OPTIMIZER_PREFIX + k: v for k, v in expected.items()},
                 {OPTIMIZER_PREFIX + k: v for k, v in state.items()}, path)
    optimizer.load_state_dict(state)
