"""EVALB in Python: labelled bracket recall, precision and F1 the way the parsing literature
(and §6.3's Table 4) computes them, reproducing Sekine & Collins' `evalb` line for line.

How evalb scores a (gold line, test line) pair, step by step (sections [6] and [7] of the EVALB README):
1. Read each line as brackets. A terminal `(TAG word)` whose TAG is a DELETE_LABEL
   (COLLINS.prm: punctuation , : `` '' . and -NONE-) is dropped with its word; the
   sentence length for the cut-off counts every terminal except DELETE_LABEL_FOR_LENGTH.
2. A test line without words (and not cut off) is a "Skip" sentence. Different word counts (after QUOTE_LABEL
   repairs, nk.prm) or different words (EQ_WORD pairs count as equal) make an "Error"
   sentence. Neither counts in the totals.
3. Constituents: a bracket over no words, or whose label (cut at the first '-' or '=':
   NP-SBJ -> NP) is a DELETE_LABEL (TOP), is deleted; the others are (start, end, label).
4. Each gold bracket matches at most one unmatched test bracket with the same span and,
   with LABELED 1, an equal label (EQ_LABEL pairs are equal, e.g. ADVP = PRT). So with n
   gold and m test copies of a bracket, min(n, m) match.
5. A test bracket crosses when some gold bracket overlaps it without nesting; tagging
   accuracy compares the POS tags of the kept words.
The summary sums matches and bracket counts over valid sentences (recall = matched/gold,
precision = matched/test, F1 = 2PR/(P+R)), once for all sentences and once for those of
length <= CUTOFF_LEN (40).

Errors, as the compiled evalb.c (2006 revision) has them (tests/train/parsing/test_evalb.py
holds its output): every message evalb prints on stderr ("LINE : ...") is one error; a
line it cannot read to the end (a bracket left open, a ')' too many, a line cut off after
"(LABEL") is scored as far as it goes and counts as an Error sentence; at the error that
makes more than MAX_ERROR + 1, "Number of lines unmatch" included, evalb stops (exit 1),
having printed the rows before that sentence and no totals: here that is EvalbStopped, an
InputError that carries those rows. A word outside any bracket, or two in one, makes evalb
print "Reading sentence" until MAX_ERROR and stop: EvalbStopped at once. `Report.format`
prints the 2006 layout, or with layout="1997" that of EVALB's own sample.rsl.

Where we differ (a C program's undefined paths): no limits on line, word or label
lengths; past the end of a line cut off after "(LABEL" evalb reads on into whatever its
line buffer still holds (mostly the tail of the gold line), so its row and messages for
that sentence depend on those bytes: an Error with one to three messages, or a Skip when
it finds no word there. We take one "More than two elements in a bracket" error and make
the sentence an Error, as a truncated line is.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from pathlib import Path

from train.errors import InputError
from train.parsing.evalb_report import ERROR, LAYOUTS, OK, SKIP, Report, SentenceResult

_SPACE = " \t\n\v\f\r"  # C isspace()


@dataclass(frozen=True)
class EvalbParams:
    """The settings of an EVALB .prm file (section [6] of the EVALB README). The defaults are evalb's own."""

    labeled: bool = True
    cutoff_len: int = 40
    max_error: int = 10
    delete_labels: tuple[str, ...] = ()
    delete_labels_for_length: tuple[str, ...] = ()
    quote_labels: tuple[str, ...] = ()
    eq_labels: tuple[tuple[str, str], ...] = ()
    eq_words: tuple[tuple[str, str], ...] = ()

    @classmethod
    def read(cls, path: str | Path) -> EvalbParams:
        path = Path(path)
        if not path.is_file():
            raise InputError(f"{path}: parameter file not found")
        return cls.parse(path.read_text(encoding="utf-8", errors="replace"), str(path))

    @classmethod
    def parse(cls, text: str, where: str = "prm") -> EvalbParams:
        """Read .prm text: `KEY value` lines; '#' comments and lines shorter than 3 characters are skipped."""
        values: dict[str, list] = {}
        for number, line in enumerate(text.splitlines(), start=1):
            line = line.rstrip(_SPACE)
            if line.startswith("#") or len(line) < 3:
                continue
            key, value = (line.split(None, 1) + [""])[:2]
            if key not in _KEYS:
                raise InputError(f"{where}:{number}: unknown EVALB parameter {key!r}")
            if not value:
                raise InputError(f"{where}:{number}: {key} has no value")
            kind, name = _KEYS[key]
            if kind is int:
                try:
                    values[name] = int(value.split()[0])
                except ValueError:
                    raise InputError(f"{where}:{number}: {key} must be a number, got {value!r}") from None
            elif kind is tuple:
                pair = tuple(value.split())
                if len(pair) != 2:
                    raise InputError(f"{where}:{number}: {key} needs two values, got {value!r}")
                values.setdefault(name, []).append(pair)
            else:
                values.setdefault(name, []).append(value)
        fields = {name: tuple(v) if isinstance(v, list) else v for name, v in values.items()}
        fields.pop("debug", None)
        if "labeled" in fields:
            fields["labeled"] = bool(fields["labeled"])
        return cls(**fields)


