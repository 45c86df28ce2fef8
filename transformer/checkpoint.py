"""Checkpoints as safetensors files, written and read here: no pickle, no safetensors package.

Two layers: the file format (save_checkpoint / load_checkpoint of plain NumPy dicts,
verified by sha256), and whole models on top of it (save_model / load_model /
restore_optimizer). Checkpoint averaging follows §6.1 ("averaging the last 5 checkpoints").

File layout (the safetensors format, https://github.com/huggingface/safetensors):

    8 bytes   little-endian uint64 N, the header's length
    N bytes   JSON {name: {"dtype": "F32", "shape": [..], "data_offsets": [begin, end]},
                    "__metadata__": {str: str}}, padded with spaces to a multiple of 8
    rest      the tensors' raw little-endian bytes, C order; offsets are relative to here

`__metadata__` holds our metadata as JSON text under "json", plus "sha256" (hash of
all tensor bytes), "sha256_tensors" (JSON {name: hash}) so that a bad byte is
blamed on the tensor that holds it, and "sha256_header" (hash of every other header
entry, canonical JSON) so that a changed digit in a shape or in the metadata, which
still parses, is caught too. The API works on plain NumPy dicts; the model
and optimizer convert their state to and from these.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import warnings
from pathlib import Path

import numpy as np

DTYPES = {
    "F16": np.dtype("<f2"),
    "F32": np.dtype("<f4"),
    "F64": np.dtype("<f8"),
    "I32": np.dtype("<i4"),
    "I64": np.dtype("<i8"),
    "U8": np.dtype("u1"),
    "BOOL": np.dtype("?"),
}
_CODES = {dtype: code for code, dtype in DTYPES.items()}
_CHECKPOINT_NAME = re.compile(r"ckpt_(\d+)\.safetensors")
_MAX_HEADER = 100_000_000  # the reference reader's limit; a larger value means a corrupt file


class CheckpointError(ValueError):
    """A checkpoint that cannot be used; the message names the file and, where known, the tensor."""


def checkpoint_path(run_dir: str | Path, step: int) -> Path:
    """The file name list_checkpoints() expects: run_dir/ckpt_<step:08d>.safetensors."""
    return Path(run_dir) / f"ckpt_{step:08d}.safetensors"


def _sha256(data) -> str:
    return hashlib.sha256(data).hexdigest()


def _little_endian(name: str, array: np.ndarray, path: Path) -> tuple[str, np.ndarray]:
    """(dtype code, array in the file's byte order) or CheckpointError for an unsupported dtype."""
    array = np.asarray(array)
    code = _CODES.get(array.dtype.newbyteorder("<"))  # big-endian input is byte-swapped on write
    if code is None:
        supported = ", ".join(str(d) for d in DTYPES.values())
        raise CheckpointError(f"{path.name}: tensor {name!r} has dtype {array.dtype}, not one of {supported}")
    return code, array.astype(DTYPES[code], copy=False)


def save_checkpoint(path: str | Path, tensors: dict[str, np.ndarray], metadata: dict) -> None:
    """Write tensors and JSON-able metadata to path atomically (readers see the old file or the new one).

    Writes path.tmp-<pid>, fsyncs it, renames it onto path, then fsyncs the folder so the
    rename itself survives a crash. Tensors are laid out sorted by name for stable files.
    """
    path = Path(path)
    names = sorted(tensors)
    arrays, header, offset = [], {}, 0
    for name in names:
        code, array = _little_endian(name, tensors[name], path)
        header[name] = {"dtype": code, "shape": list(array.shape), "data_offsets": [offset, offset + array.nbytes]}
        arrays.append(array.tobytes(order="C"))
        offset += array.nbytes
    header["__metadata__"] = {
        "json": json.dumps(metadata, sort_keys=True),
        "sha256": _sha256(b"".join(arrays)),
        "sha256_tensors": json.dumps({name: _sha256(data) for name, data in zip(names, arrays)}),
    }
    header["__metadata__"]["sha256_header"] = _header_digest(header)
    header_bytes = json.dumps(header, separators=(",", ":")).encode("utf-8")
    header_bytes += b" " * (-len(header_bytes) % 8)  # pad so the tensor bytes start 8-aligned

    tmp = path.with_name(f"{path.name}.tmp-{os.getpid()}")
    try:
        with open(tmp, "wb") as f:
            f.write(len(header_bytes).to_bytes(8, "little"))
            f.write(header_bytes)
            for data in arrays:
                f.write(data)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    finally:
        if tmp.exists():
            tmp.unlink()
    _fsync_dir(path.parent)


def _header_digest(header: dict) -> str:
    """sha256 of the header in canonical JSON, without the digest itself."""
    meta = {k: v for k, v in header.get("__metadata__", {}).items() if k != "sha256_header"}
    canonical = dict(header, __metadata__=meta)
    return _sha256(json.dumps(canonical, sort_keys=True, separators=(",", ":")).encode("utf-8"))


def _fsync_dir(folder: Path) -> None:
    if not hasattr(os, "O_DIRECTORY"):  # Windows cannot open a folder to fsync it
        return
    fd = os.open(folder, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _read_header(path: Path, buf: bytearray) -> tuple[dict, int]:
    """(header dict, absolute offset where tensor bytes start); CheckpointError if malformed."""
    name = path.name
    if len(buf) < 8:
        raise CheckpointError(f"{name}: file has {len(buf)} bytes, too short for the 8-byte header length")
    n = int.from_bytes(buf[:8], "little")
    if n > _MAX_HEADER or 8 + n > len(buf):
        raise CheckpointError(f"{name}: header claims {n} bytes but the file has {len(buf)} bytes")
    try:
        header = json.loads(bytes(buf[8 : 8 + n]).decode("utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError) as err:
        raise CheckpointError(f"{name}: header is not valid JSON ({err})") from None
    if not isinstance(header, dict):
        raise CheckpointError(f"{name}: header is a JSON {type(header).__name__}, expected an object")
    return header, 8 + n


def _tensor_view(path: Path, buf: bytearray, start: int, name: str, info) -> np.ndarray:
    """The tensor `name` as an array over buf, after checking its entry against the file."""
    where = f"{path.name}: tensor {name!r}"
    if not isinstance(info, dict) or info.get("dtype") not in DTYPES:
        raise CheckpointError(f"{where} has a bad header entry or unsupported dtype: {info!r}")
    try:
        shape = tuple(int(d) for d in info["shape"])
        begin, end = (int(x) for x in info["data_offsets"])
    except (KeyError, TypeError, ValueError):
        raise CheckpointError(f"{where} has a bad header entry {info!r}") from None
    dtype, size = DTYPES[info["dtype"]], int(np.prod(shape))
    if any(d < 0 for d in shape) or not 0 <= begin <= end:
        raise CheckpointError(f"{where} has a bad shape {shape} or offsets {begin}..{end}")
    if end - begin != dtype.itemsize * size:
        raise CheckpointError(f"{where} has shape {shape} of {info['dtype']} but spans {end - begin} bytes")
    if start + end > len(buf):
        raise CheckpointError(
            f"{where} needs bytes {start + begin}..{start + end} but the file has {len(buf)} bytes"
        )
    if size == 0:
        return np.zeros(shape, dtype)
    array = np.frombuffer(buf, dtype=dtype, count=size, offset=start + begin).reshape(shape)
    return array if array.flags.aligned else array.copy()  # unaligned views are slow to compute on


def _verify(path: Path, buf: bytearray, start: int, header: dict, raw_meta: dict) -> None:
    """Compare stored hashes with the bytes; blame the first tensor whose bytes changed."""
    if "sha256" not in raw_meta:  # a file from another writer: nothing to verify against
        return
    if _sha256(memoryview(buf)[start:]) == raw_meta["sha256"]:
        return
    per_tensor = json.loads(raw_meta.get("sha256_tensors", "{}"))
    for name, digest in sorted(per_tensor.items()):
        begin, end = header.get(name, {}).get("data_offsets", (0, 0))
        if _sha256(memoryview(buf)[start + begin : start + end]) != digest:
            raise CheckpointError(f"{path.name}: tensor {name!r} fails its sha256 check (bytes changed)")
    raise CheckpointError(f"{path.name}: tensor bytes fail their sha256 check (extra or missing bytes)")


def load_checkpoint(path: str | Path, verify: bool = True) -> tuple[dict[str, np.ndarray], dict]:
    """Read (tensors, metadata) written by save_checkpoint (or any safetensors file in DTYPES).

    Arrays are writable views into one buffer holding the file. With verify=True the stored
    sha256 hashes are checked. Raises CheckpointError naming the file and tensor on any problem.
    """
    path = Path(path)
    with open(path, "rb") as f:
        buf = bytearray(f.read())
    header, start = _read_header(path, buf)
    raw_meta = header.get("__metadata__") or {}
    if not isinstance(raw_meta, dict):
        raise CheckpointError(f"{path.name}: __metadata__ is not a JSON object")
    if verify and "sha256_header" in raw_meta and _header_digest(header) != raw_meta["sha256_header"]:
        raise CheckpointError(f"{path.name}: header fails its sha256 check (a shape, offset or metadata changed)")
    header.pop("__metadata__", None)
    tensors = {name: _tensor_view(path, buf, start, name, info) for name, info in sorted(header.items())}
    if verify:
        _verify(path, buf, start, header, raw_meta)
    if "json" in raw_meta:
        try:
            metadata = json.loads(raw_meta["json"])
        except json.JSONDecodeError as err:
            raise CheckpointError(f"{path.name}: __metadata__['json'] is not valid JSON ({err})") from None
    else:
        metadata = dict(raw_meta)
    return tensors, metadata


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


def average_checkpoints(paths: list[str | Path]) -> tuple[dict[str, np.ndarray], dict]:
    """§6.1: element-wise mean of the float tensors of several checkpoints, and the last one's metadata.

    Sums in float64 and casts back to each tensor's dtype. Integer and bool tensors
    (step counters, masks) are not averaged: they are taken from the last file.
    All files must hold the same names, shapes and dtypes.
    """
    paths = [Path(p) for p in paths]
    if not paths:
        raise CheckpointError("average_checkpoints: no checkpoint files given")
    first, metadata = load_checkpoint(paths[0])
    sums = {k: v.astype(np.float64) for k, v in first.items() if np.issubdtype(v.dtype, np.floating)}
    last = first
    for path in paths[1:]:
        tensors, metadata = load_checkpoint(path)
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
    for path in reversed(list_checkpoints(run_dir)):
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
    tensors, metadata = load_checkpoint(path)
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
