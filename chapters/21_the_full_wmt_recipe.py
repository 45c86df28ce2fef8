# ---
# jupyter:
#   jupytext:
#     formats: py:percent
#     text_representation:
#       extension: .py
#       format_name: percent
# ---

# %% [markdown]
# # 21 · The full WMT recipe: prepared data, the configs against §5, the cost, two BLEU scores
#
# > We trained on the standard WMT 2014 English-German dataset consisting of
# > about 4.5 million sentence pairs. Sentences were encoded using byte-pair
# > encoding, which has a shared source-target vocabulary of about 37000 tokens. (§5.1)
#
# > We trained our models on one machine with 8 NVIDIA P100 GPUs. ... We trained
# > the base models for a total of 100,000 steps or 12 hours. ... The big models
# > were trained for 300,000 steps (3.5 days). (§5.2)
#
# Every chapter so far trained a toy on one CPU. This one walks through the run
# the paper made, as docs/wmt.md runs it:
# prepare the corpus once, train the base or big config, average the last
# checkpoints, score newstest2014. We cannot train it here (hours on 8 GPUs), so
# each step is shown at a size that runs in seconds and then scaled up with
# numbers measured elsewhere, always labelled as measured or projected.
#
# From the library we use: `train.data.store.prepare_data` (what
# `python -m train prepare` runs: content hashes, the shared BPE tokenizer, the
# ids as memory-mapped arrays; `prepared_key` is the folder's name), the run
# config loader `train.config` (chapter 16 met `RunConfig`), `train.experiments.scale` and
# `scale_report` (the data-parallel projection of `python -m train scale`) with `train.run.metrics.train_flops`,
# and `train.evaluate.scores.split_compounds`, the compound splitting of the
# paper-comparable BLEU (chapter 13 met `corpus_scores` and `paper_tokenize`).
# `train.data.files.shared_data_dir` finds `../shared/data` (newstest2014), when it is there.
#
# The library code this chapter builds:
# [`train/data/store.py`](../train/data/store.py),
# [`train/experiments/scale.py`](../train/experiments/scale.py).

# %%
import contextlib
import hashlib
import io
import json
import os
import re
import shutil
import sys

import matplotlib.pyplot as plt
import numpy as np
from sacrebleu.tokenizers.tokenizer_13a import Tokenizer13a

from _common import CHAPTERS, FAST, OUT, calls_to, fails, finish, one_cpu_thread, show
from train import config as config_lib
from train.data.builtin_task import make_number_task
from train.data.files import shared_data_dir
from train.data.store import PREPARED_FORMAT, TOKENIZER_SAMPLE_SEED, prepare_data, prepared_key
from train.evaluate.scores import corpus_scores, paper_tokenize, split_compounds
from train.experiments import scale, scale_report
from train.run.metrics import train_flops
from transformer import TransformerConfig

THREADS = one_cpu_thread()
ROOT = CHAPTERS.parent

# %% [markdown]
# ## 1. Prepare once: 4.5M pairs as memory-mapped ids
#
# Tokenizing 4.5M pairs takes minutes, and every run (every rank of an 8-GPU
# job, every Table 3 variant) needs the same ids. So `prepare_data` does it
# once and stores the result in a folder named by **what it was made from**:
# the sha256 of both training files' bytes and the tokenizer settings. The same
# corpus maps to the same folder on any machine; one edited byte maps to
# another; touching a file (a new mtime) is hashed again and reused.
#
# The ids go to disk as `.npy` arrays, every sentence back to back, with an
# offsets array saying where each one starts: **uint16**, 2 bytes a token,
# since a 37,000-piece vocabulary fits under 65,536. Training opens them with
# `np.load(..., mmap_mode="r")`: nothing is read until a batch touches it, the
# kernel keeps the pages in its page cache, and all 8 ranks on a node share one
# copy. We prepare a small corpus (the built-in task written to files, as you
# would write `train.en` / `train.de`) and look at all of it.

# %%
corpus_dir, data_dir = OUT / "21_corpus", OUT / "21_prepared"
shutil.rmtree(data_dir, ignore_errors=True)                      # a fresh start on every run
corpus_dir.mkdir(parents=True, exist_ok=True)
n_pairs = 2000 if FAST else 20000
task = make_number_task(seed=0, n_train=n_pairs, n_valid=50, n_test=10)
paths = {}
for split in ("train", "valid"):
    for side, lang in enumerate(("en", "de")):
        paths[split, lang] = corpus_dir / f"{split}.{lang}"
        paths[split, lang].write_text("".join(pair[side] + "\n" for pair in task[split]), encoding="utf-8")
