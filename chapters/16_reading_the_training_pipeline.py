# ---
# jupyter:
#   jupytext:
#     formats: py:percent
#     text_representation:
#       extension: .py
#       format_name: percent
# ---

# %% [markdown]
# # 16 · Reading the real pipeline: accumulation, clipping, checkpoints, resume
#
# > Each training batch contained a set of sentence pairs containing
# > approximately 25000 source tokens and 25000 target tokens. (§5.1)
#
# > We trained our models on one machine with 8 NVIDIA P100 GPUs. (§5.2)
#
# Chapter 15 wrote the training loop out in a dozen lines. `python -m train`
# runs the same algorithm, plus what a run of hours or days needs. This chapter
# reads that code, one mechanism at a time, and checks each claim it makes:
#
# - `train/run/step.py`, `train_step`: one update from several **micro-batches**
#   whose gradients add up (how one device reaches the paper's 25,000 target
#   tokens per step, which took 8 GPUs), and optional **gradient clipping**;
# - `transformer/checkpoint.py`: the **safetensors** file format, written
#   **atomically** and verified by hashes on every load;
# - `train/run/checkpointing.py`: `TrainState`, `save` and `restore`, so that a run
#   stopped at step k and started again continues **exactly** as if it had never
#   stopped, dropout masks included.
#
# Shapes: B pairs, S source length, T target length, V vocab.
#
# The library code this chapter builds:
# [`train/run/step.py`](../train/run/step.py),
# [`train/run/checkpointing.py`](../train/run/checkpointing.py).

# %%
import dataclasses
import json
import os
import shutil

import numpy as np
import safetensors
import safetensors.numpy
from safetensors.numpy import load_file

import minitensor as mt
from _common import OUT, calls_to, fails, finish, one_cpu_thread
from minitensor.optim import Adam, NoamSchedule, clip_grad_norm
from train.config import RunConfig
from train.data.batching import pad_batch
from train.data.inputs import Prepared, Split
from train.data.tokenizer import Tokenizer
from train.run import checkpointing, validation
from train.run.checkpointing import TrainState
from train.run.manifest import Manifest
from train.run.step import train_step
from transformer import LabelSmoothingLoss, Transformer, TransformerConfig
from transformer.checkpoint import CheckpointError, load_checkpoint, save_checkpoint

THREADS = one_cpu_thread()
PAD, BOS, EOS, V = 0, 2, 3, 20
rng = np.random.default_rng(0)


def pairs(n, rng, lengths=(3, 9)):
    """n random (source, target) token lists; the target reverses the source."""
    out = []
    for _ in range(n):
        seq = rng.integers(4, V, size=rng.integers(*lengths)).tolist()
        out.append((seq, seq[::-1]))
    return out


def batch(pairs_):
    """Padded (src + EOS, BOS + tgt, tgt + EOS), as in chapter 15."""
    return (pad_batch([s + [EOS] for s, _ in pairs_], PAD), pad_batch([[BOS] + t for _, t in pairs_], PAD),
            pad_batch([t + [EOS] for _, t in pairs_], PAD))


config = TransformerConfig.tiny(vocab_size=V, N=1, d_model=16, d_ff=32, h=2, p_drop=0.0, eps_ls=0.1, max_len=32)
loss_fn = LabelSmoothingLoss(config.eps_ls, PAD)

# %% [markdown]
# ## 1. Gradient accumulation: micro-batches that add up to one batch
#
# A batch too big for memory is cut into micro-batches; `train_step` runs
# forward and backward on each and lets the gradients **accumulate** in
# `.grad` (chapter 02's `+=`), then takes one optimizer step. The subtle part is
# the weighting. The loss of a batch is the mean over its target tokens (§5.4),
# and micro-batches hold different numbers of tokens, so `train_step` scales
# each micro-batch's mean loss by its share of the tokens, n_i / Σ n_j. Then the
# sum of the gradients is exactly the gradient of the mean over all tokens:
# **two micro-batches update the model exactly as the one batch they came from**.
# We check it in float64 with dropout off, update for update, and also show
# that the plain average of the micro-batch losses (a common slip) does not.

# %%
def fresh(seed=1):
    model = Transformer(config, np.random.default_rng(seed), precision="fp64")
    return model, Adam(list(model.named_parameters()), lr=NoamSchedule(16, warmup=10))


