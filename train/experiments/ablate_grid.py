"""Table 3's model variations (§6.2), scaled to the base config of a run, and their parameter counts.

The paper varies one thing at a time around "base" (N 6, d_model 512, d_ff 2048,
h 8, d_k = d_v = 64, P_drop 0.1, ε_ls 0.1, sinusoids, 100K steps) and reports dev
perplexity (per word-piece), dev BLEU (newstest2013) and parameters ×10⁶:

    (A) h ∈ {1, 4, 16, 32} with d_k = d_v = d_model/h      the same compute, fewer or more heads
    (B) d_k ∈ {16, 32} (d_v stays 64)                       smaller attention keys
    (C) N ∈ {2, 4, 8}; d_model ∈ {256, 1024} with d_k = d_v = d_model/h; d_ff ∈ {1024, 4096}
    (D) P_drop ∈ {0.0, 0.2}; ε_ls ∈ {0.0, 0.2}
    (E) learned positional embeddings instead of sinusoids (§3.5)
    big N 6, d_model 1024, d_ff 4096, h 16, P_drop 0.3     (300K steps in the paper)

SCALING_RULE says how a variant is carried over to a smaller base (say Multi30k's
N 3, d_model 256, h 4): each size scales by our base's value over the paper base's.
`count_parameters` counts a config's weights in closed form, so --list can show our
count for the paper-size model of each line beside Table 3's params column.

RECIPE is the other grid: the training recipe (warm-up, learning-rate factor, dropout,
vocabulary size, steps), one setting at a time around the config, to choose on dev.
"""
import dataclasses
from dataclasses import dataclass, field

from train import config as config_lib
from train.config import RunConfig
from train.errors import InputError
from transformer.config import TransformerConfig

PAPER_BASE = TransformerConfig.base(vocab_size=37000)    # Table 3 "base"; §5.1: ~37,000 shared BPE tokens
PAPER_STEPS = 100_000                                     # §5.2: base trains 100K steps
ROWS = ("A", "B", "C", "D", "E", "big")
SIZE_FIELDS = ("N", "d_model", "d_ff", "h", "d_k", "d_v")
SHOWN_FIELDS = SIZE_FIELDS + ("p_drop", "eps_ls", "positional")

SCALING_RULE = (
    "sizes scale by our base over the paper's base: N x (N/6), d_model x (d_model/512), d_ff x (d_ff/2048),\n"
    "h x (h/8), d_k x (d_k/64), d_v x (d_v/64), rounded to the nearest integer, at least 1; where the paper\n"
    "keeps d_k = d_v = d_model/h (rows A, C d_model, big; §3.2.2) ours does too. P_drop, eps_ls and the\n"
    "positional encoding take the paper's values. Every variant trains the same steps with the same seed.")


@dataclass(frozen=True)
class PaperResult:
    """One line of Table 3: what changes from base, dev PPL (per word-piece), dev BLEU, params ×10⁶."""

    row: str
    changes: dict
    ppl: float
    bleu: float
    params_m: float | None = None      # blank in Table 3 for rows A, D, E


# Table 3 of the paper (newstest2013; no checkpoint averaging; beam 4, α 0.6; §6.2).
TABLE3 = (
    PaperResult("base", {}, 4.92, 25.8, 65),
    PaperResult("A", {"h": 1, "d_k": 512, "d_v": 512}, 5.29, 24.9),
    PaperResult("A", {"h": 4, "d_k": 128, "d_v": 128}, 5.00, 25.5),
    PaperResult("A", {"h": 16, "d_k": 32, "d_v": 32}, 4.91, 25.8),
    PaperResult("A", {"h": 32, "d_k": 16, "d_v": 16}, 5.01, 25.4),
    PaperResult("B", {"d_k": 16}, 5.16, 25.1, 58),
    PaperResult("B", {"d_k": 32}, 5.01, 25.4, 60),
    PaperResult("C", {"N": 2}, 6.11, 23.7, 36),
    PaperResult("C", {"N": 4}, 5.19, 25.3, 50),
    PaperResult("C", {"N": 8}, 4.88, 25.5, 80),
    PaperResult("C", {"d_model": 256, "d_k": 32, "d_v": 32}, 5.75, 24.5, 28),
    PaperResult("C", {"d_model": 1024, "d_k": 128, "d_v": 128}, 4.66, 26.0, 168),
    PaperResult("C", {"d_ff": 1024}, 5.12, 25.4, 53),
    PaperResult("C", {"d_ff": 4096}, 4.75, 26.2, 90),
    PaperResult("D", {"p_drop": 0.0}, 5.77, 24.6),
    PaperResult("D", {"p_drop": 0.2}, 4.95, 25.5),
    PaperResult("D", {"eps_ls": 0.0}, 4.67, 25.3),
    PaperResult("D", {"eps_ls": 0.2}, 5.47, 25.7),
    PaperResult("E", {"positional": "learned"}, 4.92, 25.7),
    # big keeps d_k = d_v = 64 = 1024/16 (blank in the table: base's value); §5.2: 300K steps.
    PaperResult("big", {"d_model": 1024, "d_ff": 4096, "h": 16, "d_k": 64, "d_v": 64, "p_drop": 0.3},
                4.33, 26.4, 213),
)


