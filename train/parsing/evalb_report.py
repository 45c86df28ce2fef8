"""EVALB's table and summary: one row per sentence, the totals over all sentences and over the short ones.

train/parsing/evalb.py scores each sentence; this module adds the results up and prints
them exactly as evalb does (status 0 valid, 1 error, 2 skip; recall = matched/gold,
precision = matched/test, F1 = 2PR/(P+R), over valid sentences only).

Two layouts (LAYOUTS), the same numbers:
  "2006"  what the compiled evalb.c (2006 revision) prints: Words 0 on the rows of sentences
          it did not compare (Skip, "Length unmatch", "Words unmatch"), an F-measure line in
          each summary block, "-nan" (glibc's 0/0) when recall and precision are both 0.
  "1997"  EVALB's worked example, sample.rsl: the gold word count on those rows, no F-measure
          line, and in the totals line other widths and, in the crossing column, the number
          of sentences without a crossing bracket.
"""

from __future__ import annotations

import math
import sys
from dataclasses import dataclass, field

OK, ERROR, SKIP = 0, 1, 2
LAYOUTS = ("2006", "1997")
HEADER = ("  Sent.                        Matched  Bracket   Cross        Correct Tag",
          " ID  Len.  Stat. Recal  Prec.  Bracket gold test Bracket Words  Tags Accracy")
RULE = "=" * 76


@dataclass(frozen=True)
class SentenceResult:
    """One row of evalb's table."""

    id: int
    length: int  # words counted for the cut-off (gold)
    status: int  # 0 valid, 1 error, 2 skip
    matched: int
    gold_brackets: int
    test_brackets: int
    crossing: int
    words: int  # gold words after deletion
    correct_tags: int
    errors: tuple[str, ...] = ()
    compared: bool = True  # False: evalb gave up before comparing brackets (Skip, Length or Words unmatch)

    def row(self, layout: str = "2006") -> str:
        recall = 100.0 * self.matched / self.gold_brackets if self.gold_brackets else 0.0
        precision = 100.0 * self.matched / self.test_brackets if self.test_brackets else 0.0
        words = self.words if self.compared or layout == "1997" else 0
        accuracy = 100.0 * self.correct_tags / words if words else 0.0
        return (f"{self.id:4d}  {self.length:3d}    {self.status:d}  {recall:6.2f} {precision:6.2f}   "
                f"{self.matched:3d}    {self.gold_brackets:3d}  {self.test_brackets:3d}    {self.crossing:3d}"
                f"   {words:4d}  {self.correct_tags:4d}   {accuracy:6.2f}")


@dataclass
class Totals:
    """The summary of one group of sentences (all, or length <= CUTOFF_LEN)."""

    sentences: int = 0
    errors: int = 0
    skipped: int = 0
    gold_brackets: int = 0
    test_brackets: int = 0
    matched: int = 0
    complete: int = 0
    words: int = 0
    crossing: int = 0
    no_crossing: int = 0
    le2_crossing: int = 0
    correct_tags: int = 0

    def add(self, result: SentenceResult) -> None:
        self.sentences += 1
        if result.status != OK:
            self.errors += result.status == ERROR
            self.skipped += result.status == SKIP
            return
        self.gold_brackets += result.gold_brackets
        self.test_brackets += result.test_brackets
        self.matched += result.matched
        self.complete += result.gold_brackets == result.test_brackets == result.matched
        self.words += result.words
        self.crossing += result.crossing
        self.no_crossing += result.crossing == 0
        self.le2_crossing += result.crossing <= 2
        self.correct_tags += result.correct_tags

    @property
    def valid(self) -> int:
        return self.sentences - self.errors - self.skipped

    @property
    def recall(self) -> float:
        return 100.0 * self.matched / self.gold_brackets if self.gold_brackets else 0.0

    @property
    def precision(self) -> float:
        return 100.0 * self.matched / self.test_brackets if self.test_brackets else 0.0

    @property
    def f1(self) -> float:
        p, r = self.precision, self.recall
        return 2 * p * r / (p + r) if p + r else math.nan

    def _per_valid(self, count: int, scale: float = 100.0) -> float:
        return scale * count / self.valid if self.valid else 0.0

    def summary(self) -> dict[str, float]:
        """The summary block's lines, by evalb's names."""
        return {"Number of sentence": self.sentences, "Number of Error sentence": self.errors,
                "Number of Skip  sentence": self.skipped, "Number of Valid sentence": self.valid,
                "Bracketing Recall": self.recall, "Bracketing Precision": self.precision,
                "Bracketing FMeasure": self.f1, "Complete match": self._per_valid(self.complete),
                "Average crossing": self._per_valid(self.crossing, 1.0),
                "No crossing": self._per_valid(self.no_crossing),
                "2 or less crossing": self._per_valid(self.le2_crossing),
                "Tagging accuracy": 100.0 * self.correct_tags / self.words if self.words else 0.0}