data = pairs(12, np.random.default_rng(2))
short, long = sorted(data, key=lambda p: len(p[0]))[:8], sorted(data, key=lambda p: len(p[0]))[8:]
whole, (model_a, opt_a), (model_b, opt_b) = batch(short + long), fresh(), fresh()
stats = train_step(model_a, [batch(short), batch(long)], opt_a, loss_fn)    # two micro-batches
train_step(model_b, [whole], opt_b, loss_fn)                                   # the batch they came from
model_c, opt_c = fresh()
opt_c.zero_grad()
for micro in (batch(short), batch(long)):                                      # the slip: average the two means
    (loss_fn(model_c(micro[0], micro[1]), micro[2]).loss * 0.5).backward()
opt_c.step()
grad_b = opt_b.gather_grads()                                                  # every gradient, one flat array
gap_right = float(np.abs(opt_a.gather_grads() - grad_b).max())
gap_slip = float(np.abs(opt_c.gather_grads() - grad_b).max())
print(f"target tokens per micro-batch: {[int((batch(m)[2] != PAD).sum()) for m in (short, long)]}; "
      f"largest gradient difference from the one batch: weighted {gap_right:.1e}, plain average {gap_slip:.1e}")

# %% CHECK
assert stats.tgt_tokens == int((whole[2] != PAD).sum()), "train_step counts the target tokens of the whole update"
assert gap_right < 1e-12, f"weighted accumulation must give the one batch's gradient, off by {gap_right:.1e}"
b_weights = model_b.state_dict()
for name, array in model_a.state_dict().items():
    mt.assert_close(array, b_weights[name], name=f"{name} after the update")
assert gap_slip > 1e-4, "averaging the micro-batch means weights the short sentences' tokens too much"

# %% [markdown]
# ## 2. Gradient clipping, on the accumulated gradient
#
# The paper does not clip (our `train.clip_norm` defaults to 0), but long runs
# often do: if the gradient's L2 norm over *all* parameters exceeds c, scale it
# down to norm c, keeping its direction. `train_step` first gathers every
# gradient into one flat array (`optimizer.gather_grads()`: one place for the
# data-parallel all-reduce, the fp16 unscale and the finiteness check), then
# `clip_grad_norm(flat, c)` scales it in place and returns the norm it had.

# %%
model_d, opt_d = fresh()
clipped = train_step(model_d, [whole], opt_d, loss_fn, clip_norm=0.05)
flat = opt_d.gather_grads()                                                    # p.grad is left as computed
norm_before = float(np.linalg.norm(flat))
small = flat.copy()
returned = float(clip_grad_norm(small, 10 * norm_before))                      # a bound it does not reach
big = flat.copy()
clip_grad_norm(big, 0.05)
print(f"gradient norm {float(clipped.grad_norm):.3f}; clipped to {np.linalg.norm(big):.3f}")

# %% CHECK
assert np.isclose(float(clipped.grad_norm), norm_before), "train_step reports the norm before clipping"
assert np.isclose(returned, norm_before) and np.array_equal(small, flat), "below the bound nothing changes"
assert np.isclose(np.linalg.norm(big), 0.05, rtol=1e-4), "above it, the norm becomes the bound"
assert np.allclose(big / np.linalg.norm(big), flat / norm_before), "and the direction is kept"

# %% [markdown]
# ## 3. The checkpoint file: safetensors, read by hand
#
# A checkpoint holds named arrays and some metadata. `transformer/checkpoint.py`
# writes the safetensors format through the `safetensors` package, the format's
# reference implementation (no pickle: loading a file never runs code):
#
#     8 bytes    little-endian uint64 N, the header's length
#     N bytes    JSON {name: {"dtype": "F32", "shape": [...], "data_offsets": [begin, end]}, ...,
#                      "__metadata__": {str: str}}, padded with spaces to a multiple of 8
#     the rest   every tensor's raw little-endian bytes, C order; offsets count from here
#
# Our `__metadata__` has one entry, "checkpoint": JSON text holding the metadata
# and sha256 hashes of each tensor's bytes and of the header (names, dtypes,
# shapes, metadata), so a flipped byte is caught on load and blamed on the tensor
# that holds it. (One entry, because the format keeps no order among entries: with
# one, the same checkpoint is always the same bytes.) Here is the format read with
# nothing but `json` and NumPy.

# %%
def read_by_hand(path):
    raw = open(path, "rb").read()
    n = int.from_bytes(raw[:8], "little")
    header = json.loads(raw[8:8 + n])
    meta = header.pop("__metadata__")
    kinds = {"F64": "<f8", "F32": "<f4", "F16": "<f2", "I64": "<i8", "I32": "<i4"}
    tensors = {name: np.frombuffer(raw[8 + n + info["data_offsets"][0]:8 + n + info["data_offsets"][1]],
                                   dtype=kinds[info["dtype"]]).reshape(info["shape"])
               for name, info in header.items()}
    return tensors, json.loads(meta["checkpoint"])["metadata"], n


