"""metrics.jsonl as a TensorBoard event file, written by hand (no TensorFlow, no extra dependency).

    python -m train export-tensorboard RUN_DIR      # -> RUN_DIR/tensorboard/events.out.tfevents.metrics
    tensorboard --logdir RUN_DIR/tensorboard

An event file is a sequence of records (TFRecord framing):

    uint64 length, little-endian
    uint32 masked CRC-32C of those 8 bytes
    length bytes: one `Event` protocol buffer
    uint32 masked CRC-32C of the data

masked(crc) = ((crc >> 15) | (crc << 17)) + 0xa282ead8 (mod 2^32). The first Event
holds file_version "brain.Event:2"; each later one holds a wall time, a step and a
Summary of scalars. The protobuf fields used (tensorflow/core/util/event.proto,
summary.proto):

    Event:   1 wall_time (double), 2 step (int64), 3 file_version (string), 5 summary (Summary)
    Summary: 1 value (repeated Value)
    Value:   1 tag (string), 2 simple_value (float)

Every number in a metrics record becomes a scalar tagged `<kind>/<field>`, e.g.
`train/loss`, `valid/bleu`, at the record's step; steps redone after a resume are
left out, as in the plots (train.metrics.read_metrics).
"""

import struct
from pathlib import Path

from train.data import write_atomic
from train.errors import InputError
from train.metrics import read_metrics

EVENT_FILE = "events.out.tfevents.metrics"  # TensorBoard reads every file whose name contains "tfevents"
_SKIPPED_FIELDS = ("step", "time")


def _crc32c_table() -> list[int]:
    table = []
    for byte in range(256):
        crc = byte
        for _ in range(8):
            crc = (crc >> 1) ^ 0x82F63B78 if crc & 1 else crc >> 1  # Castagnoli polynomial, reflected
        table.append(crc)
    return table


_TABLE = tuple(_crc32c_table())


def crc32c(data: bytes) -> int:
    """CRC-32C (Castagnoli), the checksum of TFRecord framing; crc32c(b"123456789") == 0xE3069283."""
    crc = 0xFFFFFFFF
    for byte in data:
        crc = _TABLE[(crc ^ byte) & 0xFF] ^ (crc >> 8)
    return crc ^ 0xFFFFFFFF


def masked_crc32c(data: bytes) -> int:
    crc = crc32c(data)
    return (((crc >> 15) | (crc << 17)) + 0xA282EAD8) & 0xFFFFFFFF


def _varint(value: int) -> bytes:
    out = bytearray()
    while True:
        low, value = value & 0x7F, value >> 7
        out.append(low | (0x80 if value else 0))
        if not value:
            return bytes(out)


def _field(number: int, wire_type: int, payload: bytes) -> bytes:
    """One protobuf field: key (number << 3 | wire type), then the payload (length-prefixed for type 2)."""
    key = _varint(number << 3 | wire_type)
    return key + (_varint(len(payload)) + payload if wire_type == 2 else payload)


def event(wall_time: float, step: int = 0, scalars: dict[str, float] | None = None,
          file_version: str | None = None) -> bytes:
    """The bytes of one Event protobuf."""
    out = _field(1, 1, struct.pack("<d", wall_time)) + _field(2, 0, _varint(step))
    if file_version is not None:
        out += _field(3, 2, file_version.encode("utf-8"))
    if scalars:
        values = b"".join(_field(1, 2, _field(1, 2, tag.encode("utf-8")) + _field(2, 5, struct.pack("<f", value)))
                          for tag, value in scalars.items())
        out += _field(5, 2, values)
    return out


def record(data: bytes) -> bytes:
    """TFRecord framing of one serialized Event."""
    length = struct.pack("<Q", len(data))
    return length + struct.pack("<I", masked_crc32c(length)) + data + struct.pack("<I", masked_crc32c(data))


def scalars_of(entry: dict) -> dict[str, float]:
    """{"<kind>/<field>": value} for every number of a metrics record (booleans and step/time left out)."""
    return {f"{entry['kind']}/{key}": float(value) for key, value in entry.items()
            if key not in _SKIPPED_FIELDS and isinstance(value, (int, float)) and not isinstance(value, bool)}


def export_run(run_dir: str | Path, out_dir: str | Path | None = None) -> tuple[Path, int]:
    """Write out_dir/events.out.tfevents.metrics (default out_dir: RUN_DIR/tensorboard); returns (path, scalars)."""
    run_dir = Path(run_dir)
    metrics = run_dir / "metrics.jsonl"
    if not metrics.is_file():
        raise InputError(f"{run_dir}: no metrics.jsonl here; is it a run directory?")
    entries = [e for e in read_metrics(metrics) if e.get("kind") != "resume"]
    first_time = next((float(e["time"]) for e in entries if "time" in e), 0.0)
    chunks, count = [record(event(first_time, file_version="brain.Event:2"))], 0
    for entry in entries:
        scalars = scalars_of(entry)
        if scalars:
            chunks.append(record(event(float(entry.get("time", first_time)), int(entry["step"]), scalars)))
            count += len(scalars)
    out = Path(out_dir) if out_dir is not None else run_dir / "tensorboard"
    out.mkdir(parents=True, exist_ok=True)
    path = out / EVENT_FILE
    write_atomic(path, b"".join(chunks))
    return path, count