@dataclass(frozen=True)
class Variant:
    """One training run of a grid: our config, and the Table 3 line it scales (None in the recipe grid)."""

    id: str                            # "base", "A1".."A4", "B1", ..., "E1", "big"; also its run dir's name
    paper: PaperResult | None
    config: RunConfig
    notes: tuple[str, ...] = field(default=())   # roundings worth saying, e.g. "h 1 x 4/8 = 0.5 -> 1"
    change: str = ""                   # recipe grid: the setting changed, e.g. "train.warmup_steps 500"

    @property
    def paper_label(self) -> str:
        if self.paper is None:
            return ""
        return describe(dataclasses.replace(PAPER_BASE, **self.paper.changes), PAPER_BASE)

    def our_label(self, base: TransformerConfig) -> str:
        return self.change or describe(self.config.model, base)


def describe(config: TransformerConfig, base: TransformerConfig) -> str:
    """The fields where `config` differs from `base`, e.g. "h 1, d_k 512, d_v 512" ("base" when none)."""
    parts = [f"{name} {getattr(config, name)}" for name in SHOWN_FIELDS
             if getattr(config, name) != getattr(base, name)]
    return ", ".join(parts) or "base"


def scaled_model(base: TransformerConfig, changes: dict) -> tuple[TransformerConfig, list[str]]:
    """Our version of one Table 3 variant (SCALING_RULE), and notes on the roundings that matter."""
    paper = dataclasses.replace(PAPER_BASE, **changes)
    ours, notes = {}, []
    for name, value in changes.items():
        if name in ("d_k", "d_v") and value * paper.h == paper.d_model:
            continue                                          # derived below: d_model/h (§3.2.2)
        if name in SIZE_FIELDS:
            exact = value * getattr(base, name) / getattr(PAPER_BASE, name)
            ours[name] = max(1, round(exact))
            if abs(ours[name] - exact) >= 0.25:
                notes.append(f"{name} {value} x {getattr(base, name)}/{getattr(PAPER_BASE, name)} = {exact:g} "
                             f"-> {ours[name]}")
        else:
            ours[name] = value                                # rates and the positional encoding: as the paper
    for name in ("d_k", "d_v"):
        if name in changes and name not in ours:              # the paper's d_k = d_v = d_model/h
            ours[name] = max(1, round(ours.get("d_model", base.d_model) / ours.get("h", base.h)))
    try:
        return dataclasses.replace(base, **ours), notes
    except ValueError as err:
        raise InputError(f"Table 3 variant {describe(paper, PAPER_BASE)} scaled to this base is not a valid "
                         f"model ({err}); choose a base whose sizes are powers of two") from None


def expand(run_config: RunConfig, rows=ROWS, steps: int | None = None) -> list[Variant]:
    """The base and every variant of `rows`, as RunConfigs with the same step budget and seed.

    Variants are numbered within their row in Table 3's order (A1 is h = 1, C4 is d_model 256).
    """
    unknown = [row for row in rows if row not in ROWS]
    if unknown:
        raise InputError(f"--rows: unknown row {unknown[0]!r}; Table 3's rows are {', '.join(ROWS)}")
    steps = run_config.train.max_steps if steps is None else steps
    if steps <= 0:
        raise InputError(f"--steps must be positive, got {steps}")
    base = run_config.model
    variants, numbers = [], {}
    for paper in TABLE3:
        if paper.row != "base" and paper.row not in rows:
            continue
        numbers[paper.row] = numbers.get(paper.row, 0) + 1
        variant_id = paper.row if paper.row in ("base", "big") else f"{paper.row}{numbers[paper.row]}"
        model, notes = scaled_model(base, paper.changes)
        config = run_config.replace(name=f"{run_config.name}-{variant_id}", model=model,
                                    train=dataclasses.replace(run_config.train, max_steps=steps))
        variants.append(Variant(variant_id, paper, config, tuple(notes)))
    return variants


# A recipe search on the dev split (warm-up, learning-rate factor, dropout, vocabulary size, steps),
# one setting at a time around the config: (name, key, factors of the config's value).
RECIPE = (("warmup", "train.warmup_steps", (0.5, 2)), ("lr", "train.lr_factor", (0.5, 2)),
          ("pdrop", "model.p_drop", (2, 3)), ("vocab", "tokenizer.vocab_size", (0.5, 2)),
          ("steps", "train.max_steps", (2,)))


def expand_recipe(run_config: RunConfig, steps: int | None = None) -> list[Variant]:
    """The base (with `steps`) and one variant per RECIPE factor, e.g. "warmup500" for warm-up x 0.5.

    Perplexities of the vocab variants count other tokens: compare those on BLEU.
    """
    base = dataclasses.replace(expand(run_config, rows=(), steps=steps)[0], paper=None)
    variants = [base]
    for name, key, factors in RECIPE:
        section, leaf = key.split(".")
        value = getattr(getattr(base.config, section), leaf)
        for factor in factors:
            new = round(value * factor, 3) if isinstance(value, float) else max(1, round(value * factor))
            config = config_lib.apply_overrides(base.config, [f"{key}={new}"])
            variant_id = f"{name}{new:g}"
            variants.append(Variant(variant_id, None, config.replace(name=f"{run_config.name}-{variant_id}"),
                                    change=f"{key} {new:g}"))
    return variants


