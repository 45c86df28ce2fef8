"""Penn Treebank trees for §6.3 parsing: read `.mrg` files, the standard removals, and the
tree <-> token sequence mapping that turns parsing into translation.

§6.3 trains the Transformer to translate a sentence's words into its parse tree, written
as a token sequence in the style of Vinyals et al. 2015 ("Grammar as a Foreign Language"):

    (TOP (S (NP (NNP Ms.) (NNP Haag)) (VP (VBZ plays) (NP (NNP Elianti))) (. .)))
    words:  Ms. Haag plays Elianti .
    tokens: (S (NP Ms. Haag )NP (VP plays (NP Elianti )NP )VP . )S

An opening bracket carries its label, each word stands for itself (so the model can find
its place in the source by copying; Vinyals et al. wrote XX, tensor2tensor the POS tag),
and a closing bracket repeats its label. TOP is implied; POS tags are not in the sequence.
`delinearise` is the inverse given the words (and their tags, where known); it accepts any
token sequence a model may produce and repairs it into a valid tree over the words.

The standard removals (`clean`): `-NONE-` empty elements go, with every constituent
left empty by that; function tags and indices are stripped from phrase labels
(NP-SBJ-1 -> NP, PP-LOC=2 -> PP); POS tags are kept as they are (EVALB scores them).
The unlabelled root of a treebank file becomes TOP, which EVALB's COLLINS.prm deletes.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from train.errors import InputError

EMPTY_TAG = "-NONE-"
ROOT = "TOP"
FALLBACK_TAG = "XX"  # the tag of a word whose tag is not known (Vinyals et al.'s placeholder)
# Words whose PTB tag is certain, so that without known tags punctuation still gets the tag
# by which EVALB's COLLINS.prm deletes it.
PUNCTUATION_TAGS = {",": ",", ".": ".", "?": ".", "!": ".", ":": ":", ";": ":", "--": ":", "...": ":",
                    "``": "``", "`": "``", "''": "''", "$": "$", "#": "#", "-LRB-": "-LRB-",
                    "-RRB-": "-RRB-", "-LCB-": "-LRB-", "-RCB-": "-RRB-"}


@dataclass
class Tree:
    """A constituent: `label` and `children`; a preterminal has a POS tag as label and a `word`."""

    label: str
    children: list[Tree] = field(default_factory=list)
    word: str | None = None

    @property
    def is_preterminal(self) -> bool:
        return self.word is not None

    def preterminals(self) -> Iterator[Tree]:
        """The (tag, word) nodes from left to right."""
        stack = [self]
        while stack:
            node = stack.pop()
            if node.is_preterminal:
                yield node
            else:
                stack.extend(reversed(node.children))

    def words(self) -> list[str]:
        return [leaf.word for leaf in self.preterminals()]

    def tags(self) -> list[str]:
        return [leaf.label for leaf in self.preterminals()]

    def __str__(self) -> str:
        """One line in the format EVALB reads: (TOP (S (NP (NNP Ms.) (NNP Haag)) ...))."""
        return " ".join(_bracket_tokens(self, lambda node: f"({node.label} {node.word})",
                                        lambda node: f"({node.label}", lambda node: ")")).replace(" )", ")")


def _bracket_tokens(tree: Tree, leaf, opening, closing) -> Iterator[str]:
    """Depth-first tokens of a tree (iterative, so deep trees cannot hit the recursion limit)."""
    stack: list[tuple[Tree, bool]] = [(tree, False)]
    while stack:
        node, closed = stack.pop()
        if node.is_preterminal:
            yield leaf(node)
        elif closed:
            yield closing(node)
        else:
            yield opening(node)
            stack.append((node, True))
            stack.extend((child, False) for child in reversed(node.children))


# ---------------------------------------------------------------- reading
def _lexemes(text: str) -> Iterator[tuple[str, int]]:
    """'(', ')' and atoms with their line numbers (from 1)."""
    line, atom, atom_line = 1, [], 1
    for char in text:
        if char in "() \t\r\n\f\v":
            if atom:
                yield "".join(atom), atom_line
                atom = []
            if char in "()":
                yield char, line
            line += char == "\n"
        else:
            if not atom:
                atom_line = line
            atom.append(char)
    if atom:
        yield "".join(atom), atom_line


def parse_trees(text: str, where: str) -> Iterator[Tree]:
    """Every bracketed tree in `text`, as written (no removals); `where` names the source in errors.

    Problems are InputErrors naming `where` and the line: a ')' that closes nothing, a '('
    never closed, a word outside any bracket, a bracket with no content, or words mixed
    with constituents.
    """
    stack: list[tuple[Tree, int, list[str]]] = []        # open nodes: (node, line opened, its atoms)
    expect_label = False
    n_trees = 0
    for lexeme, line in _lexemes(text):
        if lexeme == "(":
            node = Tree("")
            if stack:
                stack[-1][0].children.append(node)
            stack.append((node, line, []))
            expect_label = True
        elif lexeme == ")":
            if not stack:
                raise InputError(f"{where}:{line}: unbalanced brackets: ')' closes no open '('")
            node, opened, atoms = stack.pop()
            _finish(node, atoms, where, opened)
            if not stack:
                n_trees += 1
                yield node
            expect_label = False
        elif not stack:
            raise InputError(f"{where}:{line}: {lexeme!r} is outside any bracket")
        elif expect_label:
            stack[-1][0].label = lexeme
            expect_label = False
        else:
            stack[-1][2].append(lexeme)
    if stack:
        raise InputError(f"{where}:{stack[0][1]}: unbalanced brackets: the '(' opened here is never closed")
    if n_trees == 0:
        raise InputError(f"{where}:1: empty file: no trees")


def _finish(node: Tree, atoms: list[str], where: str, line: int) -> None:
    if atoms and (node.children or len(atoms) > 1):
        raise InputError(f"{where}:{line}: ({node.label} ...) mixes words and constituents; "
                         f"a word must be alone under its POS tag")
    if atoms:
        node.word = atoms[0]
    elif not node.children:
        raise InputError(f"{where}:{line}: ({node.label}) is empty")


def read_trees(source: str | Path | bytes, where: str | None = None) -> list[Tree]:
    """The trees of a file (a path, or its bytes), as written; errors name `where` (default: the path)."""
    where = where if where is not None else str(source)
    if isinstance(source, bytes):
        data = source
    elif Path(source).is_file():
        data = Path(source).read_bytes()
    else:
        raise InputError(f"{where}: file not found")
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as err:
        line = data[:err.start].count(b"\n") + 1
        raise InputError(f"{where}:{line}: not valid UTF-8") from None
    return list(parse_trees(text, where))


# ---------------------------------------------------------------- the standard removals
def strip_function_tags(label: str) -> str:
    """NP-SBJ-1 -> NP, PP-LOC=2 -> PP, S=3 -> S; labels that start with '-' (-NONE-) are kept."""
    if label.startswith("-"):
        return label
    for i, char in enumerate(label):
        if char in "-=":
            return label[:i]
    return label


def clean(tree: Tree) -> Tree | None:
    """A copy with TOP as root, no -NONE- elements or emptied constituents, and phrase labels
    without function tags; None when nothing is left (a tree of empty elements only)."""
    if tree.label in ("", ROOT):
        root = Tree(ROOT, tree.children)
    else:
        root = Tree(ROOT, [tree])                   # a tree written without the root bracket
    return _clean(root)


def _clean(node: Tree) -> Tree | None:
    if node.is_preterminal:
        return None if node.label == EMPTY_TAG else Tree(node.label, word=node.word)
    children = [c for c in (_clean(child) for child in node.children) if c is not None]
    return Tree(strip_function_tags(node.label), children) if children else None


# ---------------------------------------------------------------- linearisation
def linearise(tree: Tree) -> list[str]:
    """The target tokens of a TOP-rooted tree: '(X' opens X, each word stands for itself, ')X' closes X.

    A word that starts with a bracket (the PTB writes them -LRB- and -RRB-) is written XX,
    so that it cannot be read as one; `delinearise` puts the word back from the source.
    """
    tokens = []
    for child in tree.children:
        tokens += _bracket_tokens(child, lambda node: FALLBACK_TAG if node.word[0] in "()" else node.word,
                                  lambda node: "(" + node.label, lambda node: ")" + node.label)
    return tokens


def delinearise(tokens: Sequence[str], words: Sequence[str],
                tags: Sequence[str] | None = None) -> tuple[Tree, bool]:
    """(the tree over `words` that `tokens` describe, whether it needed repair).

    Every token that is not a bracket stands for the next word, whatever it says (a model
    may write ⁇ for a word outside its vocabulary); the word gets its tag from `tags`, or
    without them the tag its punctuation fixes, else XX. Repairs, so that any token
    sequence gives a valid tree whose words are exactly `words`:
    - a closing token closes the innermost open bracket whatever its label; one with
      nothing open is dropped; brackets still open at the end are closed;
    - word tokens beyond the last word are dropped; words left over join the innermost
      bracket open at the end (or the last top-level constituent);
    - an opening token without a usable label (empty, or with a bracket in it) is dropped;
    - constituents that end up without words are removed.
    """
    tags = list(tags) if tags is not None else [fallback_tag(word) for word in words]
    root = Tree(ROOT)
    stack, position, repaired = [root], 0, False
    for token in tokens:
        if token.startswith("("):
            label = strip_function_tags(token[1:])
            if not _is_symbol(label):
                repaired = True
                continue
            node = Tree(label)
            stack[-1].children.append(node)
            stack.append(node)
        elif token.startswith(")"):
            if len(stack) == 1:
                repaired = True
                continue
            repaired |= token[1:] not in ("", stack.pop().label)
        elif position < len(words):
            stack[-1].children.append(Tree(tags[position], word=words[position]))
            position += 1
        else:
            repaired = True
    repaired |= len(stack) > 1 or position < len(words)
    home = stack[-1] if len(stack) > 1 else _last_constituent(root)
    home.children += [Tree(tag, word=word) for word, tag in zip(words[position:], tags[position:])]
    pruned = _clean(root) or Tree(ROOT)               # an empty TOP only when there are no words
    return pruned, repaired or str(pruned) != str(root)


def fallback_tag(word: str) -> str:
    return PUNCTUATION_TAGS.get(word, FALLBACK_TAG)


def _is_symbol(text: str) -> bool:
    return bool(text) and not any(char in "() \t\r\n\f\v" for char in text)


def _last_constituent(root: Tree) -> Tree:
    last = root.children[-1] if root.children else None
    return last if last is not None and not last.is_preterminal else root


def right_branching(words: Sequence[str], tags: Sequence[str]) -> Tree:
    """The right-branching baseline: (TOP (S w1 (VP w2 (VP w3 ... (VP wn-1 wn))))) with the given tags.

    Every span that ends at the last word is a bracket. Labelled S at the root and VP below,
    the labels an English right-branching spine most often has: EVALB scores labelled
    brackets, so some label must be chosen.
    """
    leaves = [Tree(tag, word=word) for word, tag in zip(words, tags)]
    if not leaves:
        return Tree(ROOT)
    node = leaves[-1]
    for leaf in reversed(leaves[1:-1]):
        node = Tree("VP", [leaf, node])
    return Tree(ROOT, [Tree("S", leaves[:1] + ([node] if len(leaves) > 1 else []))])


__all__ = ["Tree", "parse_trees", "read_trees", "clean", "strip_function_tags", "linearise", "delinearise",
           "right_branching", "fallback_tag"]
