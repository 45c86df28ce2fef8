"""The classic bugs of issues 16 and 19, planted one at a time: each must make a chapter fail in --fast mode, saying why.

A planted bug is a one-line edit of the real code, made in a copy: the chapters and configs (and, for a
library bug, the library package) are copied to a temporary folder, the exact line is replaced
(the test first checks that the original line is there exactly once, so the plant cannot silently
miss), and the chapter runs from the copy with the copy first on PYTHONPATH. The chapter must exit
non-zero with its own message for that bug, not crash somewhere else.
"""
import os
import shutil
from pathlib import Path

import pytest

from test_chapters import ROOT, run_chapter

# (id, file in the repository, line as it is, line with the bug, chapter to run, extra flags, message expected)
PLANTED = [
    ("post-norm order in chapter 08's own SublayerConnection", "chapters/08_layer_norm_and_the_stacks.py",
     "return self.norm(x + self.dropout(out)), aux",
     "return x + self.norm(self.dropout(out)), aux",
     "08", (), "post-norm output rows must have mean 0"),
    ("post-norm order in the library's SublayerConnection", "transformer/layers.py",
     "return self.norm(x + self.dropout(out)), aux",
     "return x + self.norm(self.dropout(out)), aux",
     "08", (), "post-norm output rows must have mean 0"),
    ("dropout without the 1/(1-p) rescale in the library", "minitensor/kernels/dropout_forward/reference.py",
     "y = np.where(keep, x64 / (1.0 - p), 0.0)",
     "y = np.where(keep, x64, 0.0)",
     "04", (), "nn.Dropout: E[dropout(x)] must equal x"),
    ("dropout without the 1/(1-p) rescale in chapter 04's own dropout", "chapters/04_modules_adam_and_noam.py",
     "return x * mt.tensor(keep / (1.0 - p), dtype=x.dtype)",
     "return x * mt.tensor(keep * 1.0, dtype=x.dtype)",
     "04", (), "ours: E[dropout(x)] must equal x"),
    ("'=' instead of '+=' in chapter 02's Value.__add__", "chapters/02_reverse_mode_autograd.py",
     "self.grad += out.grad\n            other.grad += out.grad",
     "self.grad = out.grad\n            other.grad = out.grad",
     "02", (), "Value.__add__ must add (+=) into the gradients"),
    ("a Sigmoid solution that saves its input, not its output", "chapters/solutions/02_reverse_mode_autograd.py",
     "ctx.save_for_backward(y)\n        return y",
     "ctx.save_for_backward(x)\n        return y",
     "02", ("--check-solutions",), "forward must save its output y"),
    ("a decoder that never sees the source (chapter 15's BLEU bar)", "transformer/layers.py",
     "return self.cross_attn(y, memory, src_mask)",
     "return self.cross_attn(y, memory * 0.0, src_mask)",
     "15", (), "after 160 steps (expected > 30.0)"),
    ("a tiled matmul that loads the wrong column of the A tile (chapter 17)", "chapters/17_a_gpu_kernel_step_by_step.py",
     "a_tile[ty, tx] = a[row, k0 + tx]",
     "a_tile[ty, tx] = a[row, k0 + ty]",
     "17", (), "tiled kernel (T = 8) vs NumPy"),
    ("a tiled matmul that loads each tile twice (chapter 17's load count)", "chapters/17_a_gpu_kernel_step_by_step.py",
     "            loads[row, col] += 2\n            cuda.syncthreads()",
     "            loads[row, col] += 2\n            b_tile[ty, tx] = b[k0 + ty, col]\n            loads[row, col] += 1\n"
     "            cuda.syncthreads()",
     "17", (), "tiled: each output costs 2K/T"),
    ("an A fragment with its upper rows in the wrong registers (chapter 17)", "chapters/17_a_gpu_kernel_step_by_step.py",
     "return group + 8 * ((i >> 1) & 1), 2 * tig + (i & 1) + 8 * (i >> 2)",
     "return group + 8 * (i >> 2), 2 * tig + (i & 1) + 8 * (i >> 2)",
     "17", (), "the A fragments must cover the tile exactly once"),
    ("an online softmax that forgets to rescale the running sum (chapter 18)", "chapters/18_fused_row_kernels.py",
     "return m, d1 * math.exp(m1 - m) + d2 * math.exp(m2 - m)",
     "return m, d1 + d2 * math.exp(m2 - m)",
     "18", (), "online stats, one pass"),
    ("bf16 rounding that breaks ties upwards instead of to even", "minitensor/kernels/bf16_cast/reference.py",
     "rounded = (u + 0x7FFF + ((u >> 16) & 1)) >> 16",
     "rounded = (u + 0x8000) >> 16",
     "19", (), "float_to_bf16 must round to nearest even"),
    ("a loss scaler that does not back off after an overflow", "train/run/loss_scaler.py",
     "self.scale = max(self.scale / 2.0, self.min_scale)",
     "self.scale = max(self.scale, self.min_scale)",
     "19", (), "an overflow skips the step and halves s"),
    ("micro-batch losses averaged, not weighted by their share of the tokens", "train/run/step.py",
     "weighted = out.loss * (out.n_tokens / max(n_target, 1))",
     "weighted = out.loss * (1.0 / len(real))",
     "20", (), "accumulation = one batch"),
    ("prepared ids stored as int32 whatever the vocabulary", "train/data/corpus.py",
     "return np.dtype(np.uint16) if vocab_size <= 1 << 16 else np.dtype(np.int32)",
     "return np.dtype(np.int32)",
     "21", (), "uint16, memory-mapped"),
    ("EVALB matching brackets by span alone (labels ignored)", "train/parsing/evalb.py",
     "not params.labeled or _equal(label, candidate[2], params.eq_labels)):",
     "True):",
     "22", (), "train.parsing.evalb must agree with the count by hand"),
    ("the parameter count with 2 LayerNorms per decoder layer, not 3", "train/experiments/ablate_grid.py",
     "decoder = c.N * (2 * attention + ffn + 3 * norm)",
     "decoder = c.N * (2 * attention + ffn + 2 * norm)",
     "23", (), "base, by hand"),
]


