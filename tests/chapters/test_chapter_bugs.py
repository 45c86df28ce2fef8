"""Classic bugs, planted one at a time: each must make the chapter that teaches the piece fail in --fast mode,
with a message naming that piece.

A planted bug is a small edit of one function of the real code: a chapter (or its solutions) for the
bugs a learner makes while following it, the library for the bugs the chapters exist to catch (the
training path: fused Functions, Numba kernels, numba.cuda kernels on the simulator; the data path, the
optimizer, the loss scaler, the training step, the search). The edit is confined to the named function:
the text to replace must be there exactly once inside it, and nothing outside it is read, so the rest
of the file may change freely. No file is written: tests/chapters/planting.py compiles the planted
module when the chapter first imports it (or runs the planted chapter script) in a subprocess.

Cheap by design, so that the 70-odd variants fit in CI: a chapter stops at its first failing check, so
most variants cost the start-up of one chapter, and Numba recompiles only the planted module's kernels
(its other modules keep their on-disk cache).
"""
import json
import subprocess
import sys
from pathlib import Path
from typing import NamedTuple

import pytest

from planting import plant as plant_text
from test_chapters import ROOT, TIMEOUT_S, chapter_env

PLANTING = Path(__file__).with_name("planting.py")


class Plant(NamedTuple):
    name: str                 # what the bug is
    file: str                 # where it is planted, relative to the repository
    function: str             # the function it is planted in (qualified name: "Class.method", "outer.inner")
    original: str             # the text as it is (exactly once in that function)
    buggy: str                # the text with the bug
    chapter: str              # the chapter that teaches the piece, and must fail ("04")
    message: str              # a piece of that chapter's failure message, naming the piece
    flags: tuple = ()         # extra command-line flags for the chapter


