"""transformer/checkpoint.py: safetensors files with our integrity checks, averaging (§6.1), discovery, old files."""

import json
import os

import numpy as np
import pytest

from transformer.checkpoint import (
    DTYPES,
    META_KEY,
    CheckpointError,
    average_checkpoints,
    check_shapes,
    checkpoint_path,
    latest_valid_checkpoint,
    list_checkpoints,
    load_checkpoint,
    save_checkpoint,
)


def all_dtype_tensors(rng: np.random.Generator) -> dict[str, np.ndarray]:
    """One tensor per supported dtype, plus 0-d, zero-length and odd-sized ones (unaligned offsets)."""
    return {
        "encoder.layers.0.self_attn.w_q.weight": rng.standard_normal((4, 3)).astype(np.float32),
        "half": rng.standard_normal((2, 5)).astype(np.float16),
        "double": rng.standard_normal(7),
        "ints32": rng.integers(-(2**31), 2**31 - 1, size=(3,), dtype=np.int32),
        "ints64": rng.integers(-(2**62), 2**62, size=(2, 2), dtype=np.int64),
        "bytes": rng.integers(0, 256, size=(5,), dtype=np.uint8),  # 5 bytes: shifts later offsets
        "bf16_bits": rng.integers(0, 2**16, size=(3,), dtype=np.uint16),
        "mask": rng.random((3, 3)) < 0.5,
        "scalar": np.array(3.5, dtype=np.float64),
        "step": np.array(12345, dtype=np.int64),
        "empty": np.zeros((0,), dtype=np.float32),
        "empty2d": np.zeros((2, 0), dtype=np.int32),
    }


def assert_same_tensors(got: dict, want: dict) -> None:
    assert sorted(got) == sorted(want)
    for name, array in want.items():
        assert got[name].dtype == array.dtype, name
        assert got[name].shape == array.shape, name
        np.testing.assert_array_equal(got[name], array, err_msg=name)


def test_round_trip_all_dtypes(tmp_path):
    tensors = all_dtype_tensors(np.random.default_rng(0))
    assert {a.dtype for a in tensors.values()} >= set(DTYPES.values())
    meta = {"step": 12345, "config": {"d_model": 512, "h": 8}, "note": "Überprüfung"}
    path = tmp_path / "ckpt.safetensors"
    save_checkpoint(path, tensors, meta)
    got, got_meta = load_checkpoint(path)
    assert_same_tensors(got, tensors)
    assert got_meta == meta
    got["double"][0] = 1.0  # loaded arrays are writable


def test_big_endian_input_is_stored_little_endian(tmp_path):
    array = np.arange(6, dtype=">f4").reshape(2, 3)
    save_checkpoint(tmp_path / "c.safetensors", {"w": array}, {})
    got, _ = load_checkpoint(tmp_path / "c.safetensors")
    assert got["w"].dtype == np.dtype("<f4")
    np.testing.assert_array_equal(got["w"], array)


def test_unsupported_dtype_names_tensor(tmp_path):
    with pytest.raises(CheckpointError, match=r"c.safetensors: tensor 'z' has dtype complex128"):
        save_checkpoint(tmp_path / "c.safetensors", {"z": np.zeros(2, complex)}, {})


def test_one_metadata_entry_holds_ours_and_the_digests(tmp_path):
    path = tmp_path / "c.safetensors"
    save_checkpoint(path, {"b": np.ones(3, np.float32), "a": np.ones(2, np.uint8)}, {"k": 1})
    raw = path.read_bytes()
    n = int.from_bytes(raw[:8], "little")
    header = json.loads(raw[8 : 8 + n])
    assert list(header["__metadata__"]) == [META_KEY]
    entry = json.loads(header["__metadata__"][META_KEY])
    assert entry["metadata"] == {"k": 1}
    assert sorted(entry["sha256"]["tensors"]) == ["a", "b"] and len(entry["sha256"]["header"]) == 64
    assert header["a"]["dtype"] == "U8" and header["b"] == {"dtype": "F32", "shape": [3], "data_offsets": [0, 12]}
    assert len(raw) == 8 + n + 14