run_config = config_lib.from_dict({
    "name": "wmt_in_miniature", "tokenizer": {"vocab_size": 400},
    "task": {"kind": "files", "train_src": str(paths["train", "en"]), "train_tgt": str(paths["train", "de"]),
             "valid_src": str(paths["valid", "en"]), "valid_tgt": str(paths["valid", "de"])}})
prepared = prepare_data(run_config, data_dir)
os.utime(paths["train", "de"])                                   # touched, not changed
again = prepare_data(run_config, data_dir)


def sha256_of(path):
    return hashlib.sha256(path.read_bytes()).hexdigest()


def key_by_hand(src_sha, tgt_sha, tok):
    what = {"format": PREPARED_FORMAT, "train_src": src_sha, "train_tgt": tgt_sha, "vocab_size": tok.vocab_size,
            "model_type": tok.model_type, "sample_size": tok.sample_size, "sample_seed": TOKENIZER_SAMPLE_SEED}
    return hashlib.sha256(json.dumps(what, sort_keys=True).encode()).hexdigest()


src_sha, tgt_sha = sha256_of(paths["train", "en"]), sha256_of(paths["train", "de"])
edited = bytearray(paths["train", "de"].read_bytes())
edited[5] ^= 1                                                   # one bit of one byte
edited_key = key_by_hand(src_sha, hashlib.sha256(bytes(edited)).hexdigest(), run_config.tokenizer)
print(f"prepared {prepared.folder.name}/: {sorted(p.name for p in prepared.folder.iterdir())}")
print(f"the second call (after touching train.de) reused it: {again.reused}; "
      f"with one bit of train.de changed the folder would be {edited_key[:16]}/")

# %% CHECK
assert prepared.key == key_by_hand(src_sha, tgt_sha, run_config.tokenizer), "the key is a hash of the content"
assert prepared.folder.name == prepared.key[:16], "the folder is named by the key"
assert again.reused and again.folder == prepared.folder, "a touched file is hashed again and reused"
assert prepared_key(prepared.files, run_config) == prepared.key, \
    "prepared_key recomputes the folder's key from the files and the config"
assert edited_key[:16] != prepared.folder.name, "an edited byte maps to another folder"

# %% [markdown]
# ### The ids on disk
#
# `src_ids.npy` holds every source sentence's ids back to back, `src_offsets.npy`
# (int64, n + 1 entries) where each begins: sentence i is
# `ids[offsets[i]:offsets[i + 1]]`, without BOS/EOS (whoever builds the model
# input adds them). We open them the way training does and check one sentence
# against the tokenizer.

# %%
arrays = {name: np.load(prepared.folder / f"{name}.npy", mmap_mode="r")
          for name in ("src_ids", "src_offsets", "tgt_ids", "tgt_offsets")}
i = 7
sentence_ids = arrays["src_ids"][arrays["src_offsets"][i]:arrays["src_offsets"][i + 1]]
n_tokens = len(arrays["src_ids"]) + len(arrays["tgt_ids"])
disk_bytes = sum(a.nbytes for a in arrays.values())
as_lists = prepared.tokenizer.encode_batch([en for en, _ in task["train"]] + [de for _, de in task["train"]])
# Python lists: a list per sentence plus a pointer and an int object per token (with a 37,000-piece
# vocabulary almost every id is above 256, so none of them is one of CPython's shared small ints).
list_bytes = sum(sys.getsizeof(ids) + sum(map(sys.getsizeof, ids)) for ids in as_lists)
print(f"{task['train'][i][0]!r} -> {sentence_ids.tolist()} "
      f"({arrays['src_ids'].dtype}, {type(arrays['src_ids']).__name__})")
print(f"{len(prepared.corpus):,} pairs, {n_tokens:,} tokens: {disk_bytes / n_pairs:.0f} bytes a pair on disk "
      f"({disk_bytes / n_tokens:.2f} a token), as Python lists {list_bytes / n_tokens:.0f} bytes a token")

# %% CHECK
assert isinstance(arrays["src_ids"], np.memmap) and arrays["src_ids"].dtype == np.uint16, "uint16, memory-mapped"
assert sentence_ids.tolist() == prepared.tokenizer.encode(task["train"][i][0]), "pair i is ids[offsets[i]:offsets[i+1]]"
assert len(arrays["src_offsets"]) == len(arrays["tgt_offsets"]) == n_pairs + 1 == len(prepared.corpus) + 1, \
    "one offset per sentence plus one, on both sides"
