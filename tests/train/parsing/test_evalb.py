"""train/parsing/evalb.py against EVALB itself: its worked example (sample.rsl), its parameter files,
and the rules of its README, each checked by hand or by an independent span count."""

import re
from collections import Counter

import pytest

from train.data.files import shared_data_dir
from train.errors import InputError
from train.parsing.evalb import COLLINS, EvalbParams, evaluate, read_lines, score_sentence
from train.parsing.treebank import treebank_files
from train.parsing.trees import clean, read_trees, right_branching

EVALB = shared_data_dir() / "evalb" if shared_data_dir() else None
needs_evalb = pytest.mark.skipif(EVALB is None, reason="../shared/data/evalb is not here")


def sample_report():
    sample = EVALB / "sample"
    params = EvalbParams.read(sample / "sample.prm")
    return evaluate(read_lines(sample / "sample.gld"), read_lines(sample / "sample.tst"), params)


@needs_evalb
def test_per_sentence_table_reproduces_sample_rsl_line_for_line():
    expected = (EVALB / "sample" / "sample.rsl").read_text().splitlines()
    got = sample_report().format().splitlines()
    assert got[:3 + 24 + 1] == expected[:3 + 24 + 1]           # header, 24 rows, the rule under them
    # The totals line: sample.rsl comes from the 1997 evalb, which printed other column widths and,
    # in the crossing column, the number of sentences without crossing (16 of 17); the current evalb
    # (and we) print the crossing brackets there (1, sentence 6). Every other number must agree.
    old, new = expected[28].split(), got[28].split()
    assert old[:5] + old[6:] == new[:5] + new[6:]
    assert int(old[5]) == sample_report().all.no_crossing == 16 and int(new[5]) == 1


@needs_evalb
def test_summary_reproduces_sample_rsl_to_two_decimals():
    blocks = (EVALB / "sample" / "sample.rsl").read_text().split("-- len<=40 --")
    report = sample_report()
    for block, totals in zip(blocks, (report.all, report.short)):
        expected = dict(re.findall(r"^(\S.*?)\s*=\s*(\S+)$", block.split("-- All --")[-1], re.M))
        assert len(expected) == 11                             # the 1997 summary has no F-measure line
        got = totals.summary()
        for key, value in expected.items():
            assert f"{got[key.strip()]:.2f}" == f"{float(value):.2f}", key
    assert (report.all.recall, report.all.precision) == (pytest.approx(87.755, abs=0.005),
                                                          pytest.approx(90.526, abs=0.005))


@needs_evalb
def test_parameter_files_are_read_as_evalb_reads_them():
    assert EvalbParams.read(EVALB / "COLLINS.prm") == COLLINS
    nk = EvalbParams.read(EVALB / "nk.prm")
    assert nk.max_error == 10000 and "S1" in nk.delete_labels and nk.quote_labels[:3] == ("``", "''", "POS")
    sample = EvalbParams.read(EVALB / "sample" / "sample.prm")
    assert sample.eq_labels == (("T", "TT"),) and sample.eq_words == (("This", "this"),)
    assert "." not in sample.delete_labels


def test_bad_parameter_file_names_file_and_line(tmp_path):
    prm = tmp_path / "bad.prm"
    prm.write_text("# comment\nLABELED 1\nDELETE_LABLE TOP\n")
    with pytest.raises(InputError, match=r"bad.prm:3: unknown EVALB parameter 'DELETE_LABLE'"):
        EvalbParams.read(prm)


def test_repeated_brackets_match_min_of_gold_and_test_counts():
    # EVALB README, section [7] item 5: n gold and m test copies of (NP over the same span) -> min(n, m) match.
    gold = "(TOP (S (NP (NP (DT the) (NN man))) (VP (VBD left))))"
    for test, matched, test_brackets in [("(TOP (S (NP (DT the) (NN man)) (VP (VBD left))))", 3, 3),
                                         ("(TOP (S (NP (NP (NP (DT the) (NN man)))) (VP (VBD left))))", 4, 5)]:
        result = score_sentence(gold, test)
        assert (result.matched, result.gold_brackets, result.test_brackets) == (matched, 4, test_brackets)


