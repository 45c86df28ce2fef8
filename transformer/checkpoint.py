"""Checkpoints as safetensors files through the `safetensors` package, with integrity checks and atomic writes on top.

Two layers: the file format (save_checkpoint / load_checkpoint of plain NumPy dicts,
verified by sha256), and whole models on top of it (save_model / load_model /
restore_optimizer). Checkpoint averaging follows §6.1 ("averaging the last 5 checkpoints").

The format (https://github.com/huggingface/safetensors) is the package's: an 8-byte header
length, a JSON header {name: {dtype, shape, data_offsets}, "__metadata__": {str: str}}, then
the tensors' little-endian bytes. Any safetensors reader (the package's NumPy and PyTorch
loaders among them) reads our files. What we add:

- one metadata entry, "checkpoint": JSON {"metadata": <the caller's>, "sha256": {"tensors":
  {name: digest of its bytes}, "header": digest of every name, dtype, shape and the metadata}}.
  A flipped byte is blamed on the tensor that holds it; an edited shape or step, which still
  parses, fails the header digest. One entry, because the format's metadata map has no order:
  with one, the same tensors and metadata always give the same bytes.
- atomic writes: path.tmp-<pid>, fsync, rename, fsync of the folder.
- one-line CheckpointError naming the file and, where known, the tensor.
- lazy reads: `load_checkpoint(path, select=...)` reads (and verifies) only the tensors asked for,
  from a memory map: averaging or decoding never reads an optimizer's moments.

Files written by this module's earlier, hand-written writer (metadata entries "json", "sha256",
"sha256_tensors", "sha256_header") still load and verify (tests/transformer/data/).
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import warnings
from collections.abc import Callable
from pathlib import Path

import numpy as np
from safetensors import SafetensorError, safe_open
from safetensors.numpy import save as serialize

DTYPES = {
    "F16": np.dtype("<f2"),
    "F32": np.dtype("<f4"),
    "F64": np.dtype("<f8"),
    "I32": np.dtype("<i4"),
    "I64": np.dtype("<i8"),
    "U8": np.dtype("u1"),
    "U16": np.dtype("<u2"),  # bf16 is stored as its 16 bits (minitensor.dtypes.BF16)
    "BOOL": np.dtype("?"),
}
_CODES = {dtype: code for code, dtype in DTYPES.items()}
_CHECKPOINT_NAME = re.compile(r"ckpt_(\d+)\.safetensors")
META_KEY = "checkpoint"


class CheckpointError(ValueError):
    """A checkpoint that cannot be used; the message names the file and, where known, the tensor."""


def checkpoint_path(run_dir: str | Path, step: int) -> Path:
    """The file name list_checkpoints() expects: run_dir/ckpt_<step:08d>.safetensors."""
    return Path(run_dir) / f"ckpt_{step:08d}.safetensors"


def _sha256(array: np.ndarray) -> str:
    """sha256 of a C-contiguous little-endian array's bytes, as they lie in the file."""
    return hashlib.sha256(np.ascontiguousarray(array).reshape(-1).view(np.uint8)).hexdigest()


def _little_endian(name: str, array: np.ndarray, path: Path) -> tuple[str, np.ndarray]:
    """(dtype code, array in the file's byte order) or CheckpointError for an unsupported dtype."""
    array = np.asarray(array)
    code = _CODES.get(array.dtype.newbyteorder("<"))  # big-endian input is byte-swapped on write
    if code is None:
        supported = ", ".join(str(d) for d in DTYPES.values())
        raise CheckpointError(f"{path.name}: tensor {name!r} has dtype {array.dtype}, not one of {supported}")
    return code, np.require(array.astype(DTYPES[code], copy=False), requirements="C")  # 0-d stays 0-d


def _header_digest(layout: dict[str, tuple[str, tuple]], metadata: dict) -> str:
    """sha256 over every tensor's name, dtype and shape and the caller's metadata, in canonical JSON."""
    canonical = {"tensors": {name: [code, list(shape)] for name, (code, shape) in sorted(layout.items())},
                 "metadata": metadata}
    return hashlib.sha256(json.dumps(canonical, sort_keys=True, separators=(",", ":")).encode("utf-8")).hexdigest()


