"""Classic bugs, planted one at a time: each must make a chapter fail in --fast mode, saying why.

A planted bug is a small textual edit of the real code: a chapter (or its solutions) for the bugs a
learner makes while following it, the library for the bugs the chapters exist to catch (the training
path: fused Functions, Numba kernels, numba.cuda kernels on the simulator; the optimizer, the loss
scaler, the training step). The test first checks that the original text is there exactly once, so a
plant cannot silently miss; then the chapter runs as a script from a copy of the repository, and must
exit non-zero with its own message for that bug, not crash somewhere else.

Cheap by design, so that 40-odd variants fit in CI: the repository (chapters, configs and the three
packages, with their __pycache__ folders, so Numba's compiled kernels come along) is copied once per
session; each variant edits one file of that copy, runs its chapter, and puts the file back with its
original time stamp. Numba then recompiles only the planted file's kernels (twice: with the bug and
after it), nothing else, and each planted file gets a time stamp of its own so no stale cache of
another variant can be picked up. A chapter stops at its first failing check, so most variants cost
the start-up of one chapter. Bugs in code other issues are changing (train/run/step.py,
train/run/loss_scaler.py, transformer/search.py, the kernels) are planted on single lines that any
refactoring keeps, and the check that the original is there makes a moved line fail loudly.
"""
import contextlib
import os
import shutil
from pathlib import Path
from typing import NamedTuple

import pytest

from test_chapters import ROOT, run_chapter

COPIED = ("chapters", "configs", "minitensor", "transformer", "train")


class Plant(NamedTuple):
    name: str                 # what the bug is
    file: str                 # where it is planted, relative to the repository
    original: str             # the text as it is (exactly once in the file)
    buggy: str                # the text with the bug
    chapter: str              # the chapter that must fail ("04")
    message: str              # a piece of that chapter's failure message
    flags: tuple = ()         # extra command-line flags for the chapter


