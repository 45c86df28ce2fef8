"""Parsing as translation, scored (§6.3, Table 4): model output -> trees -> EVALB, beside a baseline.

The model's output (beam 21, α 0.3, at most input + 300 tokens: §6.3) becomes a tree over
exactly the sentence's words (train.trees.delinearise repairs ill-formed output). EVALB
then scores its brackets and those of the right-branching baseline against the same gold
trees with the same settings, and `compare` prints the summaries side by side.

POS tags: the model predicts them (they are its leaf tokens), but EVALB decides which
words are punctuation, and so deleted, by the test tree's tags: one mis-tagged comma makes
the whole sentence an EVALB "Error", left out of the score. So the brackets are scored with
the gold tags on the model's leaves (as Vinyals et al., whose XX leaves carry no tags, had
to), every sentence counts for both systems, and the model's own tags are scored apart.
"""

from collections.abc import Sequence
from pathlib import Path

from train.evalb import EvalbParams, Report, evaluate
from train.trees import Tree, clean, delinearise, read_trees, right_branching


def read_gold(path: Path) -> list[Tree]:
    """Gold trees from a treebank file or one-tree-a-line file, after the standard removals."""
    trees = [clean(tree) for tree in read_trees(path)]
    return [tree for tree in trees if tree is not None]


def parses_from_outputs(outputs: Sequence[str], sentences: Sequence[Sequence[str]]) -> tuple[list[Tree], int]:
    """(a tree per model output over its sentence's words, how many outputs needed repair)."""
    trees, repaired = [], 0
    for output, words in zip(outputs, sentences):
        tree, was_repaired = delinearise(output.split(), words)
        trees.append(tree)
        repaired += was_repaired
    return trees, repaired


def score(gold: Sequence[Tree], test: Sequence[Tree], params: EvalbParams) -> Report:
    """EVALB over the pairs; it counts errors instead of stopping at MAX_ERROR (an early checkpoint
    may mis-tag punctuation often)."""
    return evaluate([str(t) for t in gold], [str(t) for t in test], params, stop_after_max_error=False)


def with_gold_tags(parse: Tree, gold: Tree) -> Tree:
    """A copy of `parse` whose words carry the gold tree's POS tags (both have the same words)."""
    tags = iter(gold.tags())

    def copy(node: Tree) -> Tree:
        if node.is_preterminal:
            return Tree(next(tags), word=node.word)
        return Tree(node.label, [copy(child) for child in node.children])
    return copy(parse)


def tagging_accuracy(parses: Sequence[Tree], gold: Sequence[Tree]) -> float:
    """Percentage of all words (punctuation included) whose predicted POS tag is the gold one."""
    pairs = [(p, g) for parse, tree in zip(parses, gold) for p, g in zip(parse.tags(), tree.tags())]
    return 100.0 * sum(p == g for p, g in pairs) / max(len(pairs), 1)


def baseline(gold: Sequence[Tree]) -> list[Tree]:
    """The right-branching tree of each gold sentence, with its gold POS tags."""
    return [right_branching(tree.words(), tree.tags()) for tree in gold]


def compare(reports: dict[str, Report]) -> str:
    """The EVALB summaries of several systems in columns, for all sentences and those <= the cut-off."""
    names = list(reports)
    first = reports[names[0]]
    lines = [f"{'':26}" + "".join(f"{name:>17}" for name in names)]
    for title, part in (("All", "all"), (f"len<={first.params.cutoff_len}", "short")):
        lines.append(f"-- {title} --")
        summaries = [getattr(reports[name], part).summary() for name in names]
        for key in summaries[0]:
            if key == "Tagging accuracy":                 # gold tags on every side: always 100
                continue
            values = [s[key] for s in summaries]
            lines.append(f"{key:<26}" + "".join(f"{v:17d}" if isinstance(v, int) else f"{v:17.2f}"
                                                for v in values))
    return "\n".join(lines)


__all__ = ["read_gold", "parses_from_outputs", "with_gold_tags", "tagging_accuracy", "score", "baseline",
           "compare"]
