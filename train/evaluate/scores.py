"""Translation scores: sacreBLEU as users expect it, and BLEU as the paper computed it (§6.1, Table 2).

The main number is sacreBLEU on detokenized, cased text with its default 13a
tokenizer, reported with its signature so anyone can reproduce it. Beside it
sits a separately labelled "paper BLEU": tensor2tensor's `get_ende_bleu.sh`, in one
of two recipes, named in every report:

    paper-2017      the script as the paper used it (the default):
                      1. Moses `tokenizer.perl -l de` on hypotheses and references,
                      2. compound splitting `s{(\\S)-(\\S)}{$1 ##AT##-##AT## $2}g`,
                      3. `multi-bleu.perl` (tokenized, cased, unsmoothed corpus BLEU).
    paper-current   the script as it is today: first Moses `replace-unicode-punctuation.perl`
                    on the hypotheses (not the references): “ ” -> ", ’ -> ', … -> ..., full-width
                    forms -> ASCII. German output with „…“ quotes then scores lower (59.27
                    vs 60.10 on one newstest2014 output), so the recipe must be said.

Step 1 is `sacremoses`, the maintained Python port of tokenizer.perl, with German
rules and the script's escaping (`"` -> `&quot;`, `&` -> `&amp;`, ...), plus one rule
sacremoses leaves out on purpose (hplt-project/sacremoses issue 97): the script splits the
period off the last word of a line even after a non-breaking prefix ("Gate 24." ->
"Gate 24 ."). With it, every line of newstest2012-2017 (German and English) tokenizes exactly
as tokenizer.perl does; tests/train/evaluate/test_scores.py pins the scripts' output on fixed
sentences (hyphens after digits, quotes, guillemets, apostrophes, `&`, unicode punctuation).
Without sacremoses installed, paper BLEU is reported as unavailable (one line saying how to
install it); sacreBLEU, chrF and everything else go on.

Why two numbers: splitting "Baden-Württemberg" into three tokens turns one
hard-to-match token into easy matches, and tokenized BLEU counts punctuation
as words. The same tensor2tensor checkpoint scores 29.02 with the recipe and
27.52 with sacreBLEU (tensorflow/tensor2tensor issue 317), about 1.5 BLEU.
"""

from __future__ import annotations

import re
from dataclasses import asdict, dataclass

from sacrebleu.metrics import BLEU, CHRF

# tensor2tensor get_ende_bleu.sh: perl -ple 's{(\S)-(\S)}{$1 ##AT##-##AT## $2}g'
_COMPOUND = re.compile(r"(\S)-(\S)")
_ENDS_WITH_PERIOD = re.compile(r"(\S+)\.")
PAPER_RECIPES = {
    "paper-2017": "get_ende_bleu.sh as the paper used it: Moses tokenizer.perl -l de, ##AT## compound split, "
                  "multi-bleu (§6.1, Table 2)",
    "paper-current": "get_ende_bleu.sh as it is today: replace-unicode-punctuation.perl on the hypotheses, then "
                     "as paper-2017",
}
DEFAULT_RECIPE = "paper-2017"
# Moses scripts/tokenizer/replace-unicode-punctuation.perl, rule for rule and in its order. (Its
# "１" -> '"' is the script's own; it is kept, since the recipe is the script.)
_UNICODE_PUNCTUATION = [(re.compile(pattern), replacement) for pattern, replacement in (
    ("，", ","), ("。 *", ". "), ("、", ","), ("”", '"'), ("“", '"'), ("∶", ":"), ("：", ":"), ("？", "?"),
    ("《", '"'), ("》", '"'), ("）", ")"), ("！", "!"), ("（", "("), ("；", ";"), ("１", '"'), ("」", '"'),
    ("「", '"'), ("０", "0"), ("３", "3"), ("２", "2"), ("５", "5"), ("６", "6"), ("９", "9"), ("７", "7"),
    ("８", "8"), ("４", "4"), ("． *", ". "), ("～", "~"), ("’", "'"), ("…", "..."), ("━", "-"), ("〈", "<"),
    ("〉", ">"), ("【", "["), ("】", "]"), ("％", "%"))]
SACREMOSES_MISSING = "not available: it needs sacremoses, Moses' tokenizer (pip install sacremoses)"

PAPER_GAP_NOTE = (
    "sacreBLEU (detokenized, 13a) runs ~1.5 BLEU below the paper's tokenized, compound-split "
    "multi-bleu score on the same output (tensorflow/tensor2tensor issue 317: 27.52 vs 29.02)."
)


@dataclass(frozen=True)
class Scores:
    """Corpus scores for one set of hypotheses; all values are percentages (0-100)."""

    bleu: float  # sacreBLEU, detokenized, cased, 13a: the main number
    bleu_signature: str
    chrf: float
    chrf_signature: str
    paper_bleu: float | None  # get_ende_bleu.sh by `paper_recipe`, comparable to Table 2; None: not available
    exact_match: float  # % of sentences identical after whitespace normalisation
    n: int  # number of sentence pairs
    paper_recipe: str | None = DEFAULT_RECIPE  # None: paper BLEU not asked for

    def to_dict(self) -> dict:
        """Plain dict, e.g. for a JSON log line."""
        return asdict(self)

    def format(self) -> str:
        """A human-readable report, one score per line."""
        lines = [
            f"sentences   {self.n}",
            f"BLEU        {self.bleu:6.2f}  sacreBLEU {self.bleu_signature}",
            f"chrF        {self.chrf:6.2f}  sacreBLEU {self.chrf_signature}",
        ]
        if self.paper_recipe is not None:
            value = f"{self.paper_bleu:6.2f}" if self.paper_bleu is not None else "   n/a"
            why = PAPER_RECIPES[self.paper_recipe] if self.paper_bleu is not None else SACREMOSES_MISSING
            lines.append(f"paper BLEU  {value}  {self.paper_recipe}: {why}")
        lines += [f"exact match {self.exact_match:6.2f} %", f"note: {PAPER_GAP_NOTE}"]
        return "\n".join(lines)


