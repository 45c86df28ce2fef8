"""The ablation grid's results beside Table 3 (§6.2): a Markdown table, a CSV, and a plot.

Each side is compared with its own base: Δ is the variant's value minus its base's
(ours: our base run; the paper: Table 3 base, PPL 4.92, BLEU 25.8), with ↑ / ↓ / =
for its direction. "same direction" says whether our change has the paper's sign
("-" where the paper saw no change). Levels are not comparable (other data, other
vocabulary, a far smaller budget); directions are what the paper's conclusions are about.
"""
import csv
import io
from pathlib import Path

from train.data.files import write_atomic
from train.experiments.ablate_grid import Variant, paper_size_parameters

CSV_FIELDS = ("variant", "row", "paper_change", "our_change", "status", "same_as", "steps", "seed", "params",
              "vocab", "paper_params_m", "paper_size_params", "ppl", "d_ppl", "paper_ppl", "paper_d_ppl", "bleu",
              "d_bleu", "paper_bleu", "paper_d_bleu", "bleu_sentences", "valid_beam", "same_direction_ppl",
              "same_direction_bleu", "train_seconds")


def write(out: Path, variants: list[Variant], results: dict[str, dict], plot: bool = True) -> list[Path]:
    """Write STEM.md and STEM.csv (and STEM.png when `plot`) into `out`, STEM being table3 or recipe
    (the grid); returns the files written."""
    stem = "table3" if variants[0].paper is not None else "recipe"
    rows = [_row(v, variants[0], results) for v in variants]
    write_atomic(out / f"{stem}.md", markdown(variants, rows).encode("utf-8"))
    buffer = io.StringIO()
    writer = csv.DictWriter(buffer, fieldnames=CSV_FIELDS, lineterminator="\n")
    writer.writeheader()
    writer.writerows(rows)
    write_atomic(out / f"{stem}.csv", buffer.getvalue().encode("utf-8"))
    written = [out / f"{stem}.md", out / f"{stem}.csv"]
    if plot and any(row["d_bleu"] != "" or row["d_ppl"] != "" for row in rows[1:]):
        written.append(plot_changes(rows, out / f"{stem}.png"))
    return written


def _row(variant: Variant, base: Variant, results: dict[str, dict]) -> dict:
    """One CSV row: our numbers, the paper's, and each side's change from its base ("" where unknown)."""
    record, base_record = results.get(variant.id, {}), results.get(base.id, {})
    paper, paper_base = variant.paper, base.paper
    done = record.get("status") == "done"
    row = dict.fromkeys(CSV_FIELDS, "")
    row.update(variant=variant.id, paper_change=variant.paper_label, our_change=variant.our_label(base.config.model),
               status=record.get("status", "pending"), same_as=record.get("same_as", ""),
               steps=variant.config.train.max_steps, seed=variant.config.train.seed)
    if paper is not None:
        row.update(row=paper.row, paper_params_m=_blank(paper.params_m), paper_size_params=paper_size_parameters(variant),
                   paper_ppl=paper.ppl, paper_bleu=paper.bleu, paper_d_ppl=round(paper.ppl - paper_base.ppl, 2),
                   paper_d_bleu=round(paper.bleu - paper_base.bleu, 1))
    if done:
        row.update({key: _blank(record.get(key)) for key in ("params", "vocab", "ppl", "bleu", "bleu_sentences",
                                                             "valid_beam", "train_seconds")})
    if variant is base:
        row.update(paper_d_ppl="", paper_d_bleu="")
        return row
    if done and base_record.get("status") == "done":
        row["d_ppl"] = record["ppl"] - base_record["ppl"]
        if record.get("bleu") is not None and base_record.get("bleu") is not None:
            row["d_bleu"] = record["bleu"] - base_record["bleu"]
    row["same_direction_ppl"] = _same_direction(row["d_ppl"], row["paper_d_ppl"])
    row["same_direction_bleu"] = _same_direction(row["d_bleu"], row["paper_d_bleu"])
    return row


def _blank(value):
    return "" if value is None else value


def _sign(value: float) -> int:
    return (value > 0) - (value < 0)


def _same_direction(ours, paper) -> str:
    if ours == "" or paper == "":
        return ""
    if _sign(paper) == 0:
        return "-"                                             # the paper saw no change: nothing to agree with
    return "yes" if _sign(round(ours, 2)) == _sign(paper) else "no"      # as shown: a +0.00 change is no change


def _change(value, digits: int) -> str:
    if value == "":
        return ""
    arrow = {1: "↑", -1: "↓", 0: "="}[_sign(round(value, digits))]
    return f"{value:+.{digits}f} {arrow}"


def _number(value, digits: int) -> str:
    return "" if value == "" else f"{value:.{digits}f}"


