"""transformer/checkpoint.py, whole models: checkpoints (parameters, config, Adam state) and their errors."""
from pathlib import Path

import numpy as np
import pytest

import minitensor as mt
from minitensor.optim import Adam
from transformer import LabelSmoothingLoss
from transformer.checkpoint import (CheckpointError, load_checkpoint, load_model, restore_optimizer, save_checkpoint,
                                   save_model)
from transformer_helpers import random_ids, small_model


@pytest.fixture
def trained(tmp_path):
    """A small model after one Adam step, saved with its optimizer."""
    model = small_model(backend="numpy", tie_embeddings=False)
    optimizer = Adam(model.named_parameters(), lr=1e-2)
    rng = np.random.default_rng(0)
    src, tgt = random_ids(rng, 2, 4, 11), random_ids(rng, 2, 4, 11)
    LabelSmoothingLoss(0.1, 0)(model(src, tgt), tgt).loss.backward()
    optimizer.step()
    path = tmp_path / "model.safetensors"
    save_model(path, model, optimizer, metadata={"step": 1, "note": "test"})
    return model, optimizer, path, (src, tgt)


def test_round_trip_gives_the_same_model(trained):
    model, _, path, (src, tgt) = trained
    loaded, config, metadata = load_model(path, backend="numpy")
    assert config == model.config and metadata["step"] == 1 and metadata["note"] == "test"
    assert metadata["config"] == model.config.to_dict()
    for name, value in model.state_dict().items():
        np.testing.assert_array_equal(loaded.state_dict()[name], value, err_msg=name)
    model.eval()
    mt.assert_close(loaded(src, tgt), model(src, tgt).numpy(), "logits after reload")


def test_names_in_the_file(trained):
    _, _, path, _ = trained
    tensors, _ = load_checkpoint(path)
    assert tensors["encoder.layers.0.self_attn.w_q.weight"].shape == (8, 8)
    assert "optimizer.m.encoder.layers.0.self_attn.w_q.weight" in tensors
    assert "optimizer.v.embeddings.generator.weight" in tensors
    assert int(tensors["optimizer.step"]) == 1


def test_optimizer_state_round_trip(trained):
    model, optimizer, path, _ = trained
    fresh = Adam(small_model(backend="numpy", tie_embeddings=False).named_parameters(), lr=1e-2)
    restore_optimizer(path, load_checkpoint(path)[0], fresh)
    assert fresh.step_count == 1
    for a, b in zip(optimizer.m + optimizer.v, fresh.m + fresh.v):
        np.testing.assert_array_equal(a, b)


def test_mis_shaped_tensor_names_file_and_tensor(trained, tmp_path):
    _, _, path, _ = trained
    tensors, metadata = load_checkpoint(path)
    tensors["decoder.layers.1.feed_forward.w_1.weight"] = np.zeros((8, 15), dtype=np.float32)
    bad = tmp_path / "bad.safetensors"
    save_checkpoint(bad, tensors, metadata)
    with pytest.raises(CheckpointError, match=r"bad\.safetensors.*'decoder\.layers\.1\.feed_forward\.w_1\.weight'"):
        load_model(bad, backend="numpy")


def test_wrong_vocabulary_names_file_and_tensor(trained, tmp_path):
    _, _, path, _ = trained
    with pytest.raises(CheckpointError, match=r"model\.safetensors.*'embeddings\.src\.weight'.*11.*20"):
        load_model(path, backend="numpy", vocab_size=20)
    tensors, metadata = load_checkpoint(path)                  # config says 20 tokens, tensors hold 11
    metadata["config"]["vocab_size"] = 20
    other = tmp_path / "other.safetensors"
    save_checkpoint(other, tensors, metadata)
    with pytest.raises(CheckpointError, match=r"other\.safetensors.*'embeddings\.(src|tgt)\.weight'"):
        load_model(other, backend="numpy")


def test_missing_config_or_optimizer_state_is_an_error(tmp_path):
    model = small_model(backend="numpy")
    path = tmp_path / "bare.safetensors"
    save_checkpoint(path, model.state_dict(), {"step": 3})
    with pytest.raises(CheckpointError, match="bare.safetensors.*config"):
        load_model(path)
    save_model(path, model)
    with pytest.raises(CheckpointError, match="no optimizer state"):
        restore_optimizer(path, load_checkpoint(path)[0], Adam(model.named_parameters()))


# A file written by the hand-written safetensors writer this module used before the `safetensors`
# package (git show f0db83e:transformer/checkpoint.py): N 1, d_model 4, h 2, d_ff 8, vocab 7, one Adam step.
LEGACY = Path(__file__).parent / "data" / "hand_written_writer.checkpoint"  # a safetensors file
LEGACY_INPUTS = ([[6, 5, 5, 4], [4, 4, 4, 4]], [[4, 6, 5, 6], [5, 5, 6, 6]])
LEGACY_LOGITS_00 = [-0.427862, 0.067471, 0.07809, 1.136698, 0.409104, 1.319328, -0.364719]  # printed when written


def test_a_checkpoint_written_before_the_safetensors_package_still_loads():
    model, config, metadata = load_model(LEGACY, backend="numpy")
    assert (config.N, config.d_model, config.vocab_size) == (1, 4, 7)
    assert metadata["step"] == 1 and metadata["note"].startswith("hand-written writer")
    src, tgt = (np.array(x) for x in LEGACY_INPUTS)
    np.testing.assert_allclose(model(src, tgt).numpy()[0, 0], LEGACY_LOGITS_00, atol=2e-6)
    optimizer = Adam(model.named_parameters(), lr=1e-2)
    restore_optimizer(LEGACY, load_checkpoint(LEGACY)[0], optimizer)
    assert optimizer.step_count == 1


def test_an_old_file_is_still_verified(tmp_path):
    raw = bytearray(LEGACY.read_bytes())
    flipped = tmp_path / "flipped.safetensors"
    flipped.write_bytes(bytes(raw[:-3]) + bytes([raw[-3] ^ 1]) + bytes(raw[-2:]))  # a byte of the last tensor
    with pytest.raises(CheckpointError, match=r"^flipped.safetensors: tensor '.*' fails its sha256 check"):
        load_checkpoint(flipped)
    edited = tmp_path / "edited.safetensors"
    edited.write_bytes(bytes(raw).replace(b'step\\": 1}', b'step\\": 9}'))
    assert edited.read_bytes() != bytes(raw)
    with pytest.raises(CheckpointError, match=r"^edited.safetensors: header fails its sha256 check"):
        load_checkpoint(edited)
