"""train/parsing/evalb.py against EVALB itself: its worked example (sample.rsl), its parameter files,
the rules of its README (checked by hand or by an independent span count), and what the compiled
evalb.c prints on malformed lines and error counts.

Two programs are the truth here, and each test says which:
- "sample.rsl (evalb, 1997)": EVALB's own worked example, ../shared/data/evalb/sample/sample.rsl.
- "evalb.c (2006)": the current evalb.c (Sekine & Collins, 2006 revision; the copy in
  nikitakit/self-attentive-parser, EVALB/evalb.c), compiled with gcc and run as
  `evalb -p COLLINS.prm GOLD TEST` on the lines in the test; its stdout, stderr and exit status
  were copied here. The binary is not needed to run these tests.
"""

import re
from collections import Counter

import pytest

from train.data.files import shared_data_dir
from train.errors import InputError
from train.__main__ import main
from train.parsing.evalb import COLLINS, EvalbParams, EvalbStopped, evaluate, read_lines, score_sentence
from train.parsing.treebank import treebank_files
from train.parsing.trees import clean, read_trees, right_branching

EVALB = shared_data_dir() / "evalb" if shared_data_dir() else None
needs_evalb = pytest.mark.skipif(EVALB is None, reason="../shared/data/evalb is not here")


def sample_report():
    sample = EVALB / "sample"
    params = EvalbParams.read(sample / "sample.prm")
    return evaluate(read_lines(sample / "sample.gld"), read_lines(sample / "sample.tst"), params)


@needs_evalb
def test_1997_layout_reproduces_sample_rsl_byte_for_byte():
    # sample.rsl (evalb, 1997): every line, the totals line's widths and its crossing column
    # (16 = sentences without a crossing bracket) included.
    assert sample_report().format("1997") == (EVALB / "sample" / "sample.rsl").read_text()


@needs_evalb
def test_default_2006_layout_prints_the_sample_as_evalb_c_does():
    # evalb.c (2006) on sample.gld / sample.tst with sample.prm differs from sample.rsl (1997) in
    # exactly these places: Words 0 on the rows it did not compare (Skip 11, 14; Length or
    # Words unmatch 12, 13, 16, 17, 20), its totals line, and an F-measure line per block.
    expected = (EVALB / "sample" / "sample.rsl").read_text().splitlines()
    for k in (11, 12, 13, 14, 16, 17, 20):
        expected[2 + k] = expected[2 + k][:-22] + "      0     0     0.00"
    expected[28] = "                 87.76  90.53     86    98    95      1    108   106    98.15"
    expected.insert(38, "Bracketing FMeasure       =  89.12")
    expected.insert(52, "Bracketing FMeasure       =  83.20")
    report = sample_report()
    assert report.format().splitlines() == expected
    assert report.messages == ["12 : Words unmatch (is|was)", "13 : Length unmatch (4|5)", "16 : Length unmatch (4|5)",
                               "17 : Length unmatch (4|6)", "20 : Words unmatch (this|That)"]   # evalb.c's stderr


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


def test_lines_evalb_cannot_read_stop_it_naming_the_file_and_line():
    # evalb.c (2006): a word outside any bracket, or two words in one, loops on "Reading sentence" until
    # MAX_ERROR and exits 1; we stop at once, with the file and line.
    with pytest.raises(EvalbStopped, match=r"^sys.tst:2: 'stray' is outside any bracket \(evalb stops here\)$"):
        evaluate(["(S (NN a))"] * 2, ["(S (NN a))", "(S (NN a)) stray"], where=("gold.txt", "sys.tst"))
    with pytest.raises(EvalbStopped, match=r"^gold.txt:1: more than two elements in the bracket \(NN a \.\.\.\)"):
        evaluate(["(S (NN a b))"], ["(S (NN a))"], where=("gold.txt", "sys.tst"))


GOLD_2 = ["(S (NP (DT a)) (VP (VBZ is) (ADJP (JJ good))))", "(S (NP (DT b)) (VP (VBZ is)))"]
ROW_2 = "   2    2    0  100.00 100.00     3      3    3      0      2     2   100.00"


def test_a_test_line_cut_off_mid_tree_is_an_error_sentence_as_evalb_c_scores_it():
    # evalb.c (2006), COLLINS.prm, exit 0: the line cut after "(VP " is an Error sentence, with three
    # errors (past the line's end it reads what its buffer still holds of the gold line, here no
    # "word)", then finds the bracket open, then a length mismatch); the rest is scored as usual.
    report = evaluate(GOLD_2, ["(S (NP (DT a)) (VP ", GOLD_2[1]])
    assert [row.row() for row in report.rows] == [
        "   1    3    1    0.00   0.00     0      0    0      0      0     0     0.00", ROW_2]
    assert report.messages == ["1 : More than two elements in a bracket",
                               "1 : Bracketing is unbalanced (too many open bracket)", "1 : Length unmatch (3|1)"]
    assert (report.all.errors, report.all.valid, report.all.f1) == (1, 1, 100.0)