def plant(tmp: Path, relative: str, original: str, buggy: str) -> None:
    """Copy the chapters (and the library package the bug lives in) to tmp, then plant the bug there."""
    ignore = shutil.ignore_patterns("__pycache__", "_out")
    shutil.copytree(ROOT / "chapters", tmp / "chapters", ignore=ignore)
    shutil.copytree(ROOT / "configs", tmp / "configs")                # chapters 21-23 read the run configs
    package = relative.split("/")[0]
    if package != "chapters":
        shutil.copytree(ROOT / package, tmp / package, ignore=ignore)
    target = tmp / relative
    text = target.read_text(encoding="utf-8")
    assert text.count(original) == 1, f"{relative}: the line to plant the bug in is not there exactly once"
    target.write_text(text.replace(original, buggy), encoding="utf-8")


@pytest.mark.parametrize("name, relative, original, buggy, number, flags, message", PLANTED,
                         ids=[entry[0] for entry in PLANTED])
def test_planted_bug_fails_a_chapter(tmp_path, name, relative, original, buggy, number, flags, message):
    plant(tmp_path, relative, original, buggy)
    chapter = next((tmp_path / "chapters").glob(f"{number}_*.py"))
    result = run_chapter(chapter, "--fast", *flags, pythonpath=os.pathsep.join([str(tmp_path), str(ROOT)]))
    output = result.stdout + result.stderr
    assert result.returncode != 0, f"{name}: chapter {number} passed with the bug planted"
    assert f"chapter {number} OK" not in result.stdout
    assert message in output, f"{name}: chapter {number} failed, but not with its check for this bug:\n{output[-3000:]}"
