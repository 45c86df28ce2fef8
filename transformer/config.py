"""TransformerConfig: every hyperparameter of the model, with the paper's names (§3, Table 3).

Presets: `base()` and `big()` are Table 3's two rows, `parse()` is the §6.3
parser, `tiny()` is for tests and the CPU demo. Use them as module functions
(`config.base()`) or classmethods (`TransformerConfig.base()`).

Names: N layers per stack, d_model, d_ff (§3.3), h heads, d_k = d_v = d_model/h
(§3.2.2), p_drop (§5.4 residual dropout), eps_ls (§5.4 label smoothing).
"""
from __future__ import annotations

import dataclasses
import difflib
from dataclasses import dataclass

NORMS = ("post", "pre")
POSITIONALS = ("sinusoidal", "learned")
IMPLS = ("composed", "fused")


@dataclass(frozen=True)
class TransformerConfig:
    """Hyperparameters of one Transformer. Defaults are Table 3 "base" with a 37,000 shared vocabulary (§5.1).

    d_k and d_v default to d_model // h (§3.2.2); set them to try Table 3 rows (A) and (B).
    Fields the paper does not fix are marked "paper silent".

    `impl` is not a hyperparameter: it picks how attention, the sub-layer connection and
    the loss run. "composed" runs the equations op by op, as the chapters build them;
    "fused" runs the same math as one Function each (transformer/fused.py), fewer ops
    for the same numbers (a test trains both ways and compares).
    """

    vocab_size: int = 37000           # §5.1: shared source-target BPE vocabulary of about 37,000
    N: int = 6                        # §3.1: layers per stack
    d_model: int = 512                # §3.1
    d_ff: int = 2048                  # §3.3, Eq. (2): inner width of the feed-forward network
    h: int = 8                        # §3.2.2: heads
    d_k: int | None = None            # §3.2.2: d_model / h unless given
    d_v: int | None = None            # §3.2.2: d_model / h unless given
    p_drop: float = 0.1               # §5.4: residual dropout, also on embeddings + positions
    eps_ls: float = 0.1               # §5.4: label smoothing
    attention_dropout: float = 0.0    # paper silent (tensor2tensor has the option; default off here)
    norm: str = "post"                # §3.1: LayerNorm(x + Sublayer(x)); "pre" is a DEVIATION(§3.1)
    positional: str = "sinusoidal"    # §3.5; "learned" is Table 3 row (E)
    tie_embeddings: bool = True       # §3.4: one matrix for both embeddings and the pre-softmax linear
    layernorm_eps: float = 1e-6       # paper silent
    max_len: int = 1024               # size of the positions table (paper silent)
    pad_id: int = 0
    unk_id: int = 1
    bos_id: int = 2
    eos_id: int = 3
    impl: str = "composed"            # "composed" (op by op, the default) or "fused" (fused.py); same math

    def __post_init__(self):
        for name in ("vocab_size", "N", "d_model", "d_ff", "h", "d_k", "d_v", "max_len"):
            value = getattr(self, name)
            if value is None and name in ("d_k", "d_v"):
                continue                                                       # derived below
            _require(isinstance(value, int) and not isinstance(value, bool), f"{name} must be an int, got {value!r}")
            _require(value > 0, f"{name} must be positive, got {value!r}")
        if self.d_k is None or self.d_v is None:
            _require(self.d_model % self.h == 0,
                     f"d_model ({self.d_model}) must be divisible by h ({self.h}) so that "
                     f"d_k = d_v = d_model/h (§3.2.2); or give d_k and d_v explicitly")
        if self.d_k is None:
            object.__setattr__(self, "d_k", self.d_model // self.h)
        if self.d_v is None:
            object.__setattr__(self, "d_v", self.d_model // self.h)
        for name in ("p_drop", "attention_dropout", "eps_ls"):
            value = getattr(self, name)
            _require(0.0 <= value < 1.0, f"{name} must be in [0, 1), got {value!r}")
        _require(self.norm in NORMS, f"norm must be one of {NORMS}, got {self.norm!r}")
        _require(self.impl in IMPLS, f"impl must be one of {IMPLS}, got {self.impl!r}")
        _require(self.positional in POSITIONALS,
                 f"positional must be one of {POSITIONALS}, got {self.positional!r}")
        _require(self.positional != "sinusoidal" or self.d_model % 2 == 0,
                 f"sinusoidal positions pair sin/cos dimensions (§3.5): d_model must be even, got {self.d_model}")
        _require(self.layernorm_eps > 0, f"layernorm_eps must be positive, got {self.layernorm_eps}")
        specials = {"pad_id": self.pad_id, "unk_id": self.unk_id, "bos_id": self.bos_id, "eos_id": self.eos_id}
        _require(len(set(specials.values())) == 4, f"special token ids must differ, got {specials}")
        for name, value in specials.items():
            _require(0 <= value < self.vocab_size, f"{name} = {value} is outside the vocabulary [0, {self.vocab_size})")
        _require(self.vocab_size > 4, f"vocab_size must leave room for real tokens beyond the 4 specials, "
                                      f"got {self.vocab_size}")

    # --- presets (Table 3, §6.3) -------------------------------------------------------
    @classmethod
    def base(cls, vocab_size: int = 37000, **changes) -> "TransformerConfig":
        """Table 3 "base": N 6, d_model 512, d_ff 2048, h 8, d_k = d_v = 64, P_drop 0.1, eps_ls 0.1."""
        return cls(vocab_size=vocab_size, **changes)

    @classmethod
    def big(cls, vocab_size: int = 37000, **changes) -> "TransformerConfig":
        """Table 3 "big": N 6, d_model 1024, d_ff 4096, h 16, d_k = d_v = 64, P_drop 0.3 (0.1 for En-Fr, §6.1)."""
        return cls(**{**dict(vocab_size=vocab_size, d_model=1024, d_ff=4096, h=16, p_drop=0.3), **changes})

    @classmethod
    def parse(cls, vocab_size: int = 16000, **changes) -> "TransformerConfig":
        """§6.3 parser: "a 4-layer transformer with d_model = 1024"; 16K vocabulary for WSJ only.

        §6.3 says every other parameter "remained unchanged from the English-to-German
        base translation model", so h = 8 (d_k = d_v = 128) and d_ff = 2048 here, read
        literally. Dropout was tuned on section 22 and not reported: base's 0.1 is kept.
        """
        return cls(**{**dict(vocab_size=vocab_size, N=4, d_model=1024), **changes})

    @classmethod
    def tiny(cls, vocab_size: int = 16, **changes) -> "TransformerConfig":
        """For tests and the CPU demo: N 2, d_model 64, d_ff 256, h 4 (d_k 16), short positions table."""
        return cls(**{**dict(vocab_size=vocab_size, N=2, d_model=64, d_ff=256, h=4, max_len=256), **changes})

    # --- changing, saving, loading ------------------------------------------------------
    def replace(self, **changes) -> "TransformerConfig":
        """A copy with some fields changed, validated again.

        d_k and d_v that were derived from d_model/h are derived again when d_model or
        h change (unless given in `changes`); explicitly different values are kept.
        """
        _check_keys(changes)
        derived = self.d_model // self.h if self.d_model % self.h == 0 else None
        if "d_model" in changes or "h" in changes:
            for name in ("d_k", "d_v"):
                if name not in changes and getattr(self, name) == derived:
                    changes[name] = None
        return dataclasses.replace(self, **changes)

    def to_dict(self) -> dict:
        """Plain JSON-able dict of every field (d_k, d_v resolved)."""
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, values: dict) -> "TransformerConfig":
        """Inverse of to_dict; an unknown key raises ValueError naming the closest valid key."""
        _check_keys(values)
        return cls(**values)


def _require(condition: bool, message: str) -> None:
    if not condition:
        raise ValueError(f"TransformerConfig: {message}")


def _check_keys(values: dict) -> None:
    valid = [f.name for f in dataclasses.fields(TransformerConfig)]
    for key in values:
        if key not in valid:
            close = difflib.get_close_matches(key, valid, n=1, cutoff=0.5)
            hint = f"; did you mean {close[0]!r}?" if close else f"; valid keys: {', '.join(valid)}"
            raise ValueError(f"TransformerConfig: unknown key {key!r}{hint}")


def base(vocab_size: int = 37000, **changes) -> TransformerConfig:
    return TransformerConfig.base(vocab_size, **changes)


def big(vocab_size: int = 37000, **changes) -> TransformerConfig:
    return TransformerConfig.big(vocab_size, **changes)


def parse(vocab_size: int = 16000, **changes) -> TransformerConfig:
    return TransformerConfig.parse(vocab_size, **changes)


def tiny(vocab_size: int = 16, **changes) -> TransformerConfig:
    return TransformerConfig.tiny(vocab_size, **changes)