ckpt_dir = OUT / "16_checkpoints"
ckpt_dir.mkdir(parents=True, exist_ok=True)
path = ckpt_dir / "example.safetensors"
state = {"w": rng.standard_normal((3, 4)).astype(np.float32), "step": np.array(7, dtype=np.int64)}
save_checkpoint(path, state, {"note": "hello"})
by_hand, meta, header_len = read_by_hand(path)
print(f"header {header_len} bytes, tensors {sorted(by_hand)}, metadata {meta}")

# %% CHECK
assert header_len % 8 == 0, "the header is padded so the tensor bytes start 8-byte aligned"
for name, array in load_checkpoint(path)[0].items():
    assert np.array_equal(by_hand[name], array) and by_hand[name].dtype == array.dtype, f"{name}: same by hand"
assert meta == {"note": "hello"}, "our metadata travels as JSON text"
assert all(np.array_equal(load_file(path)[k], v) for k, v in state.items()), "the package's own reader agrees"

# %% [markdown]
# ### Atomic writes, and what a corrupt file looks like
#
# A run killed while writing must never leave a half-written checkpoint where
# the next run would load it. `save_checkpoint` writes `<name>.tmp-<pid>`,
# forces it to disk (`fsync`), then renames it over the old file: a rename
# within a folder is atomic, so readers see the old file or the new one, never
# a mix. We simulate a disk that fails at the last moment by making `os.fsync`
# raise, then flip one byte of a good file.

# %%
def failing_fsync(fd):
    raise OSError(28, "No space left on device")


real_fsync, os.fsync = os.fsync, failing_fsync
try:
    save_checkpoint(path, {"w": np.zeros((3, 4), dtype=np.float32)}, {"note": "new"})
    raise AssertionError("the failing write should have raised")
except OSError as err:
    print("write failed as planned:", err)
finally:
    os.fsync = real_fsync
survivor, survivor_meta = load_checkpoint(path)
corrupt = ckpt_dir / "corrupt.safetensors"
raw = bytearray(path.read_bytes())
raw[-3] ^= 0xFF                                                  # one byte of the last tensor's data
corrupt.write_bytes(bytes(raw))
try:
    load_checkpoint(corrupt)
    corruption_message = None
except CheckpointError as err:
    corruption_message = str(err)
print("loading the flipped file:", corruption_message)

# %% CHECK
assert survivor_meta == {"note": "hello"} and np.array_equal(survivor["w"], state["w"]), "the old file is intact"
assert not list(ckpt_dir.glob("*.tmp-*")), "no temporary file is left behind"
assert corruption_message is not None and "'w'" in corruption_message, "the hash check names the damaged tensor"

# %% [markdown]
# ## 4. Exact resume
#
# A training checkpoint (`train.run.checkpointing.save`) is the model file plus
# everything else the run's future depends on: Adam's moments and step count
# (the learning rate of Eq. (3) depends on the step), the **dropout RNG state**
# (each Dropout draws its seed from one generator, chapter 04: restoring the
# generator replays the same masks), where the data order stands (`Progress`),
# the tokenizer's hash (a model never meets the wrong vocabulary) and the run's
# config. `restore` puts all of it back into freshly built objects. The test:
# with dropout **on**, 6 steps straight must give bit-identical weights to 3
# steps, a save, a new process's worth of fresh objects, a restore, and 3 more.

# %%
run_config = RunConfig()                                        # the defaults: the paper's settings
tokenizer = Tokenizer.train([" ".join(map(str, s)) for s, _ in pairs(300, np.random.default_rng(3))],
                            ckpt_dir / "tokenizer", vocab_size=40)   # restore checks the model was trained with it
dropout_config = config.replace(vocab_size=tokenizer.vocab_size, p_drop=0.3)
micro_batches = [batch(pairs(8, np.random.default_rng(10 + i))) for i in range(6)]


def new_state(seed):
    generator = np.random.default_rng(seed)                     # weights and every dropout seed (§5.4)
    model = Transformer(dropout_config, generator)
    optimizer = Adam(list(model.named_parameters()), lr=NoamSchedule(16, warmup=4))
    return TrainState(run_config, model, optimizer, generator, tokenizer)


