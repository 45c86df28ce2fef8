"""Penn Treebank trees (§6.3): the standard removals, tree -> tokens -> tree, repair of any model output."""

import pytest
from hypothesis import given, settings, strategies as st

from train.data.files import shared_data_dir
from train.errors import InputError
from train.parsing.treebank import treebank_files
from train.parsing.trees import Tree, clean, delinearise, linearise, parse_trees, read_trees, right_branching

TREEBANK = shared_data_dir() / "ptb_sample" / "treebank.zip" if shared_data_dir() else None


def parse_one(text: str) -> Tree:
    return next(parse_trees(text, "test"))


def test_clean_removes_empty_elements_emptied_constituents_and_function_tags():
    # The EVALB README's example (§7.1) with function tags, an index and a '=' coindex added.
    raw = parse_one("( (S (NP-SBJ-1 (NNP Vinken)) (VP (VBD reported) (SBAR (-NONE- 0) (S (-NONE- *T*-1)))) "
                    "(PP-LOC=2 (IN in) (NP (-LRB- -LRB-) (NNP May) (-RRB- -RRB-))) (. .)) )")
    assert str(clean(raw)) == ("(TOP (S (NP (NNP Vinken)) (VP (VBD reported)) "
                               "(PP (IN in) (NP (-LRB- -LRB-) (NNP May) (-RRB- -RRB-))) (. .)))")
    assert str(clean(parse_one("(S (NN x))"))) == "(TOP (S (NN x)))"      # no root bracket: TOP added
    assert clean(parse_one("( (S (-NONE- *)) )")) is None


def test_linearise_writes_labelled_brackets_around_the_words():
    tree = clean(parse_one("( (S (NP-SBJ (NNP Ms.) (NNP Haag)) (VP (VBZ plays) (NP (NNP Elianti))) (. .)) )"))
    assert " ".join(linearise(tree)) == "(S (NP Ms. Haag )NP (VP plays (NP Elianti )NP )VP . )S"
    back, repaired = delinearise(linearise(tree), tree.words(), tree.tags())
    assert str(back) == str(tree) and not repaired
    untagged, _ = delinearise(linearise(tree), tree.words())                  # no tags known: XX, punctuation's own
    assert str(untagged) == "(TOP (S (NP (XX Ms.) (XX Haag)) (VP (XX plays) (NP (XX Elianti))) (. .)))"
    odd = Tree("TOP", [Tree("S", [Tree("NN", word="(x"), Tree("NN", word=")y")])])
    assert linearise(odd) == ["(S", "XX", "XX", ")S"]                       # never mistaken for brackets
    assert str(delinearise(linearise(odd), ["(x", ")y"], ["NN", "NN"])[0]) == str(odd)


@pytest.mark.skipif(TREEBANK is None, reason="../shared/data (the PTB sample) is not here")
def test_tree_to_tokens_to_tree_is_the_identity_on_every_sample_tree():
    n = 0
    for name, data in treebank_files(TREEBANK, 1, 199):
        for raw in read_trees(data, name):
            tree = clean(raw)
            back, repaired = delinearise(linearise(tree), tree.words(), tree.tags())
            assert str(back) == str(tree) and not repaired, name
            assert str(clean(parse_one(str(tree)))) == str(tree)           # cleaning twice changes nothing
            n += 1
    assert n == 3914                                                         # the sample's size (data README)


def test_repair_places_every_word_once():
    words, tags = ["The", "cat", "sat", "."], ["DT", "NN", "VBD", "."]
    well_formed = "(TOP (S (NP (DT The) (NN cat)) (VP (VBD sat)) (. .)))"

    def repair(tokens: str) -> tuple[str, bool]:
        tree, repaired = delinearise(tokens.split(), words, tags)
        return str(tree), repaired

    assert repair("(S (NP The cat )NP (VP sat )VP . )S") == (well_formed, False)
    assert repair("(S (NP ⁇ cat )NP (VP x )VP y )S") == (well_formed, False)  # a word token stands for the next word
    assert repair("(S (NP The cat") == ("(TOP (S (NP (DT The) (NN cat) (VBD sat) (. .))))", True)
    assert repair("(S (NP The cat )NP (VP sat )VP . )S )S )S") == (well_formed, True)
    assert repair("(S (NP The cat )NP (VP sat )VP . cat )S") == (well_formed, True)
    assert repair("(S (NP The cat )VP (VP sat )VP . )S") == (well_formed, True)
    assert repair("(S (NP The cat )NP (VP sat (NP )NP )VP . )S") == (well_formed, True)
    assert repair("(S (NP The cat )NP ( (VP sat )VP . )S") == (well_formed, True)
    assert repair("") == ("(TOP (DT The) (NN cat) (VBD sat) (. .))", True)


TOKENS = st.sampled_from(["(S", "(NP", "(VP", "(", ")", ")S", ")NP", ")XX", "the", "cat", ".", ",", "XX",
                          "(NP-SBJ", "(-", "N(N", "((", "))", "(S)", "", "a b", "⁇"])
WORDS = st.lists(st.sampled_from(["the", "cat", ".", ",", "--", "sat", "''", "x"]), max_size=8)


@settings(max_examples=300)
@given(st.lists(TOKENS, max_size=30), WORDS)
def test_any_token_sequence_repairs_to_a_valid_tree_over_the_words(tokens, words):
    tree, repaired = delinearise(tokens, words)
    assert tree.label == "TOP" and tree.words() == words
    stack = [tree]
    while stack:                                     # every constituent has words; labels are symbols
        node = stack.pop()
        assert node.label and not any(c in node.label for c in "() ")
        if not node.is_preterminal:
            assert node.children or node is tree
            stack.extend(node.children)
    if words:
        reread = clean(parse_one(str(tree)))
        assert str(reread) == str(tree)              # what we write is a tree the reader (and EVALB) accepts
        assert linearise(reread) == linearise(tree)
    if not repaired:
        assert delinearise(linearise(tree), words)[0].words() == words


def test_right_branching_baseline_brackets_every_suffix():
    def spans(tree, start=0):
        if tree.is_preterminal:
            return [], start + 1
        found, end = [], start
        for child in tree.children:
            inner, end = spans(child, end)
            found += inner
        return [(tree.label, start, end)] + found, end

    for n in range(1, 6):
        words = [f"w{i}" for i in range(n)]
        tree = right_branching(words, ["NN"] * n)
        assert tree.words() == words
        brackets = spans(tree)[0][1:]                # without TOP
        expected = [("S", 0, n)] + [("VP", i, n) for i in range(1, n - 1)]
        assert brackets == expected


@pytest.mark.parametrize("text, message", [
    ("( (S (NN x)) ))\n", "bad.mrg:1: unbalanced brackets: ')' closes no open '('"),
    ("\n( (S\n  (NN x)\n", "bad.mrg:2: unbalanced brackets: the '(' opened here is never closed"),
    ("", "bad.mrg:1: empty file: no trees"),
    ("  \n\n", "bad.mrg:1: empty file: no trees"),
    ("( (S (NN x)) )\nstray\n", "bad.mrg:2: 'stray' is outside any bracket"),
    ("( (S (NN x y)) )", "bad.mrg:1: (NN ...) mixes words and constituents"),
    ("( (S (NP )) )", "bad.mrg:1: (NP) is empty"),
])
def test_bad_tree_files_are_one_line_errors_with_file_and_line(tmp_path, text, message):
    path = tmp_path / "bad.mrg"
    path.write_text(text)
    with pytest.raises(InputError) as err:
        read_trees(path, "bad.mrg")
    assert str(err.value).startswith(message) and "\n" not in str(err.value)