def _check_pairs(hyps: list[str], refs: list[str]) -> None:
    if len(hyps) != len(refs):
        raise ValueError(
            f"got {len(hyps)} hypotheses but {len(refs)} references; they must pair up line by line"
        )
    if not hyps:
        raise ValueError("got 0 hypotheses and 0 references; nothing to score")


def split_compounds(line: str) -> str:
    """t2t compound splitting: 'rich-text' -> 'rich ##AT##-##AT## text' (non-overlapping, like perl s///g)."""
    return _COMPOUND.sub(r"\1 ##AT##-##AT## \2", line)


def replace_unicode_punctuation(line: str) -> str:
    """Moses replace-unicode-punctuation.perl: the first step of paper-current, on the hypotheses."""
    for pattern, replacement in _UNICODE_PUNCTUATION:
        line = pattern.sub(replacement, line)
    return line


def moses_tokenizer(lang: str = "de"):
    """Moses tokenizer.perl -l `lang` (escaping on), as sacremoses plus the script's last-word rule.

    Raises ImportError when sacremoses is not installed.
    """
    from sacremoses import MosesTokenizer  # imported here: it takes most of a second

    class PerlMosesTokenizer(MosesTokenizer):
        def handles_nonbreaking_prefixes(self, text: str) -> str:
            tokens = super().handles_nonbreaking_prefixes(text).split()
            last = _ENDS_WITH_PERIOD.fullmatch(tokens[-1]) if tokens else None
            if last:  # tokenizer.perl: "split last words independently as they are unlikely to be
                tokens[-1] = f"{last.group(1)} ."  # non-breaking prefixes"
            return " ".join(tokens)

    return PerlMosesTokenizer(lang=lang)


def paper_tokenize(line: str, tokenizer=None) -> str:
    """Steps 1-2 of get_ende_bleu.sh: Moses `tokenizer.perl -l de`, then compound splitting."""
    tokenizer = tokenizer if tokenizer is not None else moses_tokenizer("de")
    return split_compounds(tokenizer.tokenize(line.strip(), return_str=True, escape=True))


def paper_bleu(hyps: list[str], refs: list[str], recipe: str = DEFAULT_RECIPE) -> float:
    """Paper-comparable BLEU (§6.1, Table 2) by one of PAPER_RECIPES: Moses-tokenized, compound-split,
    cased, unsmoothed multi-bleu.perl. Raises ImportError when sacremoses is not installed."""
    _check_pairs(hyps, refs)
    if recipe not in PAPER_RECIPES:
        raise ValueError(f"unknown paper BLEU recipe {recipe!r}; choose from {', '.join(PAPER_RECIPES)}")
    if recipe == "paper-current":
        hyps = [replace_unicode_punctuation(h) for h in hyps]
    tokenizer = moses_tokenizer("de")
    tok_hyps = [paper_tokenize(h, tokenizer) for h in hyps]
    tok_refs = [paper_tokenize(r, tokenizer) for r in refs]
    # Text is already tokenized, so sacreBLEU must not tokenize again; force silences its warning.
    metric = BLEU(tokenize="none", smooth_method="none", force=True)
    return float(metric.corpus_score(tok_hyps, [tok_refs]).score)


def exact_match(hyps: list[str], refs: list[str]) -> float:
    """Percentage of hypotheses equal to their reference, ignoring runs of whitespace at ends and inside."""
    _check_pairs(hyps, refs)
    same = sum(" ".join(h.split()) == " ".join(r.split()) for h, r in zip(hyps, refs))
    return 100.0 * same / len(hyps)


def corpus_scores(hyps: list[str], refs: list[str], paper: str | None = DEFAULT_RECIPE) -> Scores:
    """Score detokenized hypotheses against one reference each; paper BLEU by the recipe `paper`
    (None: not computed, as during validation; unavailable without sacremoses, and said so).

    Raises ValueError when the lists are empty or differ in length.
    """
    _check_pairs(hyps, refs)
    bleu_metric = BLEU()  # defaults: 13a tokenizer, cased, exp smoothing
    bleu = bleu_metric.corpus_score(hyps, [refs])
    chrf_metric = CHRF()
    chrf = chrf_metric.corpus_score(hyps, [refs])
    try:
        paper_value = paper_bleu(hyps, refs, paper) if paper is not None else None
    except ImportError:  # sacremoses missing (a GPU image without it): everything else goes on
        paper_value = None
    return Scores(
        bleu=float(bleu.score),
        bleu_signature=str(bleu_metric.get_signature()),
        chrf=float(chrf.score),
        chrf_signature=str(chrf_metric.get_signature()),
        paper_bleu=paper_value,
        exact_match=exact_match(hyps, refs),
        n=len(hyps),
        paper_recipe=paper,
    )