def train(state, until):
    while state.progress.step < until:
        train_step(state.model, [micro_batches[state.progress.step]], state.optimizer, loss_fn)
        state.progress.step += 1


straight = new_state(seed=4)
train(straight, 6)
first_half = new_state(seed=4)
train(first_half, 3)
run_dir = OUT / "16_run"                   # `save` writes into a run directory, whose manifest lists every
shutil.rmtree(run_dir, ignore_errors=True)  # file the run wrote: a new one on every run of this chapter
run_dir.mkdir(parents=True)
Manifest.create(run_dir)
saved = checkpointing.save(run_dir, first_half)
resumed = new_state(seed=99)                                     # different weights and RNG: restore must fix both
checkpointing.restore(saved, resumed)
train(resumed, 6)
forgot_rng = new_state(seed=99)
checkpointing.restore(saved, forgot_rng)
forgot_rng.rng.bit_generator.state = np.random.default_rng(5).bit_generator.state   # the classic slip
train(forgot_rng, 6)
straight_weights = straight.model.state_dict()
print(f"resumed from {saved.name}; now {resumed.progress}")

# %% CHECK
for name, array in resumed.model.state_dict().items():
    assert np.array_equal(array, straight_weights[name]), f"{name}: resumed training must be bit-identical"
assert resumed.optimizer.step_count == straight.optimizer.step_count == 6, "Adam's step (and so the rate) restored"
assert not all(np.array_equal(a, straight_weights[n]) for n, a in forgot_rng.model.state_dict().items()), \
    "without the RNG state the dropout masks differ, and so do the weights"

# %% [markdown]
# ## 5. Validation, and the average of the last checkpoints
#
# `train.run.validation.validate` scores the dev set during training. It must
# score the model in eval mode (dropout off: the same number every time, the
# model's own), and hand it back in training mode. And at the end,
# `checkpointing.average_last` writes the element-wise mean of the run's
# **last** `last` checkpoints (§6.1: 5 for base): we save one after each of
# four more steps and compare with our own mean of the newest two.

# %%
dev = pairs(20, np.random.default_rng(7))
dev_split = Split(None, None, [], [], [s for s, _ in dev], [t for _, t in dev])
quiet = dataclasses.replace(run_config, train=dataclasses.replace(run_config.train, valid_bleu_sentences=0))
judged = resumed.model.train()
scores = [validation.validate(judged, loss_fn, Prepared(tokenizer, None, None, [], dev_split, None, {}, None),
                              quiet)["loss"] for _ in range(2)]
still_training = judged.training
judged.eval()
with mt.no_grad():
    dev_out = loss_fn(judged(*batch(dev)[:2]), batch(dev)[2])
eval_loss = float(dev_out.loss.item())
judged.train()
saved_paths = []
for extra in range(7, 11):
    train_step(resumed.model, [micro_batches[extra % len(micro_batches)]], resumed.optimizer, loss_fn)
    resumed.progress.step = extra
    saved_paths.append(checkpointing.save(run_dir, resumed))
averaged_path, averaged_names = checkpointing.average_last(run_dir, last=2)
newest_two = [load_checkpoint(path)[0] for path in saved_paths[-2:]]
averaged_weights = load_checkpoint(averaged_path)[0]
print(f"validation loss {scores}, eval mode by hand {eval_loss:.6f}; averaged {averaged_names}")

# %% CHECK
assert scores[0] == scores[1] and abs(scores[0] - eval_loss) < 1e-5 * abs(eval_loss), \
    f"validation must score the model in eval mode (no dropout): {scores} vs {eval_loss} by hand"
assert still_training, "validation must hand the model back in training mode"
assert averaged_names == [path.name for path in saved_paths[-2:]], \
    f"average_last must average the run's last 2 checkpoints, {[p.name for p in saved_paths[-2:]]}: {averaged_names}"
for name, array in averaged_weights.items():
    by_hand = ((newest_two[0][name].astype(np.float64) + newest_two[1][name]) / 2).astype(array.dtype)
    mt.assert_close(array, by_hand, name=f"average_last: {name} vs our mean of the last 2 checkpoints")