PLANTED = [
    # chapter 02: autograd
    Plant("'=' instead of '+=' in chapter 02's Value.__add__",
          "chapters/02_reverse_mode_autograd.py",
          "self.grad += out.grad\n            other.grad += out.grad",
          "self.grad = out.grad\n            other.grad = out.grad",
          "02", "Value.__add__ must add (+=) into the gradients"),
    Plant("a Sigmoid solution that saves its input, not its output",
          "chapters/solutions/02_reverse_mode_autograd.py",
          "ctx.save_for_backward(y)\n        return y",
          "ctx.save_for_backward(x)\n        return y",
          "02", "forward must save its output y", ("--check-solutions",)),
    # chapter 04: modules, dropout, Adam and Eq. (3): the Numba kernels and the optimizer
    Plant("dropout without the 1/(1-p) rescale in the library",
          "minitensor/kernels/dropout_forward/reference.py",
          "y = np.where(keep, x64 / (1.0 - p), 0.0)",
          "y = np.where(keep, x64, 0.0)",
          "04", "nn.Dropout: E[dropout(x)] must equal x"),
    Plant("dropout without the 1/(1-p) rescale in chapter 04's own dropout",
          "chapters/04_modules_adam_and_noam.py",
          "return x * mt.tensor(keep / (1.0 - p), dtype=x.dtype)",
          "return x * mt.tensor(keep * 1.0, dtype=x.dtype)",
          "04", "ours: E[dropout(x)] must equal x"),
    Plant("dropout without the 1/(1-p) rescale in the Numba kernel",
          "minitensor/kernels/dropout_forward/numba_cpu.py",
          "keep_scale = x.dtype.type(1.0 / (1.0 - p)) if p < 1.0",
          "keep_scale = x.dtype.type(1.0) if p < 1.0",
          "04", "dropout (p = 0.3), the library on the Numba kernels (what every config trains with): output"),
    Plant("Adam without bias correction in the Numba kernel",
          "minitensor/kernels/adam_step/numba_cpu.py",
          "step_size = t(lr / (1.0 - beta1**step))\n    inv_sqrt_bc2 = t(1.0 / np.sqrt(1.0 - beta2**step))",
          "step_size = t(lr)\n    inv_sqrt_bc2 = t(1.0)",
          "04", "the rate Adam applies at update 1 must be Eq. (3) at step 1"),
    Plant("Adam reading the rate before it counts the update",
          "minitensor/optim.py",
          "self.m, self.v, self.current_lr(),",
          "self.m, self.v, self.current_lr(self.step_count - 1),",
          "04", "the rate Adam applies at update 2 must be Eq. (3) at step 2"),
    Plant("a fused Linear whose bias gradient is the first row's, not the sum over rows",
          "minitensor/functions/fused.py",
          "db = backend.matmul(ones, g, out_dtype=w_dtype).reshape(-1)",
          "db = g[0].astype(w_dtype)",
          "04", "nn.Linear (xW + b), the library on the NumPy reference kernels: gradient of b"),
    # chapter 05: attention: the fused softmax, Numba and numba.cuda kernels
    Plant("attention without the 1/sqrt(d_k) scale in the library",
          "transformer/attention.py",
          "scale=1.0 / math.sqrt(q.shape[-1])",
          "scale=1.0",
          "05", "library Eq. (1) vs NumPy"),
    Plant("a Numba softmax kernel that ignores the mask",
          "minitensor/kernels/softmax_forward/numba_cpu.py",
          "            e = 0 * scale if mr[j] else e\n",
          "",
          "05", "softmax(x/2) with a causal mask, the library on the Numba kernels (what every config trains with): "
                "output"),
    Plant("a Numba softmax backward without the scale",
          "minitensor/kernels/softmax_backward/numba_cpu.py",
          "dot += dy[i, j] * y[i, j]\n        for j in range(L):\n            dx[i, j] = scale * y[i, j]",
          "dot += dy[i, j] * y[i, j]\n        for j in range(L):\n            dx[i, j] = y[i, j]",
          "05", "with a causal mask, the library on the Numba kernels (what every config trains with): gradient of x"),
    Plant("a numba.cuda softmax that never divides by the sum",
          "minitensor/kernels/softmax_forward/numba_cuda.py",
          "inv = acc(1.0) / total if total > 0",
          "inv = acc(1.0) if total > 0",
          "05", "softmax(x/2) with a causal mask, the numba.cuda kernel (CUDA simulator): output"),
    # chapter 06: multi-head attention: the fused Attention Function
    Plant("a fused attention without 1/sqrt(d_k)",
          "transformer/fused.py",
          "backend.softmax_forward(scores, _scale(qh), mask)",
          "backend.softmax_forward(scores, 1.0, mask)",
          "06", "multi-head attention (fused Attention, padding mask, dropout p = 0.2), the library on the NumPy "
                "reference kernels: output"),
    Plant("a fused attention backward that forgets the dropout mask on dV",
          "transformer/fused.py",
          "dropped = inverted_dropout(backend, weights, p, seed)",
          "dropped = weights",
          "06", "the library on the NumPy reference kernels: gradient of v"),
    Plant("a fused attention backward that forgets the dropout mask on dW",
          "transformer/fused.py",
          "d_weights = inverted_dropout(backend, d_dropped, p, seed)",
          "d_weights = d_dropped",
          "06", "the library on the NumPy reference kernels: gradient of q"),
    # chapter 07: embeddings (√d_model, the scatter-add kernel) and positions
    Plant("a Numba embedding backward that overwrites repeated ids instead of adding",
          "minitensor/kernels/embedding_backward/numba_cpu.py",
          "dweight[ids[i], j] += dout[i, j]",
          "dweight[ids[i], j] = dout[i, j]",
          "07", "the tied source embedding E[ids]·√d_model, the library on the Numba kernels (what every config "
                "trains with): gradient of E"),
    Plant("embeddings not multiplied by sqrt(d_model)",
          "transformer/embedding.py",
          "self.tie, self.scale = tie, math.sqrt(d_model)",
          "self.tie, self.scale = tie, 1.0",
          "07", "source embedding = E[ids]·√d_model"),
    Plant("sines and cosines swapped in the positional table",
          "transformer/positional.py",
          "    table[:, 1::2] = np.cos(angle)",
          "    table[:, 1::2] = np.cos(angle)\n"
          "    table[:, 0::2], table[:, 1::2] = table[:, 1::2], table[:, 0::2].copy()",
          "07", "PE(0) must be (0, 1, 0, 1, ...)"),
    # chapter 08: LayerNorm and the fused post-norm connection
    Plant("post-norm order in chapter 08's own SublayerConnection",
          "chapters/08_layer_norm_and_the_stacks.py",
          "return self.norm(x + self.dropout(out)), aux",
          "return x + self.norm(self.dropout(out)), aux",
          "08", "post-norm output rows must have mean 0"),
    Plant("post-norm order in the library's SublayerConnection",
          "transformer/layers.py",
          "return self.norm(x + self.dropout(out)), aux",
          "return x + self.norm(self.dropout(out)), aux",
          "08", "post-norm output rows must have mean 0"),
    Plant("post-norm order in the fused DropoutAddLayerNorm: x + LayerNorm(Dropout(s))",
          "transformer/fused.py",
          "return layer_norm_forward(ctx, z, gamma, beta, eps)",
          "return ctx.backend.add(x, layer_norm_forward(ctx, z - x, gamma, beta, eps))",
          "08", "the post-norm sub-layer connection (fused DropoutAddLayerNorm, p_drop = 0.3), the library on the "
                "NumPy reference kernels: output"),
    Plant("a fused DropoutAddLayerNorm backward that forgets the dropout mask",
          "transformer/fused.py",
          'ds = inverted_dropout(ctx.backend, dz, ctx.params["p"], ctx.params["seed"])',
          "ds = dz",
          "08", "the post-norm sub-layer connection (fused DropoutAddLayerNorm, p_drop = 0.3), the library on the "
                "NumPy reference kernels: gradient of x"),
    Plant("a Numba LayerNorm with eps outside the square root",
          "minitensor/kernels/layernorm_forward/numba_cpu.py",
          "rs = 1.0 / np.sqrt(sq / D + eps)\n        mu_t",
          "rs = 1.0 / (np.sqrt(sq / D) + eps)\n        mu_t",
          "08", "LayerNorm, the library on the Numba kernels (what every config trains with): output"),
    Plant("a Numba LayerNorm backward without the term through the variance",
          "minitensor/kernels/layernorm_backward/numba_cpu.py",
          "dx[i, j] = rstd[i] * (g - g_mean - xhat * gx_mean)",
          "dx[i, j] = rstd[i] * (g - g_mean)",
          "08", "LayerNorm, the library on the Numba kernels (what every config trains with): gradient of x"),
    Plant("a numba.cuda LayerNorm with the unbiased variance",
          "minitensor/kernels/layernorm_forward/numba_cuda.py",
          "math.sqrt(block_sum(red, tid, partial) / D + eps)",
          "math.sqrt(block_sum(red, tid, partial) / (D - 1) + eps)",
          "08", "LayerNorm, the numba.cuda kernel (CUDA simulator): output"),
    # chapter 09: the fused cross-entropy
    Plant("a Numba cross-entropy that leaves probability mass on padding",
          "minitensor/kernels/cross_entropy_forward/numba_cpu.py",
          "    if ignore_index >= 0:\n        out[ignore_index] += c  # ignored class: q = 0, so p - 0\n    return "
          "gold_q",
          "    return gold_q",
          "09", "label-smoothed cross-entropy with padding (fused CrossEntropy), the library on the Numba kernels "
                "(what every config trains with): gradient of logits"),
    Plant("a fused CrossEntropy backward that drops the upstream gradient",
          "minitensor/functions/fused.py",
          "dlogits *= grad_out[:, None].astype(dlogits.dtype)",
          "dlogits *= 1.0",
          "09", "(fused CrossEntropy), the library on the NumPy reference kernels: gradient of logits"),
    Plant("label smoothing that counts padding rows",
          "minitensor/functions/composed.py",
          "        q[targets == ignore_index] = 0.0\n",
          "",
          "09", "library loss vs dense q"),
    # chapter 12: beam search
    Plant("a length penalty over 5 instead of 6",
          "transformer/search.py",
          "/ 6.0) ** alpha",
          "/ 5.0) ** alpha",
          "12", "length_penalty must be GNMT's ((5 + |Y|)/6)^α"),
    # chapter 13: checkpoint averaging
    Plant("an exercise answer that holds every checkpoint in memory",
          "chapters/solutions/13_bleu_and_checkpoint_averaging.py",
          "for state in checkpoints:",
          "for state in list(checkpoints):",
          "13", "older checkpoints are still in memory", ("--check-solutions",)),
    # chapter 15: training
    Plant("a decoder that never sees the source (chapter 15's BLEU bar)",
          "transformer/layers.py",
          "return self.cross_attn(y, memory, src_mask)",
          "return self.cross_attn(y, memory * 0.0, src_mask)",
          "15", "after 160 steps (expected > 30.0)"),
    # chapter 16: the training pipeline
    Plant("an exercise answer that calls the safetensors package to write the file",
          "chapters/solutions/16_reading_the_training_pipeline.py",
          '    text = json.dumps(header, separators=(",", ":")).encode("utf-8")',
          '    from safetensors.numpy import save_file\n    return save_file(dict(tensors), str(path))\n    text = '
          'json.dumps(header, separators=(",", ":")).encode("utf-8")',
          "16", "write the header and the bytes yourself", ("--check-solutions",)),
    # chapter 17: GPU kernels
    Plant("a tiled matmul that loads the wrong column of the A tile (chapter 17)",
          "chapters/17_a_gpu_kernel_step_by_step.py",
          "a_tile[ty, tx] = a[row, k0 + tx]",
          "a_tile[ty, tx] = a[row, k0 + ty]",
          "17", "tiled kernel (T = 8) vs NumPy"),
    Plant("a tiled matmul that loads each tile twice (chapter 17's load count)",
          "chapters/17_a_gpu_kernel_step_by_step.py",
          "            loads[row, col] += 2\n            cuda.syncthreads()",
          "            loads[row, col] += 2\n            b_tile[ty, tx] = b[k0 + ty, col]\n            loads[row, "
          "col] += 1\n            cuda.syncthreads()",
          "17", "tiled: each output costs 2K/T"),
    Plant("an A fragment with its upper rows in the wrong registers (chapter 17)",
          "chapters/17_a_gpu_kernel_step_by_step.py",
          "return group + 8 * ((i >> 1) & 1), 2 * tig + (i & 1) + 8 * (i >> 2)",
          "return group + 8 * (i >> 2), 2 * tig + (i & 1) + 8 * (i >> 2)",
          "17", "the A fragments must cover the tile exactly once"),
    Plant("an exercise answer that multiplies on the host instead of launching the kernel",
          "chapters/solutions/17_a_gpu_kernel_step_by_step.py",
          "    _tiled_any_size(tile)[(math.ceil(N / tile), math.ceil(M / tile)), (tile, tile)](c, a, b)\n    return c",
          "    return a @ b",
          "17", "the product was computed on the host", ("--check-solutions",)),
    # chapter 18: fused row kernels
    Plant("an online softmax that forgets to rescale the running sum (chapter 18)",
          "chapters/18_fused_row_kernels.py",
          "return m, d1 * math.exp(m1 - m) + d2 * math.exp(m2 - m)",
          "return m, d1 + d2 * math.exp(m2 - m)",
          "18", "online stats, one pass"),
    Plant("an exercise answer that finds the max in a first pass",
          "chapters/solutions/18_fused_row_kernels.py",
          "m, d = -math.inf, 0.0",
          "m, d = max(row), 0.0",
          "18", "the row was read a second time: this must be one pass", ("--check-solutions",)),
    # chapter 19: mixed precision: loss scaling where Adam cannot hide it
    Plant("bf16 rounding that breaks ties upwards instead of to even",
          "minitensor/kernels/bf16_cast/reference.py",
          "rounded = (u + 0x7FFF + ((u >> 16) & 1)) >> 16",
          "rounded = (u + 0x8000) >> 16",
          "19", "float_to_bf16 must round to nearest even"),
    Plant("a loss scaler that does not back off after an overflow",
          "train/run/loss_scaler.py",
          "self.scale = max(self.scale / 2.0, self.min_scale)",
          "self.scale = max(self.scale, self.min_scale)",
          "19", "an overflow skips the step and halves s"),
    Plant("a loss scaler that never divides by the scale",
          "train/run/loss_scaler.py",
          "grad *= np.float32(1.0 / self.scale)",
          "grad *= np.float32(1.0)",
          "19", "Adam must be handed the unscaled gradient"),
    Plant("clipping the scaled gradient, before unscaling",
          "train/run/step.py",
          "grad = sync.finish()",
          "grad = sync.finish()\n    clip_grad_norm(grad, clip_norm if clip_norm > 0 else math.inf)",
          "19", "unscale, then clip"),
    # chapter 20: data parallelism
    Plant("micro-batch losses averaged, not weighted by their share of the tokens",
          "train/run/step.py",
          "weighted = out.loss * (out.n_tokens / max(n_target, 1))",
          "weighted = out.loss * (1.0 / len(real))",
          "20", "accumulation = one batch"),
    Plant("an exercise answer that sums without moving data over the network",
          "chapters/solutions/20_data_parallelism.py",
          "        net.step([(w, w ^ distance, slice(None)) for w in range(n)], add=True)   # everyone sends at once",
          "        net.held = [sum(net.held) for _ in range(n)]",
          "20", "the network counted 0 rounds, not log2 n", ("--check-solutions",)),
    # chapter 21: prepared data
    Plant("prepared ids stored as int32 whatever the vocabulary",
          "train/data/corpus.py",
          "return np.dtype(np.uint16) if vocab_size <= 1 << 16 else np.dtype(np.int32)",
          "return np.dtype(np.int32)",
          "21", "uint16, memory-mapped"),
    Plant("an exercise answer that calls the library's split_compounds",
          "chapters/solutions/21_the_full_wmt_recipe.py",
          '    return _COMPOUND.sub(r"\\1 ##AT##-##AT## \\2", line)',
          "    from train.evaluate.scores import split_compounds as library\n    return library(line)",
          "21", "write the substitution yourself", ("--check-solutions",)),
    # chapter 22: parsing
    Plant("EVALB matching brackets by span alone (labels ignored)",
          "train/parsing/evalb.py",
          "not params.labeled or _equal(label, candidate[2], params.eq_labels)):",
          "True):",
          "22", "train.parsing.evalb must agree with the count by hand"),
    # chapter 23: Table 3
    Plant("the parameter count with 2 LayerNorms per decoder layer, not 3",
          "train/experiments/ablate_grid.py",
          "decoder = c.N * (2 * attention + ffn + 3 * norm)",
          "decoder = c.N * (2 * attention + ffn + 2 * norm)",
          "23", "base, by hand"),
]