@dataclass
class Report:
    """evalb's output: the rows, the totals over all sentences and over those <= cutoff."""

    cutoff_len: int  # CUTOFF_LEN: the second summary block counts sentences up to this length
    rows: list[SentenceResult] = field(default_factory=list)
    all: Totals = field(default_factory=Totals)
    short: Totals = field(default_factory=Totals)
    messages: list[str] = field(default_factory=list)  # what evalb prints on stderr: "LINE : message"
    stopped: str | None = None  # why evalb stopped before the totals (train.parsing.evalb.EvalbStopped)

    def add(self, result: SentenceResult) -> None:
        self.rows.append(result)
        self.all.add(result)
        if result.length <= self.cutoff_len:
            self.short.add(result)
        self.messages += [f"{result.id} : {message}" for message in result.errors]

    def print(self, layout: str = "2006") -> None:
        """What evalb prints: the per-sentence errors on stderr, the report on stdout."""
        for message in self.messages:
            print(message, file=sys.stderr)
        sys.stdout.write(self.format(layout))
        sys.stdout.flush()

    def format(self, layout: str = "2006") -> str:
        """Exactly what evalb prints on stdout, in one of LAYOUTS (a stopped run: the rows, no totals)."""
        if layout not in LAYOUTS:
            raise ValueError(f"layout must be one of {LAYOUTS}, got {layout!r}")
        lines = [*HEADER, RULE] + [row.row(layout) for row in self.rows]
        if self.stopped is not None:
            return "\n".join(lines) + "\n"
        total = self.all
        if layout == "1997":
            head = (f"                {total.recall:6.2f} {total.precision:6.2f} {total.matched:6d} "
                    f"{total.gold_brackets:6d} {total.test_brackets:4d}  {total.no_crossing:5d}")
        else:
            head = (f"                {total.recall:6.2f} {total.precision:6.2f} {total.matched:6d} "
                    f"{total.gold_brackets:5d} {total.test_brackets:5d}  {total.crossing:5d}")
        if not (total.gold_brackets > 0 and total.test_brackets > 0):
            head = ""
        tagging = 100.0 * total.correct_tags / total.words if total.words else 0.0
        lines += [RULE, f"{head}  {total.words:5d} {total.correct_tags:5d}   {tagging:6.2f}", "=== Summary ==="]
        for title, totals in (("All", self.all), (f"len<={self.cutoff_len}", self.short)):
            lines += ["", f"-- {title} --"]
            for name, value in totals.summary().items():
                if name == "Bracketing FMeasure" and layout == "1997":
                    continue
                lines.append(f"{name:<26}= {_number(value)}")
        return "\n".join(lines) + "\n"


def _number(value) -> str:
    """printf's %6d or %6.2f; glibc prints 0.0/0.0 as -nan."""
    if isinstance(value, int):
        return f"{value:6d}"
    return f"{'-nan':>6}" if math.isnan(value) else f"{value:6.2f}"