# %% [markdown]
# ## Summary
# - `train_step` weights each micro-batch's mean loss by its share of the target tokens, so accumulated micro-batches update exactly like one big batch; clipping acts on the one accumulated gradient.
# - Checkpoints are safetensors files (8-byte length, JSON header, raw bytes), written to a temporary file and renamed, and verified by sha256 on load.
# - Exact resume needs weights, Adam's moments and step, the dropout RNG state and the data position: `TrainState` saves all of them.
#
# ## Exercises
# 1. **Predict, then run.** You resume a run but forget to restore the RNG state (section 4's `forgot_rng`).
#    Which of these are still identical to the uninterrupted run after the next step: the learning rate, the
#    batch that is read, the dropout masks, the weights? (Answer key: `PREDICT` in
#    `chapters/solutions/16_reading_the_training_pipeline.py`.)
# 2. Write `write_safetensors(path, tensors)`: a minimal writer of the format in section 3 (no metadata,
#    float32/float64/int64 arrays) that `load_checkpoint` and the reference reader accept, writing the bytes
#    yourself. `check_write_safetensors(fn)` round-trips arrays through it and counts calls of the package's
#    writers and of `save_checkpoint`: there must be none.
# 3. Clipping each micro-batch's gradient before accumulating them is not the same as clipping their sum.
#    Write `clipping_counterexample()` returning `(g1, g2, c)` (two 1-d gradients and a bound) for which the
#    two give updates pointing in **different directions** (cosine < 0.9). `check_clipping_counterexample(fn)`
#    tests it with `clip_grad_norm`.

# %%
def check_write_safetensors(write_safetensors) -> None:
    """Exercise 2: our loader and the package's own reader read back what was written."""
    arrays = {"a.weight": rng.standard_normal((2, 3)).astype(np.float32), "b": np.arange(5, dtype=np.int64),
              "c": rng.standard_normal(7)}
    target = ckpt_dir / "exercise.safetensors"
    writers = (safetensors.numpy.save, safetensors.numpy.save_file, safetensors.serialize, safetensors.serialize_file,
               save_checkpoint, checkpointing.save)
    with calls_to(*writers) as calls:
        write_safetensors(target, arrays)
    assert not calls, f"write the header and the bytes yourself; the answer called {dict(calls)}"
    loaded, _ = load_checkpoint(target)
    for name, array in arrays.items():
        assert loaded[name].dtype == array.dtype and np.array_equal(loaded[name], array), f"{name} round-trip"
    assert int.from_bytes(target.read_bytes()[:8], "little") % 8 == 0, "pad the header to a multiple of 8 bytes"
    assert all(np.array_equal(load_file(target)[k], v) for k, v in arrays.items()), "the reference reader agrees"


def check_clipping_counterexample(clipping_counterexample) -> None:
    """Exercise 3: clip-then-sum and sum-then-clip must point in clearly different directions."""
    g1, g2, c = clipping_counterexample()
    g1, g2 = np.array(g1, dtype=np.float64), np.array(g2, dtype=np.float64)
    each = [g.copy() for g in (g1, g2)]
    for g in each:
        clip_grad_norm(g, c)
    total = g1 + g2
    clip_grad_norm(total, c)
    clipped_sum = each[0] + each[1]
    cosine = clipped_sum @ total / (np.linalg.norm(clipped_sum) * np.linalg.norm(total))
    assert cosine < 0.9, f"the two updates point almost the same way (cosine {cosine:.3f})"


# %% CHECK the checks: a wrong answer must fail them
def _write_unpadded(target, tensors):                              # forgets the 8-byte alignment
    header, blobs, offset = {}, [], 0
    for name, array in tensors.items():
        code = {"float32": "F32", "float64": "F64", "int64": "I64"}[array.dtype.name]
        header[name] = {"dtype": code, "shape": list(array.shape), "data_offsets": [offset, offset + array.nbytes]}
        blobs.append(array.tobytes())
        offset += array.nbytes
    text = json.dumps(header).encode()
    text += b" " * (len(text) % 8 == 0)                              # make sure it is *not* a multiple of 8
    with open(target, "wb") as f:
        f.write(len(text).to_bytes(8, "little") + text + b"".join(blobs))


assert fails(check_write_safetensors, _write_unpadded), "check_write_safetensors accepted an unaligned header"
assert fails(check_write_safetensors, lambda target, tensors: safetensors.numpy.save_file(tensors, str(target))), \
    "check_write_safetensors accepted the package's own writer"
assert fails(check_clipping_counterexample, lambda: ([3.0, 0.0], [1.0, 0.0], 1.0)), "accepted parallel gradients"
# check_clipping_counterexample has no method to test: any (g1, g2, c) that splits the directions is right.

# %%
finish("16_reading_the_training_pipeline", {check_write_safetensors: "write_safetensors",
                                            check_clipping_counterexample: "clipping_counterexample"})