_KEYS = {"DEBUG": (int, "debug"), "MAX_ERROR": (int, "max_error"), "CUTOFF_LEN": (int, "cutoff_len"),
         "LABELED": (int, "labeled"), "DELETE_LABEL": (str, "delete_labels"),
         "DELETE_LABEL_FOR_LENGTH": (str, "delete_labels_for_length"), "QUOTE_LABEL": (str, "quote_labels"),
         "EQ_LABEL": (tuple, "eq_labels"), "EQ_WORD": (tuple, "eq_words")}

# COLLINS.prm, the standard setting for WSJ parsing results (what --prm defaults to).
COLLINS = EvalbParams(delete_labels=("TOP", "-NONE-", ",", ":", "``", "''", "."),
                      delete_labels_for_length=("-NONE-",), eq_labels=(("ADVP", "PRT"),))


# ---------------------------------------------------------------- one line
@dataclass
class _Quote:
    """A terminal QUOTE_LABEL may have mis-tagged: where it was, to put it back (nk.prm)."""

    word: str
    tag: str
    index: int  # kept terminals before it
    bracket: int  # brackets opened before it
    ends: list[int]  # brackets open around it


@dataclass
class _Line:
    terminals: list[tuple[str, str]] = field(default_factory=list)  # (word, tag) kept
    brackets: list[list] = field(default_factory=list)  # [start, end, label]
    quotes: list[_Quote] = field(default_factory=list)
    length: int = 0  # words counted for the cut-off
    errors: list[str] = field(default_factory=list)
    cut_off: bool = False  # ends in "(LABEL": an Error sentence even without words (see the module's docstring)


def _read_line(text: str, params: EvalbParams, where: str) -> _Line:
    """evalb's read_line: terminals and brackets of one bracketed sentence.

    The bracket stack is evalb's `int stack_top; int stack[200];`, with what the compiled
    program does off its bottom: a ')' with nothing open reads stack[-1], which is stack_top
    itself, 0, so it closes the line's first bracket where it stands; the check for that comes
    one pop late, so the second ')' too many is the first that prints "too many close bracket";
    further below, the C program reads other variables, and we leave the brackets alone. A line
    whose `top` does not end at 0, either way, gets the one "too many open bracket" message.
    """
    line, stack, top, p, n = _Line(), {}, 0, 0, len(text)
    while p < n:
        char = text[p]
        if char in _SPACE:
            p += 1
        elif char == "(":
            label_start, p = p + 1, _token_end(text, p + 1)
            label = text[label_start:p]
            q = p
            while q < n and text[q] in _SPACE:
                q += 1
            if q >= n:                                   # cut off after "(LABEL": evalb reads on past the line
                line.errors.append("More than two elements in a bracket")
                line.cut_off = True
            elif q > p:
                word_start, q = q, _token_end(text, q)
                word = text[word_start:q]
                if q < n and text[q] == ")":
                    if label not in params.delete_labels_for_length:
                        line.length += 1
                    if label in params.quote_labels and word in ("'", '"', "/"):
                        open_now = [stack.get(k) for k in range(top)]
                        line.quotes.append(_Quote(word, label, len(line.terminals), len(line.brackets), open_now))
                    if label not in params.delete_labels:
                        line.terminals.append((word, label))
                    p = q + 1
                    continue
                if q >= n or text[q] != "(":
                    raise InputError(f"{where}: more than two elements in the bracket ({label} {word} ...)")
            stack[top], top = len(line.brackets), top + 1
            line.brackets.append([len(line.terminals), -1, label])
        elif char == ")":
            if top < 0:                                  # evalb's check comes one ')' late
                line.errors.append("Bracketing unbalance (too many close bracket)")
            opened = stack.get(top - 1) if top > 0 else 0 if top == 0 else None   # stack[-1] is stack_top, 0
            top -= 1
            if opened is not None and opened < len(line.brackets):
                line.brackets[opened][1] = len(line.terminals)
            p += 1
        else:
            raise InputError(f"{where}: {text[p:_token_end(text, p)]!r} is outside any bracket")
    if top != 0:
        line.errors.append("Bracketing is unbalanced (too many open bracket)")
    return line


