"""PNG plots of a run: training curves from metrics.jsonl, and attention heat-maps (appendix, Figures 3-5).

`plot_run(run_dir)` writes run_dir/plots/{loss,perplexity,lr,bleu,tokens_per_s}.png
(a curve is skipped when the run has no data for it), and norms.png when the run logged
per-layer norms (train.log_norms; train/run/norm_plots.py). `plot_attention` draws
the encoder-decoder attention of one sentence: rows are target tokens, columns
source tokens, one panel per head, like the paper's attention visualisations.

matplotlib runs with the Agg backend (files only, no display needed).

Shapes: H heads, T target length, S source length.
"""

from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402 - the backend must be chosen first
import numpy as np  # noqa: E402

from train.run.figures import save_figure  # noqa: E402
from train.run.metrics import read_metrics  # noqa: E402
from train.run.norm_plots import norms_figure  # noqa: E402

# (file stem, y label, [(kind, field, legend label)], log scale)
CURVES = (
    ("loss", "label-smoothed loss (per token)", [("train", "loss", "train"), ("valid", "loss", "valid")], False),
    ("perplexity", "perplexity (per subword, §6.2)", [("train", "ppl", "train"), ("valid", "ppl", "valid")], True),
    ("lr", "learning rate (§5.3 Eq. (3))", [("train", "lr", "lr")], False),
    ("bleu", "BLEU (sacreBLEU)", [("valid", "bleu", "valid sample")], False),
    ("tokens_per_s", "target tokens / s", [("train", "tgt_tokens_per_s", "train")], False),
)


def plot_run(run_dir: str | Path, out_dir: str | Path | None = None) -> list[Path]:
    """Write the curves of run_dir/metrics.jsonl as PNGs (default: run_dir/plots); returns the files written."""
    run_dir = Path(run_dir)
    records = read_metrics(run_dir / "metrics.jsonl")
    out = Path(out_dir) if out_dir is not None else run_dir / "plots"
    written = []
    for stem, ylabel, series, log_scale in CURVES:
        lines = []
        for kind, key, label in series:
            points = [(r["step"], r[key]) for r in records
                      if r.get("kind") == kind and isinstance(r.get(key), (int, float))]
            if points:
                lines.append((label, *zip(*points)))
        if not lines:
            continue
        fig, ax = plt.subplots(figsize=(6, 4))
        for label, steps, values in lines:
            ax.plot(steps, values, marker="o" if len(steps) < 30 else None, markersize=3, label=label)
        ax.set_xlabel("update step")
        ax.set_ylabel(ylabel)
        if log_scale:
            ax.set_yscale("log")
        ax.grid(alpha=0.3)
        if len(lines) > 1:
            ax.legend()
        ax.set_title(f"{run_dir.name}: {stem.replace('_', ' ')}")
        fig.tight_layout()
        written.append(save_figure(fig, out / f"{stem}.png"))
    if any(r.get("kind") == "norms" for r in records):
        written.append(save_figure(norms_figure(records, f"{run_dir.name}: per-layer norms"), out / "norms.png"))
    return written


def plot_attention(weights: np.ndarray, src_tokens: list[str], tgt_tokens: list[str], path: str | Path,
                   title: str = "encoder-decoder attention") -> Path:
    """Heat-maps of one sentence's attention weights (H, T, S): one panel per head."""
    weights = np.asarray(weights)
    if weights.ndim == 2:
        weights = weights[None]  # (T, S) -> (1, T, S)
    n_heads = weights.shape[0]
    cols = min(n_heads, 4)
    rows = -(-n_heads // cols)
    width = max(3.0, 0.35 * len(src_tokens) + 1.5)
    height = max(2.5, 0.3 * len(tgt_tokens) + 1.0)
    fig, axes = plt.subplots(rows, cols, figsize=(cols * width, rows * height), squeeze=False)
    for head in range(rows * cols):
        ax = axes[head // cols][head % cols]
        if head >= n_heads:
            ax.axis("off")
            continue
        ax.imshow(weights[head, :len(tgt_tokens), :len(src_tokens)], cmap="viridis", vmin=0.0,
                  aspect="auto")
        ax.set_xticks(range(len(src_tokens)), src_tokens, rotation=90, fontsize=7)
        ax.set_yticks(range(len(tgt_tokens)), tgt_tokens, fontsize=7)
        ax.set_title(f"head {head}", fontsize=8)
    fig.suptitle(title)
    fig.tight_layout()
    return save_figure(fig, path)


def attention_for_sentence(model, tokenizer, source: str, target: str, path: str | Path,
                           layer: int | None = None) -> Path:
    """Run `model.attention_maps` on one (source, target) pair and plot a decoder layer's
    encoder-decoder attention (§3.2.3); by default the last layer."""
    from train.data.inputs import make_model_inputs  # here, so plotting metrics needs no model code

    src_ids, tgt_ids = tokenizer.encode(source), tokenizer.encode(target)
    src, tgt_in, _ = make_model_inputs([src_ids], [tgt_ids])  # (1, S), (1, T)
    maps = model.attention_maps(src, tgt_in)
    layer = model.config.N - 1 if layer is None else layer
    weights = maps[f"decoder.layers.{layer}.cross_attn"][0]  # (H, T, S)
    src_pieces = tokenizer.pieces(source) + ["</s>"]
    tgt_pieces = ["<s>"] + tokenizer.pieces(target)
    return plot_attention(weights, src_pieces, tgt_pieces, path,
                          title=f"decoder layer {layer} encoder-decoder attention")