PLANTED = [
    # chapter 02: autograd
    Plant("'=' instead of '+=' in chapter 02's Value.__add__",
          "chapters/02_reverse_mode_autograd.py", "Value.__add__._backward",
          "self.grad += out.grad\n            other.grad += out.grad",
          "self.grad = out.grad\n            other.grad = out.grad",
          "02", "Value.__add__ must add (+=) into the gradients"),
    Plant("a Sigmoid solution that saves its input, not its output",
          "chapters/solutions/02_reverse_mode_autograd.py", "Sigmoid.forward",
          "ctx.save_for_backward(y)\n        return y",
          "ctx.save_for_backward(x)\n        return y",
          "02", "forward must save its output y", ("--check-solutions",)),
    # chapter 04: modules, dropout, Adam and Eq. (3): the Numba kernels and the optimizer
    Plant("dropout without the 1/(1-p) rescale in the library",
          "minitensor/kernels/dropout_forward/reference.py", "dropout_forward_ref",
          "y = np.where(keep, x64 / (1.0 - p), 0.0)",
          "y = np.where(keep, x64, 0.0)",
          "04", "nn.Dropout: E[dropout(x)] must equal x"),
    Plant("dropout without the 1/(1-p) rescale in chapter 04's own dropout",
          "chapters/04_modules_adam_and_noam.py", "dropout",
          "return x * mt.tensor(keep / (1.0 - p), dtype=x.dtype)",
          "return x * mt.tensor(keep * 1.0, dtype=x.dtype)",
          "04", "ours: E[dropout(x)] must equal x"),
    Plant("dropout without the 1/(1-p) rescale in the Numba kernel",
          "minitensor/kernels/dropout_forward/numba_cpu.py", "dropout_forward_v2",
          "keep_scale = x.dtype.type(1.0 / (1.0 - p)) if p < 1.0",
          "keep_scale = x.dtype.type(1.0) if p < 1.0",
          "04", "dropout (p = 0.3), the library on the Numba kernels (what every config trains with): output"),
    Plant("Adam without bias correction in the Numba kernel",
          "minitensor/kernels/adam_step/numba_cpu.py", "adam_step_v2",
          "step_size = t(lr / (1.0 - beta1**step))\n    inv_sqrt_bc2 = t(1.0 / np.sqrt(1.0 - beta2**step))",
          "step_size = t(lr)\n    inv_sqrt_bc2 = t(1.0)",
          "04", "the rate Adam applies at update 1 must be Eq. (3) at step 1"),
    Plant("Adam reading the rate before it counts the update",
          "minitensor/optim.py", "Adam.step",
          "self.m, self.v, self.current_lr(),",
          "self.m, self.v, self.current_lr(self.step_count - 1),",
          "04", "the rate Adam applies at update 2 must be Eq. (3) at step 2"),
    Plant("a fused Linear whose bias gradient is the first row's, not the sum over rows",
          "minitensor/kernels/bias_backward/reference.py", "bias_backward_ref",
          "return dx, d64.sum(axis=-2).astype(dtype)",
          "return dx, d64[..., 0, :].astype(dtype)",
          "04", "nn.Linear (xW + b), the library on the NumPy reference kernels: gradient of b"),
    # chapter 05: attention: the fused softmax, Numba and numba.cuda kernels
    Plant("attention without the 1/sqrt(d_k) scale in the library",
          "transformer/attention.py", "scaled_dot_product_attention",
          "scale=1.0 / math.sqrt(q.shape[-1])",
          "scale=1.0",
          "05", "library Eq. (1) vs NumPy"),
    Plant("a Numba softmax kernel that ignores the mask",
          "minitensor/kernels/softmax_forward/numba_cpu.py", "softmax_forward_v4",
          "                z[j, k] = neg_inf if mr[j] else scale * xr[j]\n",
          "                z[j, k] = scale * xr[j]\n",
          "05", "softmax(x/2) with a causal mask, the library on the Numba kernels (what every config trains with): "
                "output"),
    Plant("a Numba softmax backward without the scale",
          "minitensor/kernels/softmax_backward/numba_cpu.py", "softmax_backward_v2",
          "dot += dy[i, j] * y[i, j]\n        for j in range(L):\n            dx[i, j] = scale * y[i, j]",
          "dot += dy[i, j] * y[i, j]\n        for j in range(L):\n            dx[i, j] = y[i, j]",
          "05", "with a causal mask, the library on the Numba kernels (what every config trains with): gradient of x"),
    Plant("a numba.cuda softmax that never divides by the sum",
          "minitensor/kernels/softmax_forward/numba_cuda.py", "_kernel.softmax_forward_v1",
          "inv = acc(1.0) / total if total > 0",
          "inv = acc(1.0) if total > 0",
          "05", "softmax(x/2) with a causal mask, the numba.cuda kernel (CUDA simulator): output"),
    # chapter 06: multi-head attention: the fused Attention Function
    Plant("a fused attention without 1/sqrt(d_k)",
          "transformer/fused.py", "Attention.forward",
          "backend.softmax_forward(scores, _scale(qh), mask)",
          "backend.softmax_forward(scores, 1.0, mask)",
          "06", "multi-head attention (fused Attention, padding mask, dropout p = 0.2), the library on the NumPy "
                "reference kernels: output"),
    Plant("a fused attention backward that forgets the dropout mask on dV",
          "transformer/fused.py", "Attention.backward",
          "dropped = inverted_dropout(backend, weights, p, seed)",
          "dropped = weights",
          "06", "the library on the NumPy reference kernels: gradient of v"),
    Plant("a fused attention backward that forgets the dropout mask on dW",
          "transformer/fused.py", "Attention.backward",
          "d_weights = inverted_dropout(backend, d_dropped, p, seed)",
          "d_weights = d_dropped",
          "06", "the library on the NumPy reference kernels: gradient of q"),
    # chapter 07: embeddings (√d_model, the scatter-add kernel) and positions
    Plant("a Numba embedding backward that overwrites repeated ids instead of adding",
          "minitensor/kernels/embedding_backward/numba_cpu.py", "embedding_backward_v1",
          "dweight[ids[i], j] += dout[i, j]",
          "dweight[ids[i], j] = dout[i, j]",
          "07", "the tied source embedding E[ids]·√d_model, the library on the Numba kernels (what every config "
                "trains with): gradient of E"),
    Plant("embeddings not multiplied by sqrt(d_model)",
          "transformer/embedding.py", "Embeddings.__init__",
          "self.tie, self.scale = tie, math.sqrt(d_model)",
          "self.tie, self.scale = tie, 1.0",
          "07", "source embedding = E[ids]·√d_model"),
    Plant("sines and cosines swapped in the positional table",
          "transformer/positional.py", "sinusoid_table",
          "    table[:, 1::2] = np.cos(angle)",
          "    table[:, 1::2] = np.cos(angle)\n"
          "    table[:, 0::2], table[:, 1::2] = table[:, 1::2], table[:, 0::2].copy()",
          "07", "PE(0) must be (0, 1, 0, 1, ...)"),
    # chapter 08: LayerNorm and the fused post-norm connection
    Plant("post-norm order in chapter 08's own SublayerConnection",
          "chapters/08_layer_norm_and_the_stacks.py", "SublayerConnection.forward",
          "return self.norm(x + self.dropout(out)), aux",
          "return x + self.norm(self.dropout(out)), aux",
          "08", "post-norm output rows must have mean 0"),
    Plant("post-norm order in the library's SublayerConnection",
          "transformer/layers.py", "SublayerConnection.forward",
          "return self.norm(x + self.dropout(out)), aux",
          "return x + self.norm(self.dropout(out)), aux",
          "08", "post-norm output rows must have mean 0"),
    Plant("post-norm order in the fused DropoutAddLayerNorm: x + LayerNorm(Dropout(s))",
          "minitensor/kernels/dropout_add_layernorm_forward/reference.py", "dropout_add_layernorm_forward_ref",
          "y, mean, rstd = layernorm_forward_ref(z, gamma, beta, eps)",
          "y, mean, rstd = layernorm_forward_ref(d, gamma, beta, eps)\n    y = x + y",
          "08", "the post-norm sub-layer connection (fused DropoutAddLayerNorm, p_drop = 0.3, the output bias folded "
                "in), the library on the "
                "NumPy reference kernels: output"),
    Plant("a fused DropoutAddLayerNorm backward that forgets the dropout mask",
          "minitensor/kernels/dropout_add_layernorm_backward/reference.py", "dropout_add_layernorm_backward_ref",
          "ds = dx if p == 0.0 else dropout_forward_ref(dx, u, p)",
          "ds = dx",
          "08", "the post-norm sub-layer connection (fused DropoutAddLayerNorm, p_drop = 0.3, the output bias folded "
                "in), the library on the "
                "NumPy reference kernels: gradient of x"),
    Plant("a Numba LayerNorm with eps outside the square root",
          "minitensor/kernels/layernorm_forward/numba_cpu.py", "layernorm_forward_v2",
          "rs = 1.0 / np.sqrt(sq / D + eps)\n        mu_t",
          "rs = 1.0 / (np.sqrt(sq / D) + eps)\n        mu_t",
          "08", "LayerNorm, the library on the Numba kernels (what every config trains with): output"),
    Plant("a Numba LayerNorm backward without the term through the variance",
          "minitensor/kernels/layernorm_backward/numba_cpu.py", "layernorm_backward_v1",
          "dx[i, j] = rstd[i] * (g - g_mean - xhat * gx_mean)",
          "dx[i, j] = rstd[i] * (g - g_mean)",
          "08", "LayerNorm, the library on the Numba kernels (what every config trains with): gradient of x"),
    Plant("a numba.cuda LayerNorm with the unbiased variance",
          "minitensor/kernels/layernorm_forward/numba_cuda.py", "_kernel.layernorm_forward_v1",
          "math.sqrt(block_sum(red, tid, partial) / D + eps)",
          "math.sqrt(block_sum(red, tid, partial) / (D - 1) + eps)",
          "08", "LayerNorm, the numba.cuda kernel (CUDA simulator): output"),
    # chapter 09: the fused cross-entropy
    Plant("a Numba cross-entropy that leaves probability mass on padding",
          "minitensor/kernels/cross_entropy_forward/numba_cpu.py", "_smoothed_row_v4",
          "    if ignore_index >= 0:\n        out[ignore_index] += c  # ignored class: q = 0, so p - 0\n    return "
          "gold_q",
          "    return gold_q",
          "09", "label-smoothed cross-entropy with padding (fused CrossEntropy), the library on the Numba kernels "
                "(what every config trains with): gradient of logits"),
    Plant("a blocked projection whose dE keeps only the last block of rows",
          "minitensor/functions/fused.py", "_projected_cross_entropy",
          "out=dw, accumulate=True)", "out=dw)",
          "09", "the projection and the loss in blocks (LinearCrossEntropy), the library on the NumPy reference "
                "kernels: gradient of E"),
    Plant("a fused CrossEntropy backward that drops the upstream gradient",
          "minitensor/functions/fused.py", "CrossEntropy.backward",
          "return ctx.backend.scale(dlogits, grad_out[:, None])",
          "return dlogits",
          "09", "(fused CrossEntropy), the library on the NumPy reference kernels: gradient of logits"),
    Plant("label smoothing that counts padding rows",
          "minitensor/functions/composed.py", "smoothed_targets",
          "        q[targets == ignore_index] = 0.0\n",
          "",
          "09", "library loss vs dense q"),
    # chapter 12: beam search
    Plant("a length penalty over 5 instead of 6",
          "transformer/search.py", "length_penalty",
          "/ 6.0) ** alpha",
          "/ 5.0) ** alpha",
          "12", "length_penalty must be GNMT's ((5 + |Y|)/6)^α"),
    # chapter 13: checkpoint averaging
    Plant("an exercise answer that holds every checkpoint in memory",
          "chapters/solutions/13_bleu_and_checkpoint_averaging.py", "running_average",
          "for state in checkpoints:",
          "for state in list(checkpoints):",
          "13", "older checkpoints are still in memory", ("--check-solutions",)),
    # chapter 15: training
    Plant("a decoder that never sees the source",
          "transformer/layers.py", "DecoderLayer._cross_attention",
          "return self.cross_attn(y, memory, src_mask)",
          "return self.cross_attn(y, memory * 0.0, src_mask)",
          "15", "the model must read its source"),
    # chapter 16: the training pipeline
    Plant("an exercise answer that calls the safetensors package to write the file",
          "chapters/solutions/16_reading_the_training_pipeline.py", "write_safetensors",
          '    text = json.dumps(header, separators=(",", ":")).encode("utf-8")',
          '    from safetensors.numpy import save_file\n    return save_file(dict(tensors), str(path))\n    text = '
          'json.dumps(header, separators=(",", ":")).encode("utf-8")',
          "16", "write the header and the bytes yourself", ("--check-solutions",)),
    # chapter 17: GPU kernels
    Plant("a tiled matmul that loads the wrong column of the A tile (chapter 17)",
          "chapters/17_a_gpu_kernel_step_by_step.py", "make_tiled.matmul_tiled",
          "a_tile[ty, tx] = a[row, k0 + tx]",
          "a_tile[ty, tx] = a[row, k0 + ty]",
          "17", "tiled kernel (T = 8) vs NumPy"),
    Plant("a tiled matmul that loads each tile twice (chapter 17's load count)",
          "chapters/17_a_gpu_kernel_step_by_step.py", "make_tiled.matmul_tiled",
          "            loads[row, col] += 2\n            cuda.syncthreads()",
          "            loads[row, col] += 2\n            b_tile[ty, tx] = b[k0 + ty, col]\n            loads[row, "
          "col] += 1\n            cuda.syncthreads()",
          "17", "tiled: each output costs 2K/T"),
    Plant("an A fragment with its upper rows in the wrong registers (chapter 17)",
          "chapters/17_a_gpu_kernel_step_by_step.py", "a_position",
          "return group + 8 * ((i >> 1) & 1), 2 * tig + (i & 1) + 8 * (i >> 2)",
          "return group + 8 * (i >> 2), 2 * tig + (i & 1) + 8 * (i >> 2)",
          "17", "the A fragments must cover the tile exactly once"),
    Plant("an exercise answer that multiplies on the host instead of launching the kernel",
          "chapters/solutions/17_a_gpu_kernel_step_by_step.py", "matmul_any_size",
          "    _tiled_any_size(tile)[(math.ceil(N / tile), math.ceil(M / tile)), (tile, tile)](c, a, b)\n    return c",
          "    return a @ b",
          "17", "the product was computed on the host", ("--check-solutions",)),
    # chapter 18: fused row kernels
    Plant("an online softmax that forgets to rescale the running sum (chapter 18)",
          "chapters/18_fused_row_kernels.py", "merge",
          "return m, d1 * math.exp(m1 - m) + d2 * math.exp(m2 - m)",
          "return m, d1 + d2 * math.exp(m2 - m)",
          "18", "online stats, one pass"),
    Plant("an exercise answer that finds the max in a first pass",
          "chapters/solutions/18_fused_row_kernels.py", "online_logsumexp",
          "m, d = -math.inf, 0.0",
          "m, d = max(row), 0.0",
          "18", "the row was read a second time: this must be one pass", ("--check-solutions",)),
    # chapter 19: mixed precision: loss scaling where Adam cannot hide it
    Plant("bf16 rounding that breaks ties upwards instead of to even",
          "minitensor/kernels/bf16_cast/reference.py", "float_to_bf16",
          "rounded = (u + 0x7FFF + ((u >> 16) & 1)) >> 16",
          "rounded = (u + 0x8000) >> 16",
          "19", "float_to_bf16 must round to nearest even"),
    Plant("a loss scaler that does not back off after an overflow",
          "train/run/loss_scaler.py", "DynamicLossScaler.update",
          "self.scale = max(self.scale / 2.0, self.min_scale)",
          "self.scale = max(self.scale, self.min_scale)",
          "19", "an overflow skips the step and halves s"),
    Plant("a loss scaler that never divides by the scale",
          "train/run/loss_scaler.py", "DynamicLossScaler.unscale_and_check",
          "grad *= np.float32(1.0 / self.scale)",
          "grad *= np.float32(1.0)",
          "19", "Adam must be handed the unscaled gradient"),
    Plant("clipping the scaled gradient, before unscaling",
          "train/run/step.py", "train_step",
          "grad = sync.finish()",
          "grad = sync.finish()\n        clip_grad_norm(grad, clip_norm if clip_norm > 0 else math.inf)",
          "19", "unscale, then clip"),
    # chapter 20: data parallelism
    Plant("micro-batch losses averaged, not weighted by their share of the tokens",
          "train/run/step.py", "train_step",
          "weighted = out.loss * (out.n_tokens / max(n_target, 1))",
          "weighted = out.loss * (1.0 / len(real))",
          "20", "accumulation = one batch"),
    Plant("an exercise answer that sums without moving data over the network",
          "chapters/solutions/20_data_parallelism.py", "recursive_doubling_all_reduce",
          "        net.step([(w, w ^ distance, slice(None)) for w in range(n)], add=True)   # everyone sends at once",
          "        net.held = [sum(net.held) for _ in range(n)]",
          "20", "the network counted 0 rounds, not log2 n", ("--check-solutions",)),
    # chapter 21: prepared data
    Plant("prepared ids stored as int32 whatever the vocabulary",
          "train/data/corpus.py", "ids_dtype",
          "return np.dtype(np.uint16) if vocab_size <= 1 << 16 else np.dtype(np.int32)",
          "return np.dtype(np.int32)",
          "21", "uint16, memory-mapped"),
    Plant("an exercise answer that calls the library's split_compounds",
          "chapters/solutions/21_the_full_wmt_recipe.py", "split_compounds",
          '    return _COMPOUND.sub(r"\\1 ##AT##-##AT## \\2", line)',
          "    from train.evaluate.scores import split_compounds as library\n    return library(line)",
          "21", "write the substitution yourself", ("--check-solutions",)),
    # chapter 22: parsing
    Plant("EVALB matching brackets by span alone (labels ignored)",
          "train/parsing/evalb.py", "score_sentence",
          "not params.labeled or _equal(label, candidate[2], params.eq_labels)):",
          "True):",
          "22", "train.parsing.evalb must agree with the count by hand"),
    # chapter 23: Table 3
    Plant("the parameter count with 2 LayerNorms per decoder layer, not 3",
          "train/experiments/ablate_grid.py", "count_parameters",
          "decoder = c.N * (2 * attention + ffn + 3 * norm)",
          "decoder = c.N * (2 * attention + ffn + 2 * norm)",
          "23", "base, by hand"),
    # the data path (class 1): what the training pipeline feeds the model, held by the chapters that teach it
    Plant("a decoder input that is not shifted right (teacher forcing sees the answer)",
          "train/data/inputs.py", "make_model_inputs",
          "tgt_in = pad_batch([np.concatenate(([BOS_ID], t)) for t in tgt_ids], PAD_ID)",
          "tgt_in = pad_batch([np.append(t, EOS_ID) for t in tgt_ids], PAD_ID)",
          "15", "the library's model inputs (make_model_inputs, the data path of fit): the decoder input differs"),
    Plant("a source without its EOS in the library's model inputs",
          "train/data/inputs.py", "make_model_inputs",
          "src = pad_batch([np.append(s, EOS_ID) for s in src_ids], PAD_ID)",
          "src = pad_batch([np.asarray(s) for s in src_ids], PAD_ID)",
          "15", "the library's model inputs (make_model_inputs, the data path of fit): the source differs"),
    Plant("labels that end in BOS instead of EOS",
          "train/data/inputs.py", "make_model_inputs",
          "tgt_out = pad_batch([np.append(t, EOS_ID) for t in tgt_ids], PAD_ID)",
          "tgt_out = pad_batch([np.append(t, BOS_ID) for t in tgt_ids], PAD_ID)",
          "15", "the library's model inputs (make_model_inputs, the data path of fit): the labels differ"),
    Plant("no dropout on the sums of the embeddings and the positions (§5.4)",
          "transformer/model.py", "Transformer._into_stacks",
          "return self.dropout(x.astype(self.compute_dtype), self.time_major)",
          "return x.astype(self.compute_dtype)",
          "10", "dropout on the sums of the embeddings and the positional encodings (§5.4): the fused model in "
                "training mode gives its eval-mode logits"),
    Plant("the embedding-sum dropout masked in the time-major layout, not as the (B, T) batch would be",
          "transformer/model.py", "Transformer._into_stacks",
          "return self.dropout(x.astype(self.compute_dtype), self.time_major)",
          "return self.dropout(x.astype(self.compute_dtype))",
          "10", "dropout on the sums of the embeddings and the positional encodings (§5.4), the fused model: "
                "logits vs ours"),
    Plant("validation that scores the model with dropout on",
          "train/run/validation.py", "validate",
          "    model.eval()\n", "    model.train()\n",
          "16", "validation must score the model in eval mode"),
    Plant("validation that leaves the model in eval mode",
          "train/run/validation.py", "validate",
          "    model.train()\n    result =", "    result =",
          "16", "validation must hand the model back in training mode"),
    # the fused path with every feature on (class 2)
    Plant("the time-major dropout draws not swapped back to the (T, B) layout",
          "minitensor/backends/base.py", "Backend.draws",
          'return self.xp.swapaxes(self.uniform(seed, (shape[1], shape[0]) + tuple(shape[2:]), "float32"), 0, 1)',
          'return self.uniform(seed, shape, "float32")',
          "08", "the post-norm sub-layer connection (fused DropoutAddLayerNorm, p_drop = 0.3, the output bias folded "
                "in), the library on the NumPy reference kernels: output"),
    Plant("a time-major Dropout whose backward draws the batch-major mask",
          "minitensor/functions/fused.py", "Dropout.backward",
          'ctx.params["seed"], ctx.params["time_major"])', 'ctx.params["seed"], False)',
          "10", "the fused model on the Numba kernels, dropout on: gradient of"),
    Plant("a fused sub-layer connection that drops the folded output bias",
          "transformer/layers.py", "SublayerConnection._dropout_add_norm",
          "bias = () if self.output is None else (self.output.bias,)", "bias = ()",
          "08", "the output bias folded in), the library on the NumPy reference kernels: output"),
    Plant("a fused DropoutAddLayerNorm that adds the output bias after dropout, not before",
          "minitensor/kernels/dropout_add_layernorm_forward/reference.py", "dropout_add_layernorm_forward_ref",
          "    z = from_float64(as_float64(x) + d, x.dtype)",
          "    z = from_float64(as_float64(x) + d + (0.0 if bias is None else as_float64(bias)), x.dtype)",
          "08", "the output bias folded in), the library on the NumPy reference kernels: output"),
    Plant("a fused DropoutAddLayerNorm whose bias gradient ignores the dropout mask",
          "minitensor/kernels/dropout_add_layernorm_backward/reference.py", "dropout_add_layernorm_backward_ref",
          "dbias = as_float64(ds).reshape", "dbias = as_float64(dx).reshape",
          "08", "the output bias folded in), the library on the NumPy reference kernels: gradient of b"),
    Plant("a KV cache that never keeps what it appended",
          "transformer/layers.py", "LayerCache.append_self",
          "        self.self_kv = kv\n", "",
          "12", "cached decoding must give the full forward's logits"),
    Plant("beam search that never reorders the fused model's time-major KV cache",
          "transformer/layers.py", "DecoderCache.reorder",
          "layer.self_kv = tuple(_rows(a, rows, layer.batch_axis) for a in layer.self_kv)",
          "layer.self_kv = tuple(a if layer.batch_axis else _rows(a, rows, 0) for a in layer.self_kv)",
          "12", "the fused model's KV cache under beam search"),
    Plant("Adam writing the half-precision copy before the update",
          "minitensor/kernels/adam_step/reference.py", "adam_step_ref",
          "    param[...] = p64\n    if half is not None:\n        half[...] = from_float64(param, half.dtype)",
          "    if half is not None:\n        half[...] = from_float64(param, half.dtype)\n    param[...] = p64",
          "19", "weight copy after updates must be the float32 master rounded to nearest even"),
    # rules checked where they bite (class 3)
    Plant("a loss scaler that keeps counting good steps across an overflow",
          "train/run/loss_scaler.py", "DynamicLossScaler.update",
          "        self.consecutive_overflows += 1\n        self.good_steps = 0\n",
          "        self.consecutive_overflows += 1\n",
          "19", "the loss scale for a fixed overflow pattern"),
    Plant("a loss scaler that halves below its floor",
          "train/run/loss_scaler.py", "DynamicLossScaler.update",
          "self.scale = max(self.scale / 2.0, self.min_scale)", "self.scale = self.scale / 2.0",
          "19", "the loss scale for a fixed overflow pattern"),
    Plant("a loss scaler that doubles at every good step once past the interval",
          "train/run/loss_scaler.py", "DynamicLossScaler.update",
          "if self.good_steps % self.growth_interval == 0:", "if self.good_steps >= self.growth_interval:",
          "19", "double"),
    Plant("a stopping bound that forgets lp grows up to the length limit",
          "transformer/search.py", "_stops",
          "np.maximum(length_penalty(t + 1, alpha), length_penalty(limits, alpha))", "length_penalty(t + 1, alpha)",
          "12", "the stopping bound (§6.1, stop when no live hypothesis can still win)"),
    Plant("beam search that always stops at k finished hypotheses",
          "transformer/search.py", "_stops",
          "(early_stop & (n_finished >= beam))", "(n_finished >= beam)",
          "12", "the bound keeps decoding until it ends"),
    Plant("a search that lets BOS be an output",
          "transformer/search.py", "_log_probs",
          "logp[:, [config.pad_id, config.bos_id]] = -np.inf", "logp[:, [config.pad_id]] = -np.inf",
          "12", "PAD and BOS are never outputs"),
    Plant("checkpoint averaging that averages integer tensors too",
          "transformer/checkpoint.py", "average_checkpoints",
          "if np.issubdtype(v.dtype, np.floating)}", "if np.issubdtype(v.dtype, np.number)}",
          "13", "integer tensors are taken from the last checkpoint"),
    Plant("average_last averaging the first checkpoints, not the last",
          "train/run/checkpointing.py", "average_last",
          "tensors, metadata = average_checkpoints(paths[-last:])",
          "tensors, metadata = average_checkpoints(paths[:last])",
          "16", "average_last: "),
    # exercise answers with the right numbers by the wrong method
    Plant("an exercise answer that runs autograd for the LayerNorm backward it should derive",
          "chapters/solutions/03_checking_gradients.py", "layernorm_backward",
          "    mean = x.mean(axis=-1, keepdims=True)\n",
          "    import minitensor as mt\n    xt = mt.tensor(x, requires_grad=True, dtype='float64')\n"
          "    y = mt.functions.LayerNorm.apply(xt, mt.tensor(gamma, dtype='float64'), mt.tensor(0 * gamma, "
          "dtype='float64'), eps=eps)\n    (y * dy).sum().backward()\n    return xt.grad\n",
          "03", "derive dx by hand", ("--check-solutions",)),
    Plant("an exercise answer that calls the library's attention",
          "chapters/solutions/05_scaled_dot_product_attention.py", "attention",
          "    scores = q @ k.swapaxes(-1, -2) / math.sqrt(q.shape[-1])",
          "    import minitensor as mt\n    from transformer.attention import scaled_dot_product_attention\n"
          "    out, w = scaled_dot_product_attention(*(mt.tensor(a, dtype='float64') for a in (q, k, v)), mask=mask)\n"
          "    return out.numpy(), w.numpy()",
          "05", "the answer called the library's scaled_dot_product_attention", ("--check-solutions",)),
    Plant("an exercise answer that counts tokens instead of checking the offset",
          "chapters/solutions/15_batching_and_training.py", "offset_is_right",
          "    tgt_in, tgt_out = np.asarray(tgt_in), np.asarray(tgt_out)\n",
          "    tgt_in, tgt_out = np.asarray(tgt_in), np.asarray(tgt_out)\n    n = (tgt_out != pad).sum(axis=1)\n"
          "    return bool((tgt_in[:, 0] == bos).all() and ((tgt_in != pad).sum(axis=1) == n).all() and "
          "(tgt_out[np.arange(len(n)), n - 1] == eos).all())\n",
          "15", "offset_is_right must say False for a batch made", ("--check-solutions",)),
    Plant("an exercise answer that lets NumPy's casts do the bit-level work",
          "chapters/solutions/19_mixed_precision.py", "to_bits",
          "    values = np.asarray(values, dtype=np.float64)\n",
          "    values = np.asarray(values)\n    if (exp_bits, man_bits) == (5, 10):\n"
          "        return values.astype(np.float16).view(np.uint16)\n"
          "    return values.astype(np.float32).view(np.uint32) >> (23 - man_bits)\n",
          "19", "E4M3: to_bits(decode(bits)) must be bits", ("--check-solutions",)),
    Plant("an exercise answer that runs the library's Adam for its first update",
          "chapters/solutions/04_modules_adam_and_noam.py", "first_adam_update",
          "    return -lr * g / (np.abs(g) + eps)",
          "    from minitensor import nn, optim\n    param = nn.Parameter(np.zeros(g.shape))\n"
          "    param.grad = g.astype(np.float32)\n    optim.Adam([param], lr=lr, eps=eps).step()\n"
          "    return param.numpy()",
          "04", "the answer ran the library's Adam", ("--check-solutions",)),
    Plant("an exercise answer that loops over heads with the chapter's per-head code",
          "chapters/solutions/06_multi_head_attention.py", "multi_head_self_attention",
          "    q, k, v = (split_heads(x @ w, h) for w in (wq, wk, wv))",
          "    import __main__\n    width = wq.shape[1] // h\n"
          "    cols = [slice(i * width, (i + 1) * width) for i in range(h)]\n"
          "    heads = [__main__.attention(x @ wq[:, c], x @ wk[:, c], x @ wv[:, c])[0] for c in cols]\n"
          "    return np.concatenate(heads, axis=-1) @ wo\n"
          "    q, k, v = (split_heads(x @ w, h) for w in (wq, wk, wv))",
          "06", "without a loop over heads: the answer called", ("--check-solutions",)),
    Plant("an exercise answer that runs autograd for RMSNorm's backward",
          "chapters/solutions/08_layer_norm_and_the_stacks.py", "rms_norm_backward",
          "    r = 1.0 / np.sqrt((x * x).mean(axis=-1, keepdims=True) + eps)\n",
          "    import minitensor as mt\n    leaf = mt.tensor(x, requires_grad=True, dtype='float64')\n"
          "    y = leaf / ((leaf * leaf).mean(axis=-1, keepdims=True) + eps).sqrt()\n"
          "    y = y * mt.tensor(gamma, dtype='float64')\n"
          "    (y * dy).sum().backward()\n    return leaf.grad\n",
          "08", "derive RMSNorm's dx by hand", ("--check-solutions",)),
    Plant("an exercise answer that unbroadcasts by running autograd through Expand",
          "chapters/solutions/01_arrays_and_broadcasting.py", "unbroadcast",
          "    lead = grad.ndim - len(shape)\n",
          "    import minitensor as mt\n    leaf = mt.tensor(np.zeros(shape), requires_grad=True, dtype='float64')\n"
          "    (leaf.expand(grad.shape) * grad).sum().backward()\n    return leaf.grad\n",
          "01", "the answer ran autograd (Tensor.backward)", ("--check-solutions",)),
    Plant("an exercise answer that measures d(a^k)/da by a central difference",
          "chapters/solutions/02_reverse_mode_autograd.py", "value_pow._backward",
          "a.grad += k * a.data ** (k - 1) * out.grad",
          "a.grad += ((a.data + 1e-6) ** k - (a.data - 1e-6) ** k) / 2e-6 * out.grad",
          "02", "(k·a^(k−1), exactly)", ("--check-solutions",)),
    Plant("an exercise answer that bisects the library's Noam schedule for the warm-up",
          "chapters/solutions/04_modules_adam_and_noam.py", "warmup_for_peak",
          "    return round(1.0 / (d_model * peak_lr ** 2))",
          "    from minitensor import optim\n    low, high = 1, 10**8\n    while low < high:\n"
          "        mid = (low + high) // 2\n"
          "        low, high = (mid + 1, high) if optim.NoamSchedule(d_model, mid)(mid) > peak_lr else (low, mid)\n"
          "    return low",
          "04", "the answer ran the library's schedule", ("--check-solutions",)),
    Plant("an exercise answer that reads PE(0)·PE(k) off the library's table",
          "chapters/solutions/07_feed_forward_embeddings_positions.py", "pe_dot",
          "    return float(np.cos(k * omega).sum())",
          "    from transformer.positional import sinusoid_table\n"
          "    table = sinusoid_table(abs(k) + 1, d_model).astype(np.float64)\n    return float(table[0] @ table[-1])",
          "07", "the answer read the library's table", ("--check-solutions",)),
    Plant("an exercise answer that counts dilated layers by the chapter's simulation",
          "chapters/solutions/11_why_self_attention.py", "dilated_path_length",
          "    layers, reach = 0, 1\n",
          "    import __main__\n    return __main__._dilated_layers(n, k)\n",
          "11", "the answer ran this chapter's simulation", ("--check-solutions",)),
    Plant("an exercise answer that takes BLEU's clipped counts from sacreBLEU",
          "chapters/solutions/13_bleu_and_checkpoint_averaging.py", "bleu_stats",
          "    matches, totals = [], []\n",
          "    from sacrebleu.metrics import BLEU\n"
          "    score = BLEU(tokenize='none', max_ngram_order=max_n).corpus_score([' '.join(hyp_tokens)],\n"
          "                                                                     [[' '.join(ref_tokens)]])\n"
          "    return score.counts, score.totals\n",
          "13", "count the clipped n-grams yourself", ("--check-solutions",)),
    Plant("an exercise answer that finds an accumulator's owner by searching the lanes",
          "chapters/solutions/17_a_gpu_kernel_step_by_step.py", "c_owner",
          "    return 4 * (row & 7) + (col >> 1), (col & 1) + 2 * (row >> 3)",
          "    import __main__\n"
          "    return next((lane, i) for lane in range(32) for i in range(4) if __main__.c_position(lane, i) == (row, col))",
          "17", "searched c_position's lanes", ("--check-solutions",)),
    Plant("an exercise answer that merges Welford states through sums of squares",
          "chapters/solutions/18_fused_row_kernels.py", "welford_merge",
          "    return n, mean_a + delta * n_b / n, m2_a + m2_b + delta * delta * n_a * n_b / n",
          "    mean = (n_a * mean_a + n_b * mean_b) / n\n"
          "    return n, mean, (m2_a + n_a * mean_a ** 2) + (m2_b + n_b * mean_b ** 2) - n * mean ** 2",
          "18", "M2", ("--check-solutions",)),
    Plant("an exercise answer that decides well-formedness by running delinearise",
          "chapters/solutions/22_parsing_as_translation.py", "well_formed",
          "    stack, words = [], 0\n",
          "    from train.parsing import trees\n"
          "    return not trees.delinearise(tokens, [t for t in tokens if t[0] not in '()'])[1]\n",
          "22", "the answer ran delinearise", ("--check-solutions",)),
    Plant("an exercise answer that counts parameters by building the model",
          "chapters/solutions/23_table_3_ablations.py", "count_parameters",
          "    D, qk, v = c.d_model, c.h * c.d_k, c.h * c.d_v\n",
          "    from transformer import Transformer\n    import numpy as np\n"
          "    return Transformer(c, np.random.default_rng(0)).num_parameters()\n",
          "23", "count the parameters by hand", ("--check-solutions",)),
]