def _token_end(text: str, p: int) -> int:
    while p < len(text) and text[p] not in _SPACE and text[p] not in "()":
        p += 1
    return p


# ---------------------------------------------------------------- one sentence
def _equal(a: str, b: str, pairs: tuple[tuple[str, str], ...]) -> bool:
    return a == b or (a, b) in pairs or (b, a) in pairs


def score_sentence(gold: str, test: str, params: EvalbParams = COLLINS, number: int = 1,
                   where: tuple[str, str] = ("gold", "test")) -> SentenceResult:
    """evalb's calc_result for line `number` of the gold file and of the test file."""
    g = _read_line(gold, params, f"{where[0]}:{number}")
    t = _read_line(test, params, f"{where[1]}:{number}")
    errors = g.errors + t.errors

    def failed(status: int, *more: str) -> SentenceResult:
        return SentenceResult(number, g.length, status, 0, 0, 0, 0, len(g.terminals), 0, tuple(errors) + more,
                              compared=False)

    if not t.terminals and not t.cut_off:
        return failed(SKIP)
    if len(g.terminals) != len(t.terminals):
        _fix_quotes(g, t, params)
        if len(g.terminals) != len(t.terminals):
            return failed(ERROR, f"Length unmatch ({len(g.terminals)}|{len(t.terminals)})")
    for (gold_word, _), (test_word, _) in zip(g.terminals, t.terminals):
        if not _equal(gold_word, test_word, params.eq_words):
            return failed(ERROR, f"Words unmatch ({gold_word}|{test_word})")
    gold_spans, test_spans = _constituents(g, params), _constituents(t, params)
    matched, free = 0, list(test_spans)           # free: test brackets not matched yet
    for start, end, label in gold_spans:
        for j, candidate in enumerate(free):
            if candidate is not None and candidate[:2] == (start, end) and (
                    not params.labeled or _equal(label, candidate[2], params.eq_labels)):
                free[j] = None
                matched += 1
                break
    crossing = sum(any(_crosses(gold_span, test_span) for gold_span in gold_spans) for test_span in test_spans)
    correct_tags = sum(_equal(gold_tag, test_tag, params.eq_labels)
                       for (_, gold_tag), (_, test_tag) in zip(g.terminals, t.terminals))
    return SentenceResult(number, g.length, ERROR if errors else OK, matched, len(gold_spans), len(test_spans),
                          crossing, len(g.terminals), correct_tags, tuple(errors))


def _constituents(line: _Line, params: EvalbParams) -> list[tuple[int, int, str]]:
    """(start, end, label) of the brackets that count: not empty, label (function tags cut) not deleted."""
    spans = []
    for start, end, label in line.brackets:
        label = _cut_function_tags(label)
        if start != end and not any(_equal(label, d, params.eq_labels) for d in params.delete_labels):
            spans.append((start, end, label))
    return spans


def _cut_function_tags(label: str) -> str:
    """evalb's modify_label: cut at the first '-' or '=' (NP-SBJ-1 -> NP, NP=2 -> NP)."""
    for i, char in enumerate(label):
        if char in "-=":
            return label[:i]
    return label


def _crosses(gold: tuple[int, int, str], test: tuple[int, int, str]) -> bool:
    (g0, g1, _), (t0, t1, _) = gold, test
    return (g0 < t0 < g1 < t1) or (t0 < g0 < t1 < g1)