assert disk_bytes == 2 * n_tokens + 8 * 2 * (n_pairs + 1), "2 bytes a token plus 8 bytes a sentence per side"
assert list_bytes > 15 * 2 * n_tokens, "Python lists cost over 15x the uint16 arrays"

# %% [markdown]
# ### What the mapping costs in memory
#
# A memory map costs nothing until it is read: the pages come in from the page
# cache (or the disk) as a batch touches them, count as this process's
# resident memory (RSS) while mapped, and the kernel may drop them again, since
# they are a copy of the file. To see it in RSS we need more than a few pages,
# so we write our ids many times over into one 16 MB file and watch RSS while
# opening it, reading one sentence (its page and whatever the kernel reads
# ahead around it), and reading all of it.

# %%
def rss_bytes():
    """Resident memory of this process now (Linux /proc), or None elsewhere."""
    try:
        with open("/proc/self/statm") as f:
            return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
    except OSError:
        return None


big_path = OUT / "21_ids_tiled.npy"
np.save(big_path, np.tile(np.asarray(arrays["src_ids"]), 8_000_000 // len(arrays["src_ids"]) + 1)[:8_000_000])
rss = {"before": rss_bytes()}
tiled = np.load(big_path, mmap_mode="r")
rss["opened"] = rss_bytes()
one = int(tiled[4_000_000:4_000_020].sum())                       # one sentence's worth, in the middle
rss["one sentence read"] = rss_bytes()
total = int(tiled.sum(dtype=np.int64))                            # every page
rss["all read"] = rss_bytes()
if rss["before"] is not None:
    print(", ".join(f"{k}: +{(v - rss['before']) / 2**20:.2f} MiB" for k, v in rss.items()),
          f"for a {tiled.nbytes / 2**20:.0f} MiB file")
else:
    print("no /proc/self/statm here (not Linux): skipping the RSS measurement")

# %% CHECK
if rss["before"] is not None:
    assert rss["opened"] - rss["before"] < 2**20, "opening a memory map reads nothing"
    assert rss["one sentence read"] - rss["before"] < tiled.nbytes / 4, "one sentence brings in its pages, not the file"
    assert rss["all read"] - rss["before"] > tiled.nbytes / 2, "reading everything brings the pages in"

# %% [markdown]
# ### Scaled up to WMT14: 4.5M pairs
#
# `benchmarks/bench_prepare.py` prepared a synthetic corpus with WMT14-like
# lengths (1M pairs, 57M tokens, vocabulary 37,000) on this project's 2-core
# machine; docs/results.md lists what it measured. WMT14 En-De has 4.5 times as many
# pairs: the ids and the encoding time scale with it, the tokenizer does not
# (it trains on a fixed 2M-line sample). The memory a training process needs
# for the ids, each way of holding them:

# %%
BENCH_1M = {"pairs": 1_000_000, "tokens": 57e6, "tokenizer_s": 92, "encode_s": 163,      # docs/results.md, measured
            "disk_gib": 0.12}
WMT_PAIRS = 4_500_000                                                                                  # §5.1
wmt_tokens = BENCH_1M["tokens"] * WMT_PAIRS / BENCH_1M["pairs"]
offsets_bytes = 2 * (WMT_PAIRS + 1) * 8
memory_gib = {"uint16 memory map\n(one copy, shared by 8 ranks)": (2 * wmt_tokens + offsets_bytes) / 2**30,
              "int32 arrays\n(the format before uint16)": (4 * wmt_tokens + offsets_bytes) / 2**30,
              "Python lists\n(1 rank)": list_bytes / n_tokens * wmt_tokens / 2**30,
              "Python lists\n(8 ranks, 8 copies)": 8 * list_bytes / n_tokens * wmt_tokens / 2**30}
encode_minutes = BENCH_1M["encode_s"] * WMT_PAIRS / BENCH_1M["pairs"] / 60
print(f"WMT14: ~{wmt_tokens / 1e6:.0f}M tokens; encoding ~{encode_minutes:.0f} min on 2 busy cores (extrapolated); "
      + "; ".join(f"{k.splitlines()[0]} {v:.2f} GiB" for k, v in memory_gib.items()))
fig, ax = plt.subplots(figsize=(7, 3))
ax.barh(list(memory_gib), list(memory_gib.values()), color=["tab:green", "tab:blue", "tab:orange", "tab:red"])
ax.set_xscale("log")
ax.set_xlabel("GiB for the token ids of 4.5M pairs (extrapolated)")
ax.invert_yaxis()
show(fig, "21_ids_memory")

# %% CHECK
assert abs(2 * BENCH_1M["tokens"] + 2 * (BENCH_1M["pairs"] + 1) * 8 - BENCH_1M["disk_gib"] * 2**30) < 0.01 * 2**30, \
    "the measured 1M-pair folder is 2 bytes a token plus the offsets"
assert 0.5 < list(memory_gib.values())[0] < 0.65, "docs/wmt.md: ~0.6 GiB for WMT14 as uint16"
assert 1.0 < list(memory_gib.values())[1] < 1.15, "docs/wmt.md: 1.1 GiB as int32"
assert 11 < encode_minutes < 13, "docs/wmt.md: ~12 min of encoding on 2 busy cores"

# %% [markdown]
# ## 2. The base and big configs, line by line against the paper
#
# `configs/wmt14_en_de_base.toml` and `_big.toml` are what you train. Every
# value the paper fixes is typed below with where it says so, and compared with
# what `train.config.load` reads from the files (defaults included: a value a
# file leaves out is the library's default, which must be the paper's too).
#
# > We used the Adam optimizer with β₁ = 0.9, β₂ = 0.98 and ε = 10⁻⁹. ...
# > We used warmup_steps = 4000. (§5.3)
#
# > For the base models, we used a single model obtained by averaging the last 5
# > checkpoints, which were written at 10-minute intervals. For the big models,
# > we averaged the last 20 checkpoints. We used beam search with a beam size of
# > 4 and length penalty α = 0.6. ... We set the maximum output length during
# > inference to input length + 50, but terminate early when possible. (§6.1)

# %%
PAPER = [  # (what, where the paper says it, base, big, how our config holds it)
    ("N (layers per stack)", "§3.1, Table 3", 6, 6, lambda c: c.model.N),
    ("d_model", "§3.1, Table 3", 512, 1024, lambda c: c.model.d_model),
    ("d_ff", "§3.3, Table 3", 2048, 4096, lambda c: c.model.d_ff),
    ("h (heads)", "§3.2.2, Table 3", 8, 16, lambda c: c.model.h),
    ("d_k = d_v", "§3.2.2, Table 3", 64, 64, lambda c: c.model.d_k if c.model.d_k == c.model.d_v else None),
    ("P_drop", "§5.4, Table 3", 0.1, 0.3, lambda c: c.model.p_drop),
    ("ε_ls", "§5.4, Table 3", 0.1, 0.1, lambda c: c.model.eps_ls),
    ("tied embeddings", "§3.4", True, True, lambda c: c.model.tie_embeddings),
    ("post-norm", "§3.1", "post", "post", lambda c: c.model.norm),
    ("sinusoidal positions", "§3.5", "sinusoidal", "sinusoidal", lambda c: c.model.positional),
    ("shared BPE vocabulary", "§5.1", 37000, 37000,
     lambda c: c.tokenizer.vocab_size if c.tokenizer.model_type == "bpe" else None),
    ("target tokens per step", "§5.1", 25000, 25000, lambda c: c.train.tokens_per_update),
    ("train steps", "§5.2, Table 3", 100_000, 300_000, lambda c: c.train.max_steps),
    ("Adam β₁", "§5.3", 0.9, 0.9, lambda c: c.train.adam_beta1),
    ("Adam β₂", "§5.3", 0.98, 0.98, lambda c: c.train.adam_beta2),
    ("Adam ε", "§5.3", 1e-9, 1e-9, lambda c: c.train.adam_eps),
    ("warmup_steps", "§5.3 Eq. (3)", 4000, 4000, lambda c: c.train.warmup_steps),
    ("lrate factor", "§5.3 Eq. (3)", 1.0, 1.0, lambda c: c.train.lr_factor),
    ("checkpoint interval (min)", "§6.1", 10, 10, lambda c: c.train.ckpt_minutes),
    ("checkpoints averaged", "§6.1", 5, 20, lambda c: c.train.average_last),
    ("beam size", "§6.1", 4, 4, lambda c: c.decode.beam),
    ("length penalty α", "§6.1", 0.6, 0.6, lambda c: c.decode.alpha),
    ("max output = input + ...", "§6.1", 50, 50, lambda c: c.decode.max_len_b),
    ("dev set", "§6.2", "newstest2013", "newstest2013", lambda c: os.path.basename(c.task.valid_src).split(".")[0]),
    ("test set", "§6.1, Table 2", "newstest2014", "newstest2014",
     lambda c: os.path.basename(c.task.test_src).split(".")[0]),
]
COLUMN = {"base": 2, "big": 3}


def differences(config, which):
    """The PAPER lines where `config` does not hold the paper's value for `which` (base or big)."""
    return [line[0] for line in PAPER if line[4](config) != line[COLUMN[which]]]


configs = {which: config_lib.load(ROOT / "configs" / f"wmt14_en_de_{which}.toml") for which in ("base", "big")}
print(f"{'':28}{'paper base':>14}{'ours':>14}{'paper big':>14}{'ours':>14}   where")
for what, where, base_value, big_value, ours in PAPER:
    print(f"{what:28}{base_value!s:>14}{ours(configs['base'])!s:>14}{big_value!s:>14}{ours(configs['big'])!s:>14}"
          f"   {where}")

# %% CHECK
assert differences(configs["base"], "base") == [], differences(configs["base"], "base")
assert differences(configs["big"], "big") == [], differences(configs["big"], "big")
slipped = config_lib.apply_overrides(configs["base"], ["train.warmup_steps=8000", "model.h=4"])
assert differences(slipped, "base") == ["h (heads)", "d_k = d_v", "warmup_steps"], "the comparison catches a slip"
assert configs["base"].model.d_k * configs["base"].model.h == configs["base"].model.d_model, "§3.2.2: d_k = d_model/h"

# %% [markdown]
# What the paper leaves open is ours to choose, and the configs say so in
# comments: `max_len = 256` drops training pairs with a side longer than 256
# subword tokens; `precision = "fp32"` as on the P100s (fp16 with loss scaling
# or bf16 are a `--set train.precision=...` away); `tokens_per_update = 25000`
# is §5.1's batch on any number of GPUs, and `max_tokens = 6250` what one GPU
# holds: one GPU runs 4 micro-batches of 6,250 tokens, 8 GPUs one of 3,125 each.
#
# ## 3. What it costs: a projection for 8 × H100
#
# docs/results.md has one training step of the base model on one H100: 250
# sentences × 100 target tokens (25,000 tokens, the paper's whole update) in
# 328 ms in fp32 and 176 ms in mixed precision. On 8 GPUs the paper's update is
# spread over them: `tokens_per_update = 25000` gives each GPU 3,125 tokens (the
# same config on 1 GPU runs 4 micro-batches of 6,250). `train.experiments.scale`
# projects 8 GPUs from the measured step: one GPU's step on 3,125 tokens is the
# 25,000-token step scaled by FLOPs (a lower bound: a small batch uses a GPU less
# well), the update waits for the slowest of the 8 (the batches differ in work),
# and a **ring all-reduce** sums the fp32 gradients, 2(n − 1)/n × the gradient
# bytes over the link (NVLink 4: ~450 GB/s bus bandwidth), none of it counted as
# hidden behind backward unless measured on the node. The big model's step is the
# base step scaled by the ratio of their FLOPs. These are **projections**: a
# measured step and a model of the rest, checked against NVIDIA's published
# 1 → 8 A100 run (`python -m train scale` prints the check); no validation or
# checkpoint time.

# %%
H100_STEP_MS = {"fp32": 328.0, "fp16": 176.0}     # docs/results.md, GPU (H100 history): the base step on one H100, 250 x 100 x 100
B, S, T = 250, 100, 100
paper_base, paper_big = TransformerConfig.base(), TransformerConfig.big()
grad_bytes = scale.parameter_count(paper_base) * 4                               # fp32 gradients
buckets = int(np.ceil(grad_bytes / 25e6))
allreduce_s = buckets * 25e-6 + 2 * (8 - 1) / 8 * grad_bytes / 450e9             # ring, NVLink 4 preset
big_over_base = train_flops(paper_big, B * S, B * T, S, T) / train_flops(paper_base, B * S, B * T, S, T)
share = 25_000 / 8                                                                # §5.1's update over 8 GPUs
projections, efficiency = {}, {}
for precision, step_ms in H100_STEP_MS.items():
    with contextlib.redirect_stdout(io.StringIO()) if precision == "fp32" else contextlib.nullcontext():
        report = scale_report.run("base", "cpu", step_ms, None, ["nvlink4"], 25.0, 1, 3, as_json=False)  # prints it
    if precision == "fp16":
        eight_gpus = report["links"]["nvlink4"]["rows"][-1]                   # the n = 8 row, 25,000 tokens a GPU
    projections[precision] = {name: r["hours"]["nvlink4"] for name, r in report["paper_runs"].items()}
    efficiency[precision] = {name: r["efficiency"]["nvlink4"] for name, r in report["paper_runs"].items()}
step_share_s = H100_STEP_MS["fp16"] / 1e3 * train_flops(paper_base, share / T * S, share, S, T) / train_flops(
    paper_base, B * S, B * T, S, T)
base_hours_no_straggler = 100_000 * (step_share_s + allreduce_s) / 3600          # every GPU as fast as the mean
print(f"all-reduce of {grad_bytes / 1e6:.0f} MB over 8 GPUs: {allreduce_s * 1e3:.2f} ms; base step on 3,125 tokens "
      f">= {step_share_s * 1e3:.1f} ms; big step = {big_over_base:.2f} x base step")
for precision, runs in projections.items():
    for name, hours in runs.items():
        print(f"8 x H100 {precision}, {name:4s}: {hours:6.1f} h for {100_000 if name == 'base' else 300_000:,} "
              f"updates of 25,000 tokens at {100 * efficiency[precision][name]:.0f}% efficiency (projected)")
print(f"the paper, 8 x P100: base 12 h, big 84 h (§5.2); Table 2's cost 3.3e18 FLOPs = "
      f"12 h x 8 GPUs x 9.5 TFLOPS = {12 * 3600 * 8 * 9.5e12:.2e}")
fig, ax = plt.subplots(figsize=(6, 3))
labels = ["8 x P100 (paper, §5.2)", "8 x H100 fp32 (projected)", "8 x H100 mixed (projected)"]
for k, name in enumerate(("base", "big")):
    hours = [12.0 if name == "base" else 84.0] + [projections[p][name] for p in ("fp32", "fp16")]
    ax.bar(np.arange(3) + 0.4 * k, hours, width=0.4, label=name)
ax.set_xticks(np.arange(3) + 0.2, labels, fontsize=8)
ax.set_yscale("log")
ax.set_ylabel("hours for the paper's run")
ax.legend()
show(fig, "21_cost_projection")

# %% CHECK
assert abs(eight_gpus["allreduce_ms"] / (allreduce_s * 1e3) - 1) < 1e-9, "ring all-reduce: 2(n-1)/n x bytes / bandwidth"
assert abs(step_share_s * 8 / (H100_STEP_MS["fp16"] / 1e3) - 1) < 1e-9, "an eighth of the tokens, an eighth of the FLOPs"
hours = projections["fp16"]["base"]
assert base_hours_no_straggler <= hours < 1.1 * base_hours_no_straggler, "the slowest GPU costs a few % at most"
assert abs(projections["fp16"]["big"] / hours / (3 * big_over_base) - 1) < 0.05, "big: 3x the updates, each bigger"
assert efficiency["fp16"]["base"] < efficiency["fp32"]["base"] < 1.0, "a faster step leaves the all-reduce a larger share"
assert abs(12 * 3600 * 8 * 9.5e12 / 3.3e18 - 1) < 0.01, "Table 2's base cost is its GPU time x 9.5 TFLOPS"

# %% [markdown]
# At 10-minute checkpoints (§6.1) a base run of under an hour writes a handful of
# checkpoints and the average of the last 5 covers most of the run (set
# `train.ckpt_every` in updates instead); the paper's 12-hour run wrote 72
# and averaged the last 5 in the same way (chapter 13 showed why averaging
# helps). `python -m train average runs/wmt14_en_de_base` writes
# `averaged_last5.safetensors`, and `python -m train evaluate` decodes
# newstest2014 with beam 4, α 0.6 and scores it twice.
#
# ## 4. Two BLEU scores on newstest2014, and why they differ
#
# sacreBLEU scores **detokenized** text with its own fixed tokenizer (13a) and
# prints a signature: the number anyone can reproduce, and the one to compare
# with today's papers. Table 2's numbers come from tensor2tensor's
# `get_ende_bleu.sh` instead: Moses-tokenize both sides, then **split
# compounds**, `Kluser-Ampel` → `Kluser ##AT##-##AT## Ampel`, then plain BLEU
# over the tokens. 13a leaves a hyphen between letters alone, so under it
# `Kluser-Ampel` is one token that a translation either gets exactly or not at
# all; split, it is three tokens, and a translation that writes `Kluser Ampel`
# still earns two unigram matches. German is full of compounds, so the split
# score is higher: about 1.5 BLEU on the same output (tensorflow/tensor2tensor issue 317:
# 27.52 sacreBLEU vs 29.02 split). We have no WMT model here, so the
# "system" below writes every hyphenated compound of the reference as two words.

# %%
FALLBACK = ["Die Kluser-Ampel sichere sowohl Radfahrer als auch Busfahrgäste und die Bergle-Bewohner.",
            "Bekannt ist der Büchner-Preisträger vor allem als Prosaautor, Theatertexte sind in seinem Werk rar."]
shared = shared_data_dir()
newstest = None if shared is None else shared / "wmt_newstest" / "newstest2014.de"
if newstest is not None and newstest.is_file():
    lines = newstest.read_text(encoding="utf-8").splitlines()
    refs = [line for line in lines if re.search(r"[^\W\d_]-[^\W\d_]", line)][:40 if FAST else 300]
    print(f"newstest2014.de: {len(lines):,} sentences, the first {len(refs)} with a hyphenated compound")
else:
    refs = FALLBACK
    print("../shared/data/wmt_newstest is not here: two sentences typed from newstest2014 instead")
hyps = [re.sub(r"([^\W\d_])-([^\W\d_])", r"\1 \2", ref) for ref in refs]      # compounds written apart


def unigram_matches(hyp_tokens, ref_tokens):
    ref_count = {t: ref_tokens.count(t) for t in set(ref_tokens)}
    return sum(min(hyp_tokens.count(t), ref_count.get(t, 0)) for t in set(hyp_tokens))


tok13a = Tokenizer13a()
ref13, hyp13 = tok13a(refs[0]).split(), tok13a(hyps[0]).split()
refsplit, hypsplit = paper_tokenize(refs[0]).split(), paper_tokenize(hyps[0]).split()
print("13a:  ", " ".join(ref13), f"\n      {unigram_matches(hyp13, ref13)} of {len(hyp13)} hypothesis tokens match")
print("split:", " ".join(refsplit), f"\n      {unigram_matches(hypsplit, refsplit)} of {len(hypsplit)} match")
scores, perfect = corpus_scores(hyps, refs), corpus_scores(refs, refs)
print(f"compounds apart: sacreBLEU {scores.bleu:.2f}, paper-comparable {scores.paper_bleu:.2f} "
      f"(+{scores.paper_bleu - scores.bleu:.2f}); the references themselves: "
      f"{perfect.bleu:.1f} / {perfect.paper_bleu:.1f}")
print(scores.bleu_signature)

# %% CHECK
assert len(refsplit) > len(ref13), "compound splitting adds tokens"
assert unigram_matches(hypsplit, refsplit) - unigram_matches(hyp13, ref13) >= 2, "split compounds earn matches back"
assert scores.paper_bleu > scores.bleu + 1.0, "the compound-split score forgives compounds written apart"
assert abs(perfect.bleu - 100) < 1e-9 and abs(perfect.paper_bleu - 100) < 1e-9, "on a perfect output both are 100"
assert scores.bleu_signature.startswith("nrefs:1|case:mixed|eff:no|tok:13a"), "report the signature"

# %% [markdown]
# ## Summary
# - `prepare` hashes the corpus, trains the shared BPE once and stores uint16 ids in a folder named by the content; training memory-maps them (~0.6 GiB for WMT14, one copy for all ranks).
# - `configs/wmt14_en_de_{base,big}.toml` hold every value §5, §6.1 and Table 3 fix; on 8 H100s the base run (the paper's 25,000-token updates, 3,125 tokens a GPU) is projected at under an hour, a lower bound, against 12 h on 8 P100s. Before you rent GPUs, `configs/multi30k_cpu.toml` trains a real En→De translator on two CPU cores in 25 minutes, and `python -m train tune-decoding` picks beam and α on val as §6.1 did: sacreBLEU 38.5 on test_2016_flickr ([docs/multi30k_cpu.md](../docs/multi30k_cpu.md)).
# - Report sacreBLEU (detokenized, 13a, with signature); the paper-comparable score splits compounds and runs ~1.5 BLEU higher.
#
# ## Exercises
# 1. **Predict, then run.** You prepare WMT14 with a 70,000-piece vocabulary instead of 37,000. How much disk
#    do the ids take, and why? (Answer key: `PREDICT` in `chapters/solutions/21_the_full_wmt_recipe.py`.)
# 2. A prepared folder is copied to every node of a cluster, and a copy can go wrong: a file cut short, a
#    folder prepared with another tokenizer, an offsets array from another run. Training memory-maps the ids
#    and would read garbage. Write `validate_prepared(folder, vocab_size)`: return quietly for a sound folder,
#    raise `ValueError` saying what is wrong otherwise, reading the four arrays memory-mapped as section 1 does.
#    `check_validate_prepared(fn)` damages copies of this chapter's folder in four ways and expects each caught.
# 3. Write `split_compounds(line)`, tensor2tensor's `perl -ple 's{(\S)-(\S)}{$1 ##AT##-##AT## $2}g'`, from
#    scratch (the check counts calls of the library's `split_compounds` and `paper_tokenize`: none allowed).
#    `check_split_compounds(fn)` compares it with the library's on tricky lines (and on newstest2014).

# %%
ARRAYS = ("src_ids", "src_offsets", "tgt_ids", "tgt_offsets")


def _damaged_copy(case, check_rng):
    """A copy of the four arrays of this chapter's folder, damaged one way (`case`) in the back half of the
    arrays, at a place drawn with `check_rng`, under chapters/_out."""
    folder = OUT / "21_damaged" / case
    folder.mkdir(parents=True, exist_ok=True)
    arrays_ = {name: np.load(prepared.folder / f"{name}.npy") for name in ARRAYS}
    if case == "ids cut short":
        arrays_["tgt_ids"] = arrays_["tgt_ids"][:-7]                      # the end of a copy that stopped early
    elif case == "offsets out of order":
        at = int(check_rng.integers(len(arrays_["src_offsets"]) // 2, len(arrays_["src_offsets"]) - 2))
        arrays_["src_offsets"][[at, at + 1]] = arrays_["src_offsets"][[at + 1, at]]
    elif case == "sides of different lengths":
        arrays_["tgt_offsets"] = arrays_["tgt_offsets"][:-1]
    elif case == "an id past the vocabulary":
        at = int(check_rng.integers(len(arrays_["src_ids"]) // 2, len(arrays_["src_ids"])))
        arrays_["src_ids"][at] = 400                                      # from a tokenizer with more pieces
    for name, array in arrays_.items():
        np.save(folder / f"{name}.npy", array)
    return folder


def check_validate_prepared(validate_prepared) -> None:
    """Exercise 2: this chapter's folder passes; each of four damaged copies raises ValueError, the damage at a
    place drawn afresh each call (a check of the first entries only misses it)."""
    validate_prepared(prepared.folder, 400)
    check_rng = np.random.default_rng()
    for case in ("ids cut short", "offsets out of order", "sides of different lengths", "an id past the vocabulary"):
        try:
            validate_prepared(_damaged_copy(case, check_rng), 400)
        except ValueError:
            continue
        raise AssertionError(f"a folder with {case} passed validate_prepared")


def check_split_compounds(split) -> None:
    """Exercise 3: the same output as train.evaluate.scores.split_compounds, line for line, written from scratch."""
    tricky = ["Kluser-Ampel", "a-b-c", "x - y", "B 33-Fußgängerampel", "--", "a--b", "E-Mail-Adresse", "-a b-", ""]
    for line in tricky + refs:
        with calls_to(split_compounds, paper_tokenize) as calls:
            got = split(line)
        assert not calls, f"write the substitution yourself; the answer called {dict(calls)}"
        assert got == split_compounds(line), f"{line!r}: {got!r} vs {split_compounds(line)!r}"


# %% CHECK the checks: a wrong answer must fail them
def _lengths_only(folder, vocab_size):                              # misses offsets out of order and foreign ids
    loaded = {name: np.load(folder / f"{name}.npy", mmap_mode="r") for name in ARRAYS}
    for side in ("src", "tgt"):
        if loaded[f"{side}_offsets"][-1] != len(loaded[f"{side}_ids"]):
            raise ValueError(f"{side}: the offsets end past the ids")
    if len(loaded["src_offsets"]) != len(loaded["tgt_offsets"]):
        raise ValueError("the sides hold different numbers of sentences")


def _first_entries_only(folder, vocab_size):                        # the lengths, and order and ids at the start only
    _lengths_only(folder, vocab_size)
    loaded = {name: np.load(folder / f"{name}.npy", mmap_mode="r") for name in ARRAYS}
    for side in ("src", "tgt"):
        if np.any(np.diff(loaded[f"{side}_offsets"][:20]) < 0) or int(loaded[f"{side}_ids"][:50].max()) >= vocab_size:
            raise ValueError(f"{side}: damaged at the start")


assert fails(check_validate_prepared, _lengths_only), "check_validate_prepared accepted a check of the lengths alone"
assert fails(check_validate_prepared, _first_entries_only), "check_validate_prepared accepted a check of the first entries"
assert fails(check_split_compounds, lambda s: s.replace("-", " ##AT##-##AT## ")), "accepted splitting every hyphen"
assert fails(check_split_compounds, split_compounds), "check_split_compounds accepted the library's own function"

# %%
finish("21_the_full_wmt_recipe", {check_validate_prepared: "validate_prepared",
                                  check_split_compounds: "split_compounds"})