def test_only_the_selected_tensors_are_read_and_verified(tmp_path):
    path = tmp_path / "c.safetensors"
    tensors = {"a.w": np.arange(8, dtype=np.float32), "optimizer.m.a.w": np.zeros(8, np.float32)}
    save_checkpoint(path, tensors, {})
    raw = bytearray(path.read_bytes())
    start = 8 + int.from_bytes(raw[:8], "little")
    raw[start + 32 + 1] ^= 0x01  # a byte of 'optimizer.m.a.w' (sorted after 'a.w', bytes 32..64)
    path.write_bytes(bytes(raw))
    got, _ = load_checkpoint(path, select=lambda name: not name.startswith("optimizer."))
    assert list(got) == ["a.w"] and got["a.w"].tolist() == list(range(8))
    with pytest.raises(CheckpointError, match="tensor 'optimizer.m.a.w' fails its sha256 check"):
        load_checkpoint(path)


def test_reference_reader_loads_our_file(tmp_path):
    safetensors_numpy = pytest.importorskip("safetensors.numpy")
    safetensors = pytest.importorskip("safetensors")
    tensors = all_dtype_tensors(np.random.default_rng(1))
    path = tmp_path / "ours.safetensors"
    save_checkpoint(path, tensors, {"step": 7})
    assert_same_tensors(safetensors_numpy.load_file(path), tensors)
    with safetensors.safe_open(path, framework="np") as f:
        assert list(f.keys()) == sorted(tensors)
        assert json.loads(f.metadata()[META_KEY])["metadata"] == {"step": 7}


def test_pytorch_reads_our_file(tmp_path):
    torch = pytest.importorskip("torch")
    safetensors_torch = pytest.importorskip("safetensors.torch")
    tensors = {"w": np.arange(6, dtype=np.float32).reshape(2, 3), "step": np.array(3, np.int64)}
    save_checkpoint(tmp_path / "ours.safetensors", tensors, {"step": 3})
    got = safetensors_torch.load_file(tmp_path / "ours.safetensors")
    assert torch.equal(got["w"], torch.arange(6, dtype=torch.float32).reshape(2, 3)) and int(got["step"]) == 3


def test_file_from_reference_writer_loads_with_ours(tmp_path):
    safetensors_numpy = pytest.importorskip("safetensors.numpy")
    tensors = all_dtype_tensors(np.random.default_rng(2))
    path = tmp_path / "theirs.safetensors"
    safetensors_numpy.save_file(tensors, path, metadata={"origin": "reference"})
    got, meta = load_checkpoint(path)  # no sha256 stored: nothing to verify, still loads
    assert_same_tensors(got, tensors)
    assert meta == {"origin": "reference"}


def test_files_are_byte_stable(tmp_path):
    tensors = all_dtype_tensors(np.random.default_rng(3))
    save_checkpoint(tmp_path / "a.safetensors", tensors, {"x": 1, "y": 2})
    save_checkpoint(tmp_path / "b.safetensors", dict(reversed(tensors.items())), {"y": 2, "x": 1})
    assert (tmp_path / "a.safetensors").read_bytes() == (tmp_path / "b.safetensors").read_bytes()


def test_atomic_write_leaves_no_tmp_and_replaces(tmp_path):
    path = tmp_path / "ckpt.safetensors"
    save_checkpoint(path, {"w": np.zeros(3, np.float32)}, {"v": 1})
    save_checkpoint(path, {"w": np.ones(3, np.float32)}, {"v": 2})
    assert [p.name for p in tmp_path.iterdir()] == ["ckpt.safetensors"]
    got, meta = load_checkpoint(path)
    assert meta == {"v": 2} and got["w"].tolist() == [1, 1, 1]
    with pytest.raises(CheckpointError):  # a failed write leaves the old file and no tmp
        save_checkpoint(path, {"w": np.zeros(2, complex)}, {})
    assert [p.name for p in tmp_path.iterdir()] == ["ckpt.safetensors"]
    assert not (tmp_path / f"ckpt.safetensors.tmp-{os.getpid()}").exists()