def test_collins_settings_delete_punctuation_cut_function_tags_and_equate_advp_prt():
    gold = "(TOP (S (NP-SBJ (PRP He)) (VP (VBD gave) (PRT (RP up))) (. .)))"
    test = "(TOP (S (NP (PRP He)) (VP (VBD gave) (ADVP (RB up))) (. .)))"
    result = score_sentence(gold, test)
    assert result.row() == "   1    4    0  100.00 100.00     4      4    4      0      3     2    66.67"
    unlabelled = score_sentence(gold, test.replace("ADVP", "QP"), EvalbParams(labeled=False))
    assert unlabelled.matched == unlabelled.gold_brackets == 5        # TOP counts without DELETE_LABEL


def test_quote_labels_put_back_a_quote_one_side_deleted():
    # nk.prm's QUOTE_LABEL: gold tags the quote '' (deleted punctuation), the parser POS (kept).
    # evalb puts the quote back into the gold sentence, shifting the brackets after it, instead
    # of calling the lengths different. Worked by hand: gold S(0,3) NP(0,2) VP(2,3), test S(0,3)
    # NP(0,2) VP(2,3) -> all 3 match; tags: 2 of 3 words (the quote's '' vs POS) agree.
    params = EvalbParams(delete_labels=("TOP", "''"), quote_labels=("''", "POS"))
    gold = "(TOP (S (NP (NNS dogs) ('' ')) (VP (VBP run))))"
    test = "(TOP (S (NP (NNS dogs) (POS ')) (VP (VBP run))))"
    result = score_sentence(gold, test, params)
    assert (result.status, result.matched, result.gold_brackets, result.words, result.correct_tags) == (0, 3, 3, 3, 2)
    assert score_sentence(gold, test, EvalbParams(delete_labels=("TOP", "''"))).errors == ("Length unmatch (2|3)",)


def reference_brackets(tree):
    """Labelled spans by hand, the COLLINS way: punctuation words out, TOP and empty spans out."""
    spans, stack, position = Counter(), [(tree, False, 0)], 0
    while stack:
        node, closing, start = stack.pop()
        if node.is_preterminal:
            position += node.label not in COLLINS.delete_labels
        elif closing:
            if node.label != "TOP" and position > start:
                spans[(start, position, node.label)] += 1
        else:
            stack.append((node, True, position))
            stack.extend((child, False, 0) for child in reversed(node.children))
    return spans


@pytest.mark.skipif(EVALB is None, reason="../shared/data is not here")
def test_bracket_counts_agree_with_an_independent_span_count_on_the_sample_test_split():
    gold = [clean(t) for name, data in treebank_files(shared_data_dir() / "ptb_sample" / "treebank.zip", 190, 199)
            for t in read_trees(data, name)]
    test = [right_branching(t.words(), t.tags()) for t in gold]
    report = evaluate([str(t) for t in gold], [str(t) for t in test])
    assert report.all.errors == report.all.skipped == 0
    for tree, prediction, row in zip(gold, test, report.rows):
        g, p = reference_brackets(tree), reference_brackets(prediction)
        g = Counter({(s, e, "ADVP" if label == "PRT" else label): n for (s, e, label), n in g.items()})
        assert (row.gold_brackets, row.test_brackets, row.matched) == (sum(g.values()), sum(p.values()),
                                                                      sum((g & p).values()))


def test_evalb_stops_after_max_error_like_evalb(tmp_path):
    gold = ["(TOP (S (NN a)))"] * 5
    test = ["(TOP (S (NN b)))"] * 5
    with pytest.raises(InputError, match=r"test:4: more than MAX_ERROR = 2 errors"):
        evaluate(gold, test, EvalbParams(max_error=2))
    assert evaluate(gold, test, EvalbParams(max_error=2), stop_after_max_error=False).all.errors == 5


def test_lines_evalb_cannot_read_are_errors_naming_the_file_and_line():
    with pytest.raises(InputError, match=r"^sys.tst:2: 'stray' is outside any bracket$"):
        evaluate(["(S (NN a))"] * 2, ["(S (NN a))", "(S (NN a)) stray"], where=("gold.txt", "sys.tst"))
    with pytest.raises(InputError, match=r"^gold.txt:1: more than two elements in the bracket \(NN a \.\.\.\)$"):
        evaluate(["(S (NN a b))"], ["(S (NN a))"], where=("gold.txt", "sys.tst"))
    unbalanced = score_sentence("(S (NN a)))", "(S (NN a))")
    assert unbalanced.status == 1 and unbalanced.errors == ("Bracketing unbalance (too many close bracket)",)