@pytest.fixture(scope="module")
def tree(tmp_path_factory) -> Path:
    """One copy of the repository for every variant, __pycache__ included (Numba's compiled kernels)."""
    root = tmp_path_factory.mktemp("planted")
    for folder in COPIED:
        shutil.copytree(ROOT / folder, root / folder, ignore=shutil.ignore_patterns("_out"))
    return root


@contextlib.contextmanager
def planted(tree: Path, plant: Plant, number: int):
    """`plant`'s file in `tree` holds the bug (with a time stamp no other variant uses), then is put back."""
    target = tree / plant.file
    text = target.read_text(encoding="utf-8")
    assert text.count(plant.original) == 1, f"{plant.file}: the text to plant the bug in is not there exactly once"
    stamp = int(target.stat().st_mtime) + 1000 + number      # whole seconds: what a .pyc records of its source
    target.write_text(text.replace(plant.original, plant.buggy), encoding="utf-8")
    os.utime(target, (stamp, stamp))
    try:
        yield
    finally:
        shutil.copy2(ROOT / plant.file, target)              # the original bytes and time stamp: caches valid again


@pytest.mark.parametrize("number, plant", list(enumerate(PLANTED)), ids=[plant.name for plant in PLANTED])
def test_planted_bug_fails_a_chapter(tree, number, plant):
    with planted(tree, plant, number):
        chapter = next((tree / "chapters").glob(f"{plant.chapter}_*.py"))
        result = run_chapter(chapter, "--fast", *plant.flags, pythonpath=str(tree))
    output = result.stdout + result.stderr
    assert result.returncode != 0, f"{plant.name}: chapter {plant.chapter} passed with the bug planted"
    assert f"chapter {plant.chapter} OK" not in result.stdout
    assert plant.message in output, \
        f"{plant.name}: chapter {plant.chapter} failed, but not with its check for this bug:\n{output[-3000:]}"


@pytest.mark.parametrize("plant", PLANTED, ids=[plant.name for plant in PLANTED])
def test_the_text_to_plant_is_there(plant):
    """Fast and separate: a refactoring that moves a planted line shows here, before any chapter runs."""
    text = (ROOT / plant.file).read_text(encoding="utf-8")
    assert text.count(plant.original) == 1, f"{plant.file}: the text to plant the bug in is not there exactly once"
    assert plant.buggy != plant.original


def test_the_suite_covers_every_bug_class():
    """Issue 30's floor: 40 variants, the training path (fused, Numba, numba.cuda) and the optimizer among them."""
    assert len(PLANTED) >= 40, len(PLANTED)
    files = {plant.file for plant in PLANTED}
    for required in ("transformer/fused.py", "minitensor/optim.py", "train/run/loss_scaler.py", "train/run/step.py",
                     "minitensor/kernels/adam_step/numba_cpu.py", "minitensor/kernels/dropout_forward/numba_cpu.py",
                     "minitensor/kernels/cross_entropy_forward/numba_cpu.py"):
        assert required in files, f"no planted bug in {required}"
    assert len({plant.name for plant in PLANTED}) == len(PLANTED), "variant names are test ids: keep them unique"
