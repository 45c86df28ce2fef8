"""train/tensorboard.py: the event file is read back by an independent reader and holds every scalar."""

import struct

import pytest

from train.metrics import MetricsWriter
from train.tensorboard import EVENT_FILE, crc32c, export_run, masked_crc32c


def test_crc32c_check_values():
    assert crc32c(b"123456789") == 0xE3069283  # the standard check value of CRC-32C (Castagnoli)
    assert crc32c(b"") == 0 and crc32c(bytes(32)) == 0x8A9136AA  # RFC 3720 B.4: 32 bytes of zeros


def read_varint(data: bytes, pos: int) -> tuple[int, int]:
    value = shift = 0
    while True:
        byte = data[pos]
        value |= (byte & 0x7F) << shift
        pos, shift = pos + 1, shift + 7
        if not byte & 0x80:
            return value, pos


def read_fields(data: bytes) -> list[tuple[int, object]]:
    """Protobuf fields (number, value): varints as ints, fixed64 as double, fixed32 as float, bytes as bytes."""
    fields, pos = [], 0
    while pos < len(data):
        key, pos = read_varint(data, pos)
        number, wire = key >> 3, key & 7
        if wire == 0:
            value, pos = read_varint(data, pos)
        elif wire == 1:
            value, pos = struct.unpack("<d", data[pos:pos + 8])[0], pos + 8
        elif wire == 5:
            value, pos = struct.unpack("<f", data[pos:pos + 4])[0], pos + 4
        else:
            assert wire == 2, wire
            length, pos = read_varint(data, pos)
            value, pos = data[pos:pos + length], pos + length
        fields.append((number, value))
    return fields


def read_events(path) -> list[dict]:
    """TFRecord framing with both checksums verified, then Event -> {wall_time, step, file_version, scalars}."""
    data, pos, events = path.read_bytes(), 0, []
    while pos < len(data):
        header = data[pos:pos + 8]
        (length,) = struct.unpack("<Q", header)
        assert struct.unpack("<I", data[pos + 8:pos + 12])[0] == masked_crc32c(header)
        body = data[pos + 12:pos + 12 + length]
        assert struct.unpack("<I", data[pos + 12 + length:pos + 16 + length])[0] == masked_crc32c(body)
        pos += 16 + length
        event = {"scalars": {}}
        for number, value in read_fields(body):
            if number == 1:
                event["wall_time"] = value
            elif number == 2:
                event["step"] = value
            elif number == 3:
                event["file_version"] = value.decode()
            elif number == 5:
                for _, raw_value in read_fields(value):
                    parts = dict(read_fields(raw_value))
                    event["scalars"][parts[1].decode()] = parts[2]
        events.append(event)
    return events


def test_export_writes_every_scalar_readable_by_an_independent_reader(tmp_path):
    with MetricsWriter(tmp_path / "metrics.jsonl") as metrics:
        metrics.write("train", 1, loss=5.5, lr=1e-4, grad_norm=None, epoch=0)
        metrics.write("train", 2, loss=5.0, lr=2e-4, grad_norm=1.5, epoch=0)
        metrics.write("valid", 2, loss=4.0, bleu=12.25, best=True)
        metrics.write("train", 3, loss=99.0, lr=3e-4, epoch=0)  # redone after the resume below
        metrics.write("resume", 2, checkpoint="ckpt_00000002.safetensors")
        metrics.write("train", 3, loss=4.5, lr=3e-4, epoch=1)
    path, count = export_run(tmp_path)
    assert path == tmp_path / "tensorboard" / EVENT_FILE
    events = read_events(path)
    assert events[0]["file_version"] == "brain.Event:2"
    steps = [(e["step"], e["scalars"]) for e in events[1:]]
    assert [s for s, _ in steps] == [1, 2, 2, 3]
    assert steps[0][1] == {"train/loss": 5.5, "train/lr": pytest.approx(1e-4), "train/epoch": 0.0}
    assert steps[2][1] == {"valid/loss": 4.0, "valid/bleu": 12.25}  # booleans left out
    assert steps[3][1]["train/loss"] == 4.5  # the redone step, not the 99.0 before the resume
    assert count == sum(len(s) for _, s in steps) == 12
    assert all(e["wall_time"] > 1e9 for e in events)  # seconds since 1970, from the records' time


def test_export_needs_a_run(tmp_path):
    from train.errors import InputError

    with pytest.raises(InputError, match="no metrics.jsonl"):
        export_run(tmp_path)
