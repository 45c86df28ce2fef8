"""Plots of the per-layer norms that `train.log_norms` writes (train/run/layer_norms.py): one run, or several.

    plot_norms(records, path)            # one run: the four panels below (`python -m train plot` draws it)
    compare_runs({label: records}, path) # several runs: does the encoder keep the words apart?
    norms_figure(records), runs_figure({label: records})   # the same as matplotlib figures
    draw_runs(axes, {label: records})    # runs_figure's panels on your three axes (chapter 22)
    runs_table(records)                  # only what runs_figure reads: chapter 22 keeps its runs so

A record is a metrics.jsonl line (train/run/metrics.py): `{"kind": "norms", "step": ...}` with the
keys of layer_norms, and `{"kind": "valid", ...}` with the validation NLL.

Panels of one run, over the update steps:
  the encoder output's word-to-word spread (memory.spread; a collapsed encoder goes to 0),
  each encoder feed-forward output's shared part (f_const) and word-specific part (f_spread),
  the word-to-word spread each encoder sub-layer connection leaves (y_spread),
  the gradient norm of each encoder and decoder layer's weights.
"""
from __future__ import annotations

from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402 - the backend must be chosen first

from train.run.figures import save_figure  # noqa: E402


def series(records: list[dict], key: str, kind: str = "norms") -> tuple[list[int], list[float]]:
    """(steps, values) of `key` in the records of `kind` that have it."""
    points = [(r["step"], r[key]) for r in records if r.get("kind") == kind and isinstance(r.get(key), (int, float))]
    return ([s for s, _ in points], [v for _, v in points]) if points else ([], [])


def layers(records: list[dict], stack: str) -> int:
    """How many layers of `stack` ("enc" or "dec") the norms records have."""
    first = next((r for r in records if r.get("kind") == "norms"), {})   # runs_table keeps only the last layer
    return 1 + max((int(key.split(".")[1]) for key in first if key.startswith(stack + ".")), default=-1)


def plot_norms(records: list[dict], path: str | Path, title: str = "") -> Path:
    """The four panels of one run's norms records as a PNG."""
    return save_figure(norms_figure(records, title), path)


def compare_runs(runs: dict[str, list[dict]], path: str | Path, title: str = "") -> Path:
    """Several runs side by side as a PNG (runs_figure)."""
    return save_figure(runs_figure(runs, title), path)


def norms_figure(records: list[dict], title: str = ""):
    """The four panels of one run's norms records."""
    fig, axes = plt.subplots(2, 2, figsize=(11, 7.5))
    n_enc, n_dec = layers(records, "enc"), layers(records, "dec")
    ax = axes[0][0]
    ax.plot(*series(records, "memory.spread"), color="k", label="memory.spread")
    ax.set_title("encoder output: word-to-word spread / rms", fontsize=9)
    ax = axes[0][1]
    for i in range(n_enc):
        line, = ax.plot(*series(records, f"enc.{i}.feed_forward.f_const"), label=f"layer {i}: shared")
        ax.plot(*series(records, f"enc.{i}.feed_forward.f_spread"), "--", color=line.get_color(), label=f"layer {i}: per word")
    ax.set_title("encoder FFN output F: rms of its shared and per-word parts", fontsize=9)
    ax = axes[1][0]
    for i in range(n_enc):
        for sub, style in (("self_attn", ":"), ("feed_forward", "-")):
            ax.plot(*series(records, f"enc.{i}.{sub}.y_spread"), style, label=f"layer {i} {sub}")
    ax.set_title("spread / rms after each encoder sub-layer connection", fontsize=9)
    ax = axes[1][1]
    for stack, n, style in (("enc", n_enc, "-"), ("dec", n_dec, "--")):
        for i in range(n):
            subs = ("self_attn", "feed_forward") if stack == "enc" else ("self_attn", "cross_attn", "feed_forward")
            steps, _ = series(records, f"{stack}.{i}.feed_forward.grad")
            norms = [sum(v ** 2 for v in values) ** 0.5
                     for values in zip(*(series(records, f"{stack}.{i}.{sub}.grad")[1] for sub in subs))]
            ax.plot(steps, norms, style, label=f"{stack} {i}")
    ax.set_title("gradient norm of each layer's weights", fontsize=9)
    for ax in axes.flat:
        ax.set_yscale("log")
        ax.set_xlabel("update step")
        ax.grid(alpha=0.3)
        if ax.get_legend_handles_labels()[0]:
            ax.legend(fontsize=6, ncol=2)
    fig.suptitle(title or "per-layer norms (train.log_norms)")
    fig.tight_layout()
    return fig


def runs_figure(runs: dict[str, list[dict]], title: str = ""):
    """Several runs' records side by side: memory spread, the last encoder FFN's shared part, validation NLL."""
    fig, axes = plt.subplots(1, 3, figsize=(14, 4))
    draw_runs(axes, runs)
    fig.suptitle(title)
    fig.tight_layout()
    return fig


def draw_runs(axes, runs: dict[str, list[dict]]) -> None:
    """runs_figure's three panels on three matplotlib axes of yours."""
    for label, records in runs.items():
        last = layers(records, "enc") - 1
        axes[0].plot(*series(records, "memory.spread"), label=label)
        axes[1].plot(*series(records, f"enc.{last}.feed_forward.f_const"), label=label)
        axes[2].plot(*series(records, "nll", kind="valid"), marker="o", markersize=3, label=label)
    axes[0].set_title("encoder output: word-to-word spread / rms", fontsize=9)
    axes[1].set_title("last encoder FFN output: rms of its shared part", fontsize=9)
    axes[2].set_title("validation NLL per target token", fontsize=9)
    for ax in axes:
        ax.set_xlabel("update step")
        ax.grid(alpha=0.3)
    axes[0].set_yscale("log")
    axes[1].set_yscale("log")
    axes[0].legend(fontsize=7)


def runs_table(records: list[dict]) -> list[dict]:
    """Only what runs_figure reads of a run's records (what chapter 22 keeps of each run, in a small file)."""
    last = layers(records, "enc") - 1
    wanted = {"norms": ("memory.spread", f"enc.{last}.feed_forward.f_const"), "valid": ("nll",)}
    return [{"kind": r["kind"], "step": r["step"], **{k: r[k] for k in wanted[r["kind"]] if k in r}}
            for r in records if r.get("kind") in wanted]