def run_planted(plant: Plant) -> subprocess.CompletedProcess:
    """The plant's chapter, run with --fast (and the plant's flags) with the bug planted, in a subprocess."""
    chapter = next((ROOT / "chapters").glob(f"{plant.chapter}_*.py"))
    spec = {"file": plant.file, "function": plant.function, "original": plant.original, "buggy": plant.buggy}
    env = dict(chapter_env(), PLANTED_BUG=json.dumps(spec))
    return subprocess.run([sys.executable, str(PLANTING), str(chapter), "--fast", *plant.flags], cwd=ROOT,
                          env=env, capture_output=True, text=True, timeout=TIMEOUT_S)


@pytest.mark.parametrize("plant", PLANTED, ids=[plant.name for plant in PLANTED])
def test_planted_bug_fails_its_chapter(plant):
    result = run_planted(plant)
    output = result.stdout + result.stderr
    assert "the plant no longer fits the code" not in output, output[-2000:]
    assert result.returncode != 0, f"{plant.name}: chapter {plant.chapter} passed with the bug planted"
    assert f"chapter {plant.chapter} OK" not in result.stdout
    assert plant.message in output, \
        f"{plant.name}: chapter {plant.chapter} failed, but not with its check for this bug:\n{output[-3000:]}"


@pytest.mark.parametrize("plant", PLANTED, ids=[plant.name for plant in PLANTED])
def test_the_function_to_plant_in_holds_the_text(plant):
    """Fast and separate: a refactoring that renames the function or rewrites the planted line shows here."""
    source = (ROOT / plant.file).read_text(encoding="utf-8")
    assert plant_text(source, plant.function, plant.original, plant.buggy) != source


def test_the_planter_edits_only_the_named_function():
    source = "def f():\n    return 1\n\n\nclass C:\n    def f(self):\n        return 1\n"
    planted = plant_text(source, "C.f", "return 1", "return 2")
    assert planted == source.replace("        return 1", "        return 2"), planted


def test_the_suite_covers_every_bug_class():
    """At least 70 variants: the training path (fused, Numba, numba.cuda), the data path, the optimizer, the
    scaler, the search and the checkpoints among them."""
    assert len(PLANTED) >= 70, len(PLANTED)
    files = {plant.file for plant in PLANTED}
    for required in ("transformer/fused.py", "minitensor/optim.py", "train/run/loss_scaler.py", "train/run/step.py",
                     "minitensor/kernels/adam_step/numba_cpu.py", "minitensor/kernels/dropout_forward/numba_cpu.py",
                     "minitensor/kernels/cross_entropy_forward/numba_cpu.py", "train/data/inputs.py",
                     "train/run/validation.py", "transformer/search.py", "transformer/checkpoint.py"):
        assert required in files, f"no planted bug in {required}"
    assert len({plant.name for plant in PLANTED}) == len(PLANTED), "variant names are test ids: keep them unique"