# ------------------------------------------------------------------ parameters
def count_parameters(config: TransformerConfig) -> int:
    """Parameters of the model `config` builds (transformer/model.py), counted in closed form.

    Per attention sub-layer W^Q, W^K (D x h·d_k), W^V (D x h·d_v), W^O (h·d_v x D), each with a
    bias (§3.2.2); per FFN W1, b1, W2, b2 (§3.3 Eq. (2)); a gain and a bias per LayerNorm.
    """
    c = config
    D, qk, v = c.d_model, c.h * c.d_k, c.h * c.d_v
    attention = 2 * (D * qk + qk) + (D * v + v) + (v * D + D)
    ffn = D * c.d_ff + c.d_ff + c.d_ff * D + D
    norm = 2 * D
    encoder = c.N * (attention + ffn + 2 * norm)              # §3.1: 2 sub-layers, each with its LayerNorm
    decoder = c.N * (2 * attention + ffn + 3 * norm)          # self-, cross-attention, FFN
    final_norms = 2 * norm if c.norm == "pre" else 0
    embeddings = c.vocab_size * D * (1 if c.tie_embeddings else 3)   # §3.4: one shared matrix when tied
    positions = 2 * c.max_len * D if c.positional == "learned" else 0  # sinusoids (§3.5) have no weights
    return encoder + decoder + final_norms + embeddings + positions


def paper_size_parameters(variant: Variant) -> int | None:
    """Our count for the paper-size model of this variant (vocabulary 37,000, tied embeddings)."""
    return count_parameters(dataclasses.replace(PAPER_BASE, **variant.paper.changes)) if variant.paper else None


PARAMS_NOTE = (
    "params: 'ours' counts our model at the config's vocabulary (the trained tokenizer may hold fewer\n"
    "pieces); 'paper size' is our count for the paper's model of that line with a 37,000-piece shared\n"
    "vocabulary and tied embeddings (§3.4: one matrix, counted once), biases and LayerNorm gains included.\n"
    "It is within 7% of Table 3's params column (base 63.1M vs 65M, big 214.2M vs 213M). The layers agree\n"
    "(N 2->4->6->8: paper +14, +15, +15M; ours +14.7M each); the rest (paper - ours: +1.6..+2.5M at\n"
    "d_model 512, +1.2M at 256, +4.1M at 1024) grows with d_model the way a ~41k vocabulary would\n"
    "(V x d_model), big excepted (ours 1.2M more). §5.1 says only 'about 37000'; the paper does not say\n"
    "how it counted.")


def list_text(run_config: RunConfig, variants: list[Variant], where: str) -> str:
    """What --list prints: the base, the scaling rule, and every variant with its parameter counts."""
    base = run_config.model
    steps = variants[0].config.train.max_steps
    table3 = variants[0].paper is not None
    lines = [f"Table 3 grid (§6.2) scaled to {where}" if table3 else f"recipe grid around {where}, chosen on dev",
             f"our base: {full_label(base)}; vocabulary {base.vocab_size}",
             f"budget: {steps:,} steps per variant, seed {run_config.train.seed}"]
    if table3:
        lines += [f"paper base: {full_label(PAPER_BASE)}; {PAPER_STEPS:,} steps",
                  "scaling rule: " + SCALING_RULE.replace("\n", "\n  "), ""]
        rows = [("variant", "paper", "ours", "params ours", "paper size", "paper")]
    else:
        lines += ["one setting at a time: " + ", ".join(f"{key} x {'/'.join(f'{f:g}' for f in factors)}"
                                                       for _, key, factors in RECIPE), ""]
        rows = [("variant", "change", "params")]
    for v in variants:
        ours = (v.id, v.our_label(base) + "".join(f" ({n})" for n in v.notes),
                f"{count_parameters(v.config.model) / 1e6:.2f}M")
        if table3:
            paper_params = f"{v.paper.params_m:g}M" if v.paper.params_m is not None else "-"
            ours = (ours[0], v.paper_label, *ours[1:], f"{paper_size_parameters(v) / 1e6:.1f}M", paper_params)
        rows.append(ours)
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
    lines += ["  ".join(cell.ljust(w) for cell, w in zip(row, widths)).rstrip() for row in rows]
    if any(v.id == "big" for v in variants):
        lines.append("big: the paper trains it 300K steps (3x base); here it gets the same budget as every variant.")
    return "\n".join(lines + ["", PARAMS_NOTE if table3 else
                               "the vocab variants' perplexities count other tokens: compare them on BLEU"])


def full_label(config: TransformerConfig) -> str:
    return ", ".join(f"{name} {getattr(config, name)}" for name in SHOWN_FIELDS)