def test_unbalanced_test_lines_are_error_sentences_scored_as_far_as_they_go_as_evalb_c_does():
    # evalb.c (2006), COLLINS.prm, exit 0 for each. Cut after a whole word: the brackets left open
    # end at -1, so only NP matches, and the sentence is an Error (not in the totals).
    cut = evaluate(GOLD_2[:1], ["(S (NP (DT a)) (VP (VBZ is) (ADJP (JJ good)"])
    assert cut.rows[0].row() == "   1    3    1   25.00  25.00     1      4    4      0      3     3   100.00"
    assert cut.messages == ["1 : Bracketing is unbalanced (too many open bracket)"]
    # One ')' too many: the same message (evalb's stack pointer ends at -1); two: its "too many close" first.
    extra = evaluate([GOLD_2[1]] * 2, [GOLD_2[1] + ")", GOLD_2[1] + "))"])
    assert [row.row()[:16] for row in extra.rows] == ["   1    2    1  ", "   2    2    1  "]
    assert extra.messages == ["1 : Bracketing is unbalanced (too many open bracket)",
                              "2 : Bracketing unbalance (too many close bracket)",
                              "2 : Bracketing is unbalanced (too many open bracket)"]
    # A ')' too many in the middle: evalb's stack[-1] is its stack pointer, 0, so it closes the first
    # bracket (S) where the last ')' stands: S spans both words again and all three brackets match.
    middle = evaluate([GOLD_2[1]], ["(S (NP (DT b))) (VP (VBZ is)))"])
    assert middle.rows[0].row() == "   1    2    1  100.00 100.00     3      3    3      0      2     2   100.00"


def test_a_line_cut_inside_a_word_bracket_stops_evalb_and_us():
    # evalb.c (2006): "(VBZ is" then the line's end: "More than two elements in a bracket", then
    # "Reading sentence" until MAX_ERROR, exit 1, after printing the rows before it.
    with pytest.raises(EvalbStopped) as stop:
        evaluate(GOLD_2[::-1], [GOLD_2[1], "(S (NP (DT a)) (VP (VBZ is"], where=("g", "t"))
    assert str(stop.value).startswith("t:2: more than two elements in the bracket (VBZ is ...)")
    assert [row.row() for row in stop.value.report.rows] == [ROW_2.replace("   2", "   1", 1)]


WRONG_WORD = ("(S (NN a))", "(S (NN b))")
C_ROW_ERROR = "    1    1    0.00   0.00     0      0    0      0      0     0     0.00"


def test_lines_unmatch_count_toward_max_error_as_in_evalb_c():
    # evalb.c (2006), COLLINS.prm (MAX_ERROR 10): it exits (status 1) at its 12th error. 11 word
    # mismatches and one test line too many: the 12th is "Number of lines unmatch"; stdout holds the
    # header and the 11 rows, no totals.
    gold, test = [WRONG_WORD[0]] * 11, [WRONG_WORD[1]] * 11
    with pytest.raises(EvalbStopped, match=r"^test:12: more than MAX_ERROR = 10 errors") as stop:
        evaluate(gold, test + [WRONG_WORD[0]])
    report = stop.value.report
    assert report.format().splitlines()[3:] == [f"{k:4d}{C_ROW_ERROR}" for k in range(1, 12)]
    assert report.messages[-2:] == ["11 : Words unmatch (a|b)",
                                    "12 : Number of lines unmatch (too many lines in test file)"]
    # 12 mismatched lines: the 12th error is line 12's; its row is not printed.
    with pytest.raises(EvalbStopped, match=r"^test:12: ") as stop:
        evaluate(gold + [WRONG_WORD[0]], test + ["(S (NN c))"])
    assert len(stop.value.report.rows) == 11 and stop.value.report.messages[-1] == "12 : Words unmatch (a|c)"
    # 11 errors and nothing more: evalb prints its totals (exit 0), as we do.
    assert evaluate(gold, test).all.errors == 11
    # One gold line too many (the 12th error): evalb stops too, naming the gold file.
    with pytest.raises(EvalbStopped, match=r"^gold:12: "):
        evaluate(gold + [WRONG_WORD[0]], test)


def test_undefined_f_measure_prints_as_evalb_c_does():
    # evalb.c (2006): one Error sentence, so recall = precision = 0 and F = 0/0, printed "-nan";
    # the totals line holds only the word columns. sample.rsl's layout (1997) has no F-measure line.
    report = evaluate([GOLD_2[0]], ["(S (NP (DT a)) (VP (VBZ are) (ADJP (JJ good))))"])
    lines = report.format().splitlines()
    assert lines[3:6] == ["   1    3" + C_ROW_ERROR[5:], "=" * 76, "      0     0     0.00"]
    assert lines.count("Bracketing FMeasure       =   -nan") == 2
    assert "FMeasure" not in report.format("1997")


def test_evalb_command_prints_what_evalb_c_prints_then_one_error_line(tmp_path, capsys):
    gold, test = tmp_path / "gold.txt", tmp_path / "test.txt"
    gold.write_text("\n".join([WRONG_WORD[0]] * 11) + "\n")
    test.write_text("\n".join([WRONG_WORD[1]] * 11 + [WRONG_WORD[0]]) + "\n")
    assert main(["evalb", str(gold), str(test)]) == 2
    out, err = capsys.readouterr()
    assert out.splitlines()[-1] == f"  11{C_ROW_ERROR}" and "Summary" not in out
    assert err.splitlines()[-2:] == ["12 : Number of lines unmatch (too many lines in test file)",
                                     f"error: {test}:12: more than MAX_ERROR = 10 errors, evalb stops here and prints "
                                     f"no totals (the last: Number of lines unmatch (too many lines in test file))"]
    test.write_text("\n".join([WRONG_WORD[1]] * 11) + "\n")
    assert main(["evalb", str(gold), str(test), "--layout", "1997"]) == 0
    out, _ = capsys.readouterr()
    assert f"  11    1    1    0.00   0.00     0      0    0      0      1     0     0.00" in out   # gold's word