def test_truncated_file_names_file_and_tensor(tmp_path):
    path = tmp_path / "ckpt.safetensors"
    save_checkpoint(path, {"decoder.w": np.ones(100, np.float32), "a": np.ones(4, np.float32)}, {})
    raw = path.read_bytes()
    path.write_bytes(raw[:-10])
    with pytest.raises(CheckpointError) as err:
        load_checkpoint(path)
    message = str(err.value)
    assert message.startswith("ckpt.safetensors: tensor 'decoder.w' needs bytes ")
    assert f"..{len(raw)} but the file has {len(raw) - 10} bytes" in message
    assert "\n" not in message
    path.write_bytes(raw[:20])  # cut inside the header
    with pytest.raises(CheckpointError, match=r"ckpt.safetensors: header claims \d+ bytes but the file has 20"):
        load_checkpoint(path)
    path.write_bytes(raw[:5])
    with pytest.raises(CheckpointError, match="ckpt.safetensors: file has 5 bytes"):
        load_checkpoint(path)


def test_flipped_byte_names_tensor(tmp_path):
    path = tmp_path / "ckpt.safetensors"
    tensors = {"a.w": np.zeros(8, np.float32), "b.w": np.zeros(8, np.float32), "c.w": np.zeros(8, np.float32)}
    save_checkpoint(path, tensors, {})
    raw = bytearray(path.read_bytes())
    start = 8 + int.from_bytes(raw[:8], "little")
    raw[start + 32 + 5] ^= 0x01  # a byte inside 'b.w' (bytes 32..64 of the data)
    path.write_bytes(bytes(raw))
    with pytest.raises(CheckpointError, match=r"^ckpt.safetensors: tensor 'b.w' fails its sha256 check"):
        load_checkpoint(path)
    got, _ = load_checkpoint(path, verify=False)  # opt out: loads the changed bytes
    assert got["b.w"].view(np.uint32)[1] == 1 << 8


def test_bad_header_json(tmp_path):
    path = tmp_path / "ckpt.safetensors"
    save_checkpoint(path, {"w": np.ones(2, np.float32)}, {})
    raw = bytearray(path.read_bytes())
    raw[8] = ord("[")  # the header's opening brace
    path.write_bytes(bytes(raw))
    with pytest.raises(CheckpointError, match="ckpt.safetensors: header is not valid JSON"):
        load_checkpoint(path)


@pytest.mark.parametrize("old, new", [(b'step\\": 1200', b'step\\": 1800'), (b'"shape":[2,4]', b'"shape":[4,2]')])
def test_header_edit_that_still_parses_fails_the_header_check(tmp_path, old, new):
    path = tmp_path / "ckpt.safetensors"
    save_checkpoint(path, {"w": np.ones((2, 4), np.float32)}, {"step": 1200})
    raw = path.read_bytes()
    assert old in raw
    path.write_bytes(raw.replace(old, new))
    with pytest.raises(CheckpointError, match=r"ckpt.safetensors: header fails its sha256 check"):
        load_checkpoint(path)
    _, meta = load_checkpoint(path, verify=False)             # opt out: the edited header is read as it is
    assert meta["step"] in (1200, 1800)


def test_header_shape_disagreeing_with_offsets_names_tensor(tmp_path):
    header = json.dumps({"w": {"dtype": "F32", "shape": [3], "data_offsets": [0, 8]}}).encode()
    header += b" " * (-len(header) % 8)
    path = tmp_path / "ckpt.safetensors"
    path.write_bytes(len(header).to_bytes(8, "little") + header + bytes(8))
    with pytest.raises(CheckpointError, match=r"ckpt.safetensors: tensor 'w' has shape \(3,\) of F32 but spans 8"):
        load_checkpoint(path)


def test_check_shapes_names_file_and_tensors():
    tensors = {"w": np.zeros((2, 3)), "extra": np.zeros(1), "b": np.zeros(4)}
    check_shapes({"w": (2, 3), "extra": (1,), "b": (4,)}, tensors, "run/ckpt.safetensors")
    with pytest.raises(CheckpointError, match=r"^ckpt.safetensors: tensor 'w' has shape \(2, 3\) but \(3, 2\)"):
        check_shapes({"w": (3, 2), "extra": (1,), "b": (4,)}, tensors, "run/ckpt.safetensors")
    with pytest.raises(CheckpointError, match=r"tensor 'missing' is missing .*unexpected tensor 'extra'"):
        check_shapes({"w": (2, 3), "b": (4,), "missing": (5,)}, tensors, "ckpt.safetensors")


