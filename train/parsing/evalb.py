"""EVALB in Python: labelled bracket recall, precision and F1 the way the parsing literature
(and §6.3's Table 4) computes them, reproducing Sekine & Collins' `evalb` line for line.

How evalb scores a (gold line, test line) pair, step by step (sections [6] and [7] of the EVALB README):
1. Read each line as brackets. A terminal `(TAG word)` whose TAG is a DELETE_LABEL
   (COLLINS.prm: punctuation , : `` '' . and -NONE-) is dropped with its word; the
   sentence length for the cut-off counts every terminal except DELETE_LABEL_FOR_LENGTH.
2. A test line without words is a "Skip" sentence. Different word counts (after QUOTE_LABEL
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

Where we differ (a C program's undefined or fatal paths): no limits on line, word or
label lengths; a word outside brackets or two words in one bracket is an InputError (evalb
loops on it until MAX_ERROR and exits); a ')' that closes nothing makes the sentence an
Error (evalb reads outside its stack); F1 of 0/0 is nan.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from train.errors import InputError
from train.parsing.evalb_report import ERROR, OK, SKIP, Report, SentenceResult

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


def _read_line(text: str, params: EvalbParams, where: str) -> _Line:
    """evalb's read_line: terminals and brackets of one bracketed sentence."""
    line, stack, p, n = _Line(), [], 0, len(text)
    while p < n:
        char = text[p]
        if char in _SPACE:
            p += 1
        elif char == "(":
            label_start, p = p + 1, _token_end(text, p + 1)
            label = text[label_start:p]
            if p < n and text[p] in _SPACE:
                q = p
                while q < n and text[q] in _SPACE:
                    q += 1
                word_start, q = q, _token_end(text, q)
                word = text[word_start:q]
                if q < n and text[q] == ")":
                    if label not in params.delete_labels_for_length:
                        line.length += 1
                    if label in params.quote_labels and word in ("'", '"', "/"):
                        line.quotes.append(_Quote(word, label, len(line.terminals), len(line.brackets), list(stack)))
                    if label not in params.delete_labels:
                        line.terminals.append((word, label))
                    p = q + 1
                    continue
                if q >= n or text[q] != "(":
                    raise InputError(f"{where}: more than two elements in the bracket ({label} {word} ...)")
            stack.append(len(line.brackets))
            line.brackets.append([len(line.terminals), -1, label])
        elif char == ")":
            if stack:
                line.brackets[stack.pop()][1] = len(line.terminals)
            else:
                line.errors.append("Bracketing unbalance (too many close bracket)")
            p += 1
        else:
            raise InputError(f"{where}: {text[p:_token_end(text, p)]!r} is outside any bracket")
    if stack:
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
        return SentenceResult(number, g.length, status, 0, 0, 0, 0, len(g.terminals), 0, tuple(errors) + more)

    if not t.terminals:
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


def evaluate(gold_lines: list[str], test_lines: list[str], params: EvalbParams = COLLINS,
             where: tuple[str, str] = ("gold", "test"), stop_after_max_error: bool = True) -> Report:
    """Score test lines against gold lines, one sentence a line, as evalb does.

    evalb gives up (exit 1) when errors pile up past MAX_ERROR; so does this, with an
    InputError, unless `stop_after_max_error` is False (parse-eval counts them instead).
    """
    report = Report(params.cutoff_len)
    n_errors = 0
    for number, (gold, test) in enumerate(zip(gold_lines, test_lines), start=1):
        result = score_sentence(gold, test, params, number, where)
        report.add(result)
        n_errors += len(result.errors)
        if stop_after_max_error and n_errors > params.max_error + 1:
            raise InputError(f"{where[1]}:{number}: more than MAX_ERROR = {params.max_error} errors "
                             f"(evalb stops here); the last: {result.errors[-1]}")
    if len(gold_lines) != len(test_lines):
        side = "gold" if len(gold_lines) > len(test_lines) else "test"
        report.messages.append(f"{min(len(gold_lines), len(test_lines)) + 1} : Number of lines unmatch "
                               f"(too many lines in {side} file)")
    return report


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


__all__ = ["EvalbParams", "COLLINS", "score_sentence", "evaluate", "read_lines"]