def markdown(variants: list[Variant], rows: list[dict]) -> str:
    base = variants[0].config
    table3 = variants[0].paper is not None
    first = next((r for r in rows if r["status"] == "done"), rows[0])
    bleu_on = (f"sacreBLEU on the first {first['bleu_sentences']} dev sentences, beam {first['valid_beam']}"
               if first["bleu_sentences"] != "" else "sacreBLEU on the dev sentences of train.valid_bleu_sentences")
    name = base.name.removesuffix("-base")
    title = f"Table 3 (§6.2) variations of `{name}`, beside the paper" if table3 else f"Recipe search around `{name}`"
    paper_note = ("(the paper's: per word-piece on newstest2013)", " (the paper's: newstest2013, beam 4, α 0.6)",
                  "; 'same direction': our Δ has the paper's sign as (PPL, BLEU), '-' where the paper's Δ is 0")
    lines = [
        f"# {title}", "",
        f"{base.train.max_steps:,} steps per variant, seed {base.train.seed}, dev = the task's validation split. "
        f"PPL: per subword token of our BPE {paper_note[0] if table3 else ''}. BLEU: {bleu_on}"
        f"{paper_note[1] if table3 else ''}. Δ: change from {'each side' if table3 else 'the'}'s own base "
        f"(↑ up, ↓ down){paper_note[2] if table3 else ''}. One seed: small changes are within noise.", "",
    ]
    columns = (["variant", "paper", "ours", "params", "paper params", "dev PPL", "Δ", "paper PPL", "Δ", "dev BLEU",
                "Δ", "paper BLEU", "Δ", "same direction", "train s"] if table3 else
               ["variant", "change", "params", "dev PPL", "Δ", "dev BLEU", "Δ", "train s"])
    lines += ["| " + " | ".join(columns) + " |",
              "| " + " | ".join("---" if c in ("variant", "paper", "ours", "change", "Δ", "same direction")
                               else "---:" for c in columns) + " |"]
    for row in rows:
        ours = row["our_change"] + (f" (= {row['same_as']})" if row["same_as"] else "")
        ours += f" ({row['status']})" if row["status"] != "done" else ""
        params = "" if row["params"] == "" else f"{row['params'] / 1e6:.2f}M"
        seconds = "" if row["train_seconds"] == "" or row["same_as"] else f"{row['train_seconds']:.0f}"
        ppl, bleu = (_number(row["ppl"], 2), _change(row["d_ppl"], 2)), (_number(row["bleu"], 2),
                                                                         _change(row["d_bleu"], 2))
        if table3:
            paper_params = "" if row["paper_params_m"] == "" else f"{row['paper_params_m']:g}M"
            direction = ", ".join(d for d in (row["same_direction_ppl"], row["same_direction_bleu"]) if d)
            cells = [row["variant"], row["paper_change"], ours, params, paper_params, *ppl,
                     f"{row['paper_ppl']:.2f}", _change(row["paper_d_ppl"], 2), *bleu, f"{row['paper_bleu']:.1f}",
                     _change(row["paper_d_bleu"], 1), direction, seconds]
        else:
            cells = [row["variant"], ours, params, *ppl, *bleu, seconds]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"


def plot_changes(rows: list[dict], path: Path) -> Path:
    """Two panels, each variant's change from its base, ours beside the paper's: BLEU points, PPL in %."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import numpy as np

    rows = [r for r in rows if r["variant"] != "base"]
    base_ppl = {"ours": next((r["ppl"] - r["d_ppl"] for r in rows if r["d_ppl"] != ""), None),
                "paper": next((r["paper_ppl"] - r["paper_d_ppl"] for r in rows if r["paper_d_ppl"] != ""), None)}
    with_paper = base_ppl["paper"] is not None
    labels = [f"{r['variant']}: {r['our_change']}" for r in rows]
    y = np.arange(len(rows))
    fig, axes = plt.subplots(1, 2, figsize=(12, 0.35 * len(rows) + 1.8), sharey=True)
    panels = (("BLEU change from base (points)", "d_bleu", "paper_d_bleu", None),
              ("dev PPL change from base (%)", "d_ppl", "paper_d_ppl", base_ppl))
    for ax, (title, ours_key, paper_key, percent_of) in zip(axes, panels):
        def values(key, side):
            scale = 100.0 / percent_of[side] if percent_of and percent_of[side] else 1.0
            return [np.nan if r[key] == "" else r[key] * scale for r in rows]
        ax.barh(y - 0.2 * with_paper, values(ours_key, "ours"), height=0.4, label="ours", color="C0")
        if with_paper:
            ax.barh(y + 0.2, values(paper_key, "paper"), height=0.4, label="paper (Table 3)", color="C1")
        ax.axvline(0.0, color="black", linewidth=0.8)
        ax.set_title(title)
        ax.grid(axis="x", alpha=0.3)
    axes[0].set_yticks(y, labels, fontsize=8)
    axes[0].invert_yaxis()
    axes[1].legend(loc="best", fontsize=8)
    fig.suptitle("Table 3 variations (§6.2): change from each side's base" if with_paper else "change from base")
    fig.tight_layout()
    buffer = io.BytesIO()
    fig.savefig(buffer, format="png", dpi=100)
    plt.close(fig)
    write_atomic(path, buffer.getvalue())
    return path