def save_checkpoint(path: str | Path, tensors: dict[str, np.ndarray], metadata: dict) -> None:
    """Write tensors and JSON-able metadata to path atomically (readers see the old file or the new one).

    Writes path.tmp-<pid>, fsyncs it, renames it onto path, then fsyncs the folder so the
    rename itself survives a crash.
    """
    path = Path(path)
    arrays, layout = {}, {}
    for name in sorted(tensors):
        code, arrays[name] = _little_endian(name, tensors[name], path)
        layout[name] = (code, arrays[name].shape)
    integrity = {"tensors": {name: _sha256(array) for name, array in arrays.items()},
                 "header": _header_digest(layout, metadata)}
    entry = json.dumps({"metadata": metadata, "sha256": integrity}, sort_keys=True)
    data = serialize(arrays, metadata={META_KEY: entry})

    tmp = path.with_name(f"{path.name}.tmp-{os.getpid()}")
    try:
        with open(tmp, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except OSError as err:  # a full disk's write() names no file: name this one
        err.filename = err.filename or str(path)
        raise
    finally:
        if tmp.exists():
            tmp.unlink()
    _fsync_dir(path.parent)


def _fsync_dir(folder: Path) -> None:
    if not hasattr(os, "O_DIRECTORY"):  # Windows cannot open a folder to fsync it
        return
    fd = os.open(folder, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def load_checkpoint(path: str | Path, verify: bool = True,
                    select: Callable[[str], bool] | None = None) -> tuple[dict[str, np.ndarray], dict]:
    """Read (tensors, metadata) written by save_checkpoint (or any safetensors file in DTYPES).

    Only the tensors whose names pass `select` (all by default) are read, from a memory map.
    Arrays are writable copies. With verify=True the stored sha256 digests of the header and of
    every tensor read are checked. Raises CheckpointError naming the file and tensor on any problem.
    """
    path = Path(path)
    try:
        with safe_open(path, framework="numpy") as f:
            raw_meta = f.metadata() or {}
            layout = {name: (f.get_slice(name).get_dtype(), tuple(f.get_slice(name).get_shape()))
                      for name in f.keys()}
            tensors = {name: f.get_tensor(name) for name in sorted(layout) if select is None or select(name)}
    except SafetensorError as err:
        raise CheckpointError(_why_unreadable(path, err)) from None
    for name, (code, _) in layout.items():
        if code not in DTYPES:
            raise CheckpointError(f"{path.name}: tensor {name!r} has dtype {code}, not one of {', '.join(DTYPES)}")
    metadata, digests, header_ok = _integrity(path, raw_meta, layout)
    if verify and digests is not None:
        if not header_ok:
            raise CheckpointError(f"{path.name}: header fails its sha256 check (a shape, offset or metadata changed)")
        for name, array in tensors.items():
            if _sha256(array) != digests.get(name):
                raise CheckpointError(f"{path.name}: tensor {name!r} fails its sha256 check (bytes changed)")
    return tensors, metadata


def _integrity(path: Path, raw_meta: dict, layout: dict) -> tuple[dict, dict | None, bool]:
    """(the caller's metadata, each tensor's stored digest, whether the header matches its digest).

    The digests are None for a file from another writer: nothing to verify against.
    """
    try:
        if META_KEY in raw_meta:
            entry = json.loads(raw_meta[META_KEY])
            stored = entry["sha256"]
            return entry["metadata"], stored["tensors"], stored["header"] == _header_digest(layout, entry["metadata"])
        metadata = json.loads(raw_meta["json"]) if "json" in raw_meta else dict(raw_meta)
        if "sha256_tensors" not in raw_meta:
            return metadata, None, True
        return metadata, json.loads(raw_meta["sha256_tensors"]), _legacy_header_ok(path)
    except (json.JSONDecodeError, KeyError, TypeError) as err:
        raise CheckpointError(f"{path.name}: its metadata is not this tool's ({type(err).__name__}: {err})") from None


def _legacy_header_ok(path: Path) -> bool:
    """The hand-written writer's header digest: the header as it lies in the file, less the digest itself."""
    header = _raw_header(path)
    meta = dict(header.get("__metadata__", {}))
    stored = meta.pop("sha256_header", None)
    canonical = json.dumps(dict(header, __metadata__=meta), sort_keys=True, separators=(",", ":"))
    return stored is None or stored == hashlib.sha256(canonical.encode("utf-8")).hexdigest()


def content_digest(path: str | Path) -> str:
    """sha256 of the file's header: every tensor's name, shape, offsets and (in the metadata) sha256.

    Read from the header alone, so cheap for any size; two files with the same digest hold the
    same bytes as far as load_checkpoint(verify=True) can tell.
    """
    header = _raw_header(Path(path))
    return hashlib.sha256(json.dumps(header, sort_keys=True, separators=(",", ":")).encode("utf-8")).hexdigest()


MAX_HEADER_BYTES = 100_000_000  # the safetensors format's limit


def _raw_header(path: Path) -> dict:
    """The JSON header as it lies in the file (for messages and old files); CheckpointError if malformed."""
    size = path.stat().st_size
    with open(path, "rb") as f:
        head = f.read(8)
        if len(head) < 8:
            raise CheckpointError(f"{path.name}: file has {size} bytes, too short for the 8-byte header length")
        n = int.from_bytes(head, "little")
        if n > MAX_HEADER_BYTES and 8 + n > size:  # text, say: no header length of a file of ours
            raise CheckpointError(f"{path.name}: not a .safetensors checkpoint (its first 8 bytes give no header "
                                  f"length: {head!r})")
        if 8 + n > size:
            raise CheckpointError(f"{path.name}: header claims {n} bytes but the file has {size} bytes")
        try:
            header = json.loads(f.read(n).decode("utf-8"))
        except (UnicodeDecodeError, json.JSONDecodeError) as err:
            raise CheckpointError(f"{path.name}: header is not valid JSON ({err})") from None
    if not isinstance(header, dict):
        raise CheckpointError(f"{path.name}: header is a JSON {type(header).__name__}, expected an object")
    return header


def _why_unreadable(path: Path, err: SafetensorError) -> str:
    """One line on why the safetensors reader refused the file, naming the tensor where one is at fault."""
    header = _raw_header(path)  # raises itself for a short file, a cut header or bad JSON
    start, size = 8 + int.from_bytes(path.read_bytes()[:8], "little"), path.stat().st_size
    for name, info in sorted(header.items(), key=lambda item: str(item[1])):
        if name == "__metadata__" or not isinstance(info, dict):
            continue
        begin, end = info.get("data_offsets", (0, 0))
        dtype = DTYPES.get(info.get("dtype"))
        if dtype is not None and end - begin != dtype.itemsize * int(np.prod(info.get("shape", ()))):
            return (f"{path.name}: tensor {name!r} has shape {tuple(info['shape'])} of {info['dtype']} "
                    f"but spans {end - begin} bytes")
        if start + end > size:
            return f"{path.name}: tensor {name!r} needs bytes {start + begin}..{start + end} but the file has {size} bytes"
    return f"{path.name}: not a readable safetensors file ({err})"


def check_shapes(expected: dict[str, tuple], tensors: dict[str, np.ndarray], path: str | Path) -> None:
    """Raise CheckpointError naming the file and tensors that are missing, unexpected or mis-shaped."""
    name = Path(path).name
    problems = [f"tensor {k!r} is missing (expected shape {tuple(v)})" for k, v in expected.items() if k not in tensors]
    problems += [f"unexpected tensor {k!r} of shape {tensors[k].shape}" for k in tensors if k not in expected]
    problems += [
        f"tensor {k!r} has shape {tensors[k].shape} but {tuple(v)} is expected"
        for k, v in expected.items()
        if k in tensors and tuple(tensors[k].shape) != tuple(v)
    ]
    if problems:
        more = f"; and {len(problems) - 3} more" if len(problems) > 3 else ""
        raise CheckpointError(f"{name}: " + "; ".join(problems[:3]) + more)


def average_checkpoints(paths: list[str | Path],
                        select: Callable[[str], bool] | None = None) -> tuple[dict[str, np.ndarray], dict]:
    """§6.1: element-wise mean of the float tensors of several checkpoints, and the last one's metadata.

    Sums in float64 and casts back to each tensor's dtype. Integer and bool tensors
    (step counters, masks) are not averaged: they are taken from the last file.
    All files must hold the same names, shapes and dtypes; only the tensors passing `select` are read.
    """
    paths = [Path(p) for p in paths]
    if not paths:
        raise CheckpointError("average_checkpoints: no checkpoint files given")
    first, metadata = load_checkpoint(paths[0], select=select)
    sums = {k: v.astype(np.float64) for k, v in first.items() if np.issubdtype(v.dtype, np.floating)}
    last = first
    for path in paths[1:]:
        tensors, metadata = load_checkpoint(path, select=select)
        for k in sorted(first.keys() | tensors.keys()):
            if k not in tensors:
                raise CheckpointError(f"{path.name}: tensor {k!r} is missing (it is in {paths[0].name})")
            if k not in first:
                raise CheckpointError(f"{path.name}: tensor {k!r} is not in {paths[0].name}")
            a, b = first[k], tensors[k]
            if a.shape != b.shape or a.dtype != b.dtype:
                raise CheckpointError(
                    f"{path.name}: tensor {k!r} is {b.dtype}{list(b.shape)} "
                    f"but {a.dtype}{list(a.shape)} in {paths[0].name}"
                )
            if k in sums:
                sums[k] += b
        last = tensors
    averaged = {k: (sums[k] / len(paths)).astype(v.dtype) if k in sums else v for k, v in last.items()}
    return averaged, metadata


def list_checkpoints(run_dir: str | Path) -> list[Path]:
    """Files run_dir/ckpt_<step>.safetensors, oldest step first; [] if the folder does not exist."""
    run_dir = Path(run_dir)
    if not run_dir.is_dir():
        return []
    found = [(int(m.group(1)), p) for p in run_dir.iterdir() if (m := _CHECKPOINT_NAME.fullmatch(p.name))]
    return [p for _, p in sorted(found)]


def latest_valid_checkpoint(run_dir: str | Path) -> Path | None:
    """The newest checkpoint that loads and verifies; corrupt ones are skipped with a warning."""
    return newest_valid(list_checkpoints(run_dir))


def newest_valid(paths: list[Path]) -> Path | None:
    """The last of `paths` (oldest first) that loads and verifies; corrupt ones are skipped with a warning."""
    for path in reversed(paths):
        try:
            load_checkpoint(path, verify=True)
        except (CheckpointError, OSError) as err:
            warnings.warn(f"skipping unusable checkpoint: {err}", stacklevel=2)
            continue
        return path
    return None


# --------------------------------------------------------------------------- whole models
# A model file holds each parameter by name (e.g. encoder.layers.0.self_attn.w_q.weight), optionally
# Adam's state as optimizer.m.<name>, optimizer.v.<name>, optimizer.step, and in its metadata
# {"format": MODEL_FORMAT, "config": config.to_dict(), ...the caller's metadata}.
MODEL_FORMAT = "transformer-model/1"
OPTIMIZER_PREFIX = "optimizer."


def is_weight(name: str) -> bool:
    """A model parameter's entry, not Adam's state: what decoding and averaging read."""
    return not name.startswith(OPTIMIZER_PREFIX)


def save_model(path, model, optimizer=None, metadata: dict | None = None) -> None:
    """Write the model's parameters, its config (as JSON metadata) and optionally Adam's state to `path`."""
    tensors = model.state_dict()
    if optimizer is not None:
        for key, value in optimizer.state_dict().items():              # "step", "m.<name>", "v.<name>"
            tensors[OPTIMIZER_PREFIX + key] = np.asarray(value)
    meta = dict(metadata or {})
    meta.update(format=MODEL_FORMAT, config=model.config.to_dict())
    save_checkpoint(path, tensors, meta)


def load_model(path, backend="numpy", vocab_size: int | None = None, precision: str = "fp32"):
    """(model, config, metadata) from a file written by save_model; the model is in eval mode.

    `vocab_size`, when given, must match the checkpoint's (e.g. the tokenizer you are about
    to use). Any missing, unexpected or mis-shaped tensor raises CheckpointError naming the
    file and the tensor. Optimizer state in the file is ignored (see restore_optimizer).
    """
    from .config import TransformerConfig
    from .model import Transformer

    path = Path(path)
    tensors, metadata = load_checkpoint(path, select=is_weight)
    if "config" not in metadata:
        raise CheckpointError(f"{path.name}: no 'config' in the metadata (not written by save_model?)")
    try:
        config = TransformerConfig.from_dict(metadata["config"])
    except (TypeError, ValueError) as err:
        raise CheckpointError(f"{path.name}: bad config in the metadata: {err}") from None
    model = Transformer(config, np.random.default_rng(0), backend=backend, precision=precision)
    if vocab_size is not None and vocab_size != config.vocab_size:
        table = next(name for name, _ in model.named_parameters() if name.startswith("embeddings."))
        raise CheckpointError(f"{path.name}: tensor {table!r} has a vocabulary of {config.vocab_size} "
                              f"but {vocab_size} was asked for")
    load_weights(path, tensors, model)
    model.eval()
    return model, config, metadata


def load_weights(path, tensors: dict[str, np.ndarray], model) -> None:
    """Copy the model's parameters out of a loaded file's tensors (optimizer entries ignored)."""
    weights = {k: v for k, v in tensors.items() if not k.startswith(OPTIMIZER_PREFIX)}
    check_shapes({name: p.shape for name, p in model.named_parameters()}, weights, path)
    model.load_state_dict(weights)


def restore_optimizer(path, tensors: dict[str, np.ndarray], optimizer) -> None:
    """Restore Adam's moments and step from a loaded file's tensors (saved by save_model(optimizer=...))."""
    state = {k[len(OPTIMIZER_PREFIX):]: v for k, v in tensors.items() if k.startswith(OPTIMIZER_PREFIX)}
    if not state:
        raise CheckpointError(f"{Path(path).name}: holds no optimizer state (saved without optimizer=?)")
    expected = {"step": ()}
    for name, p in optimizer.named_params:
        expected[f"m.{name}"] = expected[f"v.{name}"] = p.shape
    check_shapes({OPTIMIZER_PREFIX + k: v for k, v in expected.items()},
                 {OPTIMIZER_PREFIX + k: v for k, v in state.items()}, path)
    optimizer.load_state_dict(state)