def test_average_two_equals_elementwise_mean(tmp_path):
    rng = np.random.default_rng(4)
    a = {"w": rng.standard_normal((3, 4)).astype(np.float32), "h": rng.standard_normal(5).astype(np.float16),
         "step": np.array(100, np.int64)}
    b = {"w": rng.standard_normal((3, 4)).astype(np.float32), "h": rng.standard_normal(5).astype(np.float16),
         "step": np.array(200, np.int64)}
    save_checkpoint(tmp_path / "a.safetensors", a, {"step": 100})
    save_checkpoint(tmp_path / "b.safetensors", b, {"step": 200})
    avg, meta = average_checkpoints([tmp_path / "a.safetensors", tmp_path / "b.safetensors"])
    assert meta == {"step": 200}
    for name in ("w", "h"):
        expected = ((a[name].astype(np.float64) + b[name].astype(np.float64)) / 2).astype(a[name].dtype)
        assert avg[name].dtype == a[name].dtype
        np.testing.assert_array_equal(avg[name], expected)
    assert avg["step"] == 200  # integer tensors come from the last checkpoint


def test_average_rejects_mismatched_files(tmp_path):
    save_checkpoint(tmp_path / "a.safetensors", {"w": np.zeros((2, 3), np.float32)}, {})
    save_checkpoint(tmp_path / "b.safetensors", {"w": np.zeros((3, 2), np.float32)}, {})
    save_checkpoint(tmp_path / "c.safetensors", {"w": np.zeros((2, 3), np.float32), "v": np.zeros(1)}, {})
    with pytest.raises(CheckpointError, match=r"^b.safetensors: tensor 'w' is float32\[3, 2\] but float32\[2, 3\]"):
        average_checkpoints([tmp_path / "a.safetensors", tmp_path / "b.safetensors"])
    with pytest.raises(CheckpointError, match=r"^c.safetensors: tensor 'v' is not in a.safetensors"):
        average_checkpoints([tmp_path / "a.safetensors", tmp_path / "c.safetensors"])
    with pytest.raises(CheckpointError, match=r"^a.safetensors: tensor 'v' is missing"):
        average_checkpoints([tmp_path / "c.safetensors", tmp_path / "a.safetensors"])


def test_list_and_latest_valid_checkpoint(tmp_path):
    assert list_checkpoints(tmp_path / "nope") == []
    assert latest_valid_checkpoint(tmp_path) is None
    for step in (900, 100, 10_000):
        save_checkpoint(checkpoint_path(tmp_path, step), {"w": np.full(2, step, np.float32)}, {"step": step})
    (tmp_path / "ckpt_00000500.safetensors.tmp-123").write_bytes(b"junk")
    (tmp_path / "notes.txt").write_text("not a checkpoint")
    assert checkpoint_path(tmp_path, 900).name == "ckpt_00000900.safetensors"
    assert [p.name for p in list_checkpoints(tmp_path)] == [
        "ckpt_00000100.safetensors", "ckpt_00000900.safetensors", "ckpt_00010000.safetensors"]
    assert latest_valid_checkpoint(tmp_path) == checkpoint_path(tmp_path, 10_000)
    newest = checkpoint_path(tmp_path, 10_000)
    newest.write_bytes(newest.read_bytes()[:-3])  # a crash mid-copy, say
    with pytest.warns(UserWarning, match="ckpt_00010000.safetensors: tensor 'w' needs bytes"):
        assert latest_valid_checkpoint(tmp_path) == checkpoint_path(tmp_path, 900)


def test_a_file_that_is_no_checkpoint_at_all_says_so(tmp_path):
    """`translate --ckpt metrics.jsonl` (a wrong file): its first 8 bytes are text, read as a header length of
    exabytes; the message says it is not a checkpoint rather than quoting that length."""
    path = tmp_path / "metrics.jsonl"
    path.write_text('{"kind": "train", "step": 1}\n')
    with pytest.raises(CheckpointError, match=r"^metrics.jsonl: not a \.safetensors checkpoint \(its first 8 bytes"):
        load_checkpoint(path)