def _fix_quotes(gold: _Line, test: _Line, params: EvalbParams) -> None:
    """evalb's fix_quote (nk.prm): a quote one side tagged as deleted punctuation and the other
    did not (say '' vs POS) is put back on the side that dropped it, so the lengths agree."""
    deleted = params.delete_labels
    for i, test_quote in enumerate(test.quotes):
        index = test_quote.index
        for j, gold_quote in enumerate(gold.quotes):
            if gold_quote.index != index or gold_quote.tag == test_quote.tag:
                continue
            if gold_quote.tag in deleted and test_quote.tag not in deleted:
                _reinsert(gold_quote, gold)
                for later in gold.quotes[j:]:
                    later.index += 1
            elif test_quote.tag in deleted and gold_quote.tag not in deleted:
                _reinsert(test_quote, test)
                for later in test.quotes[i:]:
                    later.index += 1


def _reinsert(quote: _Quote, line: _Line) -> None:
    line.terminals.insert(quote.index, (quote.word, quote.tag))
    for bracket in line.brackets[quote.bracket:]:              # opened after it: shift right
        bracket[0] += 1
        bracket[1] += 1
    for k in quote.ends:                                        # open around it: one word longer
        line.brackets[k][1] += 1


class EvalbStopped(InputError):
    """Where evalb gives up (exit 1): too many errors, or a line it cannot read. `report` holds the
    sentences scored before it, which evalb has printed by then (it prints no totals)."""

    def __init__(self, message: str, report: Report):
        super().__init__(message)
        self.report = report
        report.stopped = message


def evaluate(gold_lines: list[str], test_lines: list[str], params: EvalbParams = COLLINS,
             where: tuple[str, str] = ("gold", "test"), stop_after_max_error: bool = True) -> Report:
    """Score test lines against gold lines, one sentence a line, as evalb does.

    evalb exits at its error number MAX_ERROR + 2 ("Number of lines unmatch" counts too), and on
    a line it cannot read: EvalbStopped then, unless `stop_after_max_error` is False, when only an
    unreadable line stops it (parse-eval counts the errors of its own well-formed trees instead).
    """
    report = Report(params.cutoff_len)
    limit = params.max_error + 2 if stop_after_max_error else math.inf
    n_errors = 0
    for number, (gold, test) in enumerate(zip(gold_lines, test_lines), start=1):
        try:
            result = score_sentence(gold, test, params, number, where)
        except InputError as err:
            raise EvalbStopped(f"{err} (evalb stops here)", report) from None
        if n_errors + len(result.errors) >= limit:         # evalb's messages up to the fatal one, not its row
            report.messages += [f"{number} : {message}" for message in result.errors[:limit - n_errors]]
            _stop(report, where[1], number, params, result.errors[limit - n_errors - 1])
        n_errors += len(result.errors)
        report.add(result)
    if len(gold_lines) != len(test_lines):
        number = min(len(gold_lines), len(test_lines)) + 1
        side = "gold" if len(gold_lines) > len(test_lines) else "test"
        message = f"Number of lines unmatch (too many lines in {side} file)"
        report.messages.append(f"{number} : {message}")
        if n_errors + 1 >= limit:
            _stop(report, where[0] if side == "gold" else where[1], number, params, message)
    return report


def _stop(report: Report, where: str, number: int, params: EvalbParams, message: str) -> None:
    raise EvalbStopped(f"{where}:{number}: more than MAX_ERROR = {params.max_error} errors, evalb stops here "
                       f"and prints no totals (the last: {message})", report)


def read_lines(path: str | Path) -> list[str]:
    """The lines of a tree file as evalb reads them (fgets: the last line may lack its newline)."""
    path = Path(path)
    if not path.is_file():
        raise InputError(f"{path}: file not found")
    data = path.read_bytes()
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as err:
        line = data[:err.start].count(b"\n") + 1
        raise InputError(f"{path}:{line}: not valid UTF-8") from None
    if not text:
        raise InputError(f"{path}:1: empty file: no trees")
    return text.split("\n")[:-1] if text.endswith("\n") else text.split("\n")


__all__ = ["EvalbParams", "COLLINS", "EvalbStopped", "LAYOUTS", "score_sentence", "evaluate", "read_lines"]
