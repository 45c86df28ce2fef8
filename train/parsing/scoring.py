"""Parsing as translation, scored (§6.3, Table 4): model output -> trees -> EVALB, beside a baseline.

The model's output (beam 21, α 0.3, at most input + 300 tokens: §6.3) becomes a tree over
exactly the sentence's words (train.parsing.trees.delinearise repairs ill-formed output). EVALB
then scores its brackets and those of the right-branching baseline against the same gold
trees with the same settings, and `compare` prints the summaries side by side.

POS tags: the model writes words, not tags (train/parsing/trees.py), so both systems' trees carry
the gold tags, as Vinyals et al.'s XX-leaf trees had to. That matters beyond the tagging
column: EVALB decides which words are punctuation, and deletes them, by the test tree's
tags, and would call a sentence with a differently tagged comma an "Error" and skip it.
With the same tags every sentence is scored, for both systems alike.
"""

from collections.abc import Sequence
from pathlib import Path

from train.parsing.evalb import EvalbParams, Report, evaluate
from train.parsing.trees import Tree, clean, delinearise, read_trees, right_branching


def read_gold(path: Path) -> list[Tree]:
    """Gold trees from a treebank file or one-tree-a-line file, after the standard removals."""
    trees = [clean(tree) for tree in read_trees(path)]
    return [tree for tree in trees if tree is not None]


def parses_from_outputs(outputs: Sequence[str], gold: Sequence[Tree]) -> tuple[list[Tree], int]:
    """(a tree per model output over its gold tree's words and POS tags, how many outputs needed repair)."""
    trees, repaired = [], 0
    for output, tree in zip(outputs, gold):
        parse, was_repaired = delinearise(output.split(), tree.words(), tree.tags())
        trees.append(parse)
        repaired += was_repaired
    return trees, repaired


def score(gold: Sequence[Tree], test: Sequence[Tree], params: EvalbParams) -> Report:
    """EVALB over the pairs; it counts errors instead of stopping at MAX_ERROR (an early checkpoint
    may mis-tag punctuation often)."""
    return evaluate([str(t) for t in gold], [str(t) for t in test], params, stop_after_max_error=False)


def baseline(gold: Sequence[Tree]) -> list[Tree]:
    """The right-branching tree of each gold sentence, with its gold POS tags."""
    return [right_branching(tree.words(), tree.tags()) for tree in gold]


def compare(reports: dict[str, Report]) -> str:
    """The EVALB summaries of several systems in columns, for all sentences and those <= the cut-off."""
    names = list(reports)
    first = reports[names[0]]
    lines = [f"{'':26}" + "".join(f"{name:>17}" for name in names)]
    for title, part in (("All", "all"), (f"len<={first.cutoff_len}", "short")):
        lines.append(f"-- {title} --")
        summaries = [getattr(reports[name], part).summary() for name in names]
        for key in summaries[0]:
            if key == "Tagging accuracy":                 # gold tags on every side: always 100
                continue
            values = [s[key] for s in summaries]
            lines.append(f"{key:<26}" + "".join(f"{v:17d}" if isinstance(v, int) else f"{v:17.2f}"
                                                for v in values))
    return "\n".join(lines)


__all__ = ["read_gold", "parses_from_outputs", "score", "baseline", "compare"]
