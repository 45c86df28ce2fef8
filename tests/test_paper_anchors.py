"""Paper anchors (`§3.2.1`, `Eq. (1)`, `Table 3`, `Figure 2`) in code, chapters and notes must exist in the paper,
and the chapters' quotations must be the paper's words, attributed to the right section.

The allowed anchors live in tests/paper_anchors.toml, copied from ../shared/PAPER_MAP.md.
A line that cites another paper's numbering can opt out with the marker `anchors: ignore`.
REPRODUCTION_NOTES.md, when present, must point its "code" column at files and symbols that exist.
The paper's sentences live in tests/paper_sentences.txt ("§section | sentence"); a chapter quotation
(a `# >` blockquote ending in "(§x ...)", or an inline "..." next to a §) must appear there verbatim,
"..." marking omissions, under a section it names.
"""

import bisect
import itertools
import re
import tomllib
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
SENTENCES = ROOT / "tests" / "paper_sentences.txt"
SCANNED_DIRS = ("minitensor", "transformer", "train", "chapters")
NOTES = ROOT / "REPRODUCTION_NOTES.md"
PAPER_MAP = ROOT / ".." / "shared" / "PAPER_MAP.md"
IGNORE_MARKER = "anchors: ignore"

_NUM = r"\d+(?:\.\d+)*"
_LIST_TAIL = rf"((?:\s*(?:,|and|or|–|-|to)\s*\(?{_NUM}\)?)*)"  # "Figures 3–5", "Eqs. (1) and (2)"
# kind -> regex with groups (keyword, first number, tail of further numbers for plural keywords)
ANCHOR_PATTERNS = {
    "sections": re.compile(rf"(§§?)\s*({_NUM}){_LIST_TAIL}"),
    "equations": re.compile(rf"\b(Eqs?\.|Equations?)\s*\(?(\d+)\)?{_LIST_TAIL}"),
    "tables": re.compile(rf"\b(Tables?)\s+(\d+){_LIST_TAIL}"),
    "figures": re.compile(rf"\b(Figures?\s|Figs?\.)\s*(\d+){_LIST_TAIL}"),
}
_PLURAL = ("§§", "Eqs.", "Equations", "Tables", "Figures ", "Figs.")


def load_allowed(path: Path = ROOT / "tests" / "paper_anchors.toml") -> dict[str, set[str]]:
    """{"sections": {"3.2.1", ...}, "equations": {"1", ...}, "tables": ..., "figures": ...} as strings."""
    with open(path, "rb") as f:
        data = tomllib.load(f)
    return {kind: {str(x) for x in data[kind]} for kind in ANCHOR_PATTERNS}


def anchors_in(text: str) -> list[tuple[int, str, str, str]]:
    """Every anchor in text as (line number, kind, number, the matched text); ranges like 3–5 expand."""
    found = []
    for lineno, line in enumerate(text.splitlines(), start=1):
        if IGNORE_MARKER in line:
            continue
        for kind, pattern in ANCHOR_PATTERNS.items():
            for match in pattern.finditer(line):
                keyword, first, tail = match.groups()
                numbers = [first]
                if keyword in _PLURAL and tail:
                    numbers += re.findall(_NUM, tail)
                    range_end = re.match(rf"\s*[–-]\s*\(?(\d+)\)?$", tail)
                    if kind != "sections" and range_end and first.isdigit():
                        numbers = [str(n) for n in range(int(first), int(range_end.group(1)) + 1)]
                found += [(lineno, kind, number, match.group(0).strip()) for number in numbers]
    return found


def bad_anchors(text: str, where: str, allowed: dict[str, set[str]]) -> list[str]:
    """'where:line: text names section 3.9, which the paper does not have' for each unknown anchor."""
    return [
        f"{where}:{lineno}: {matched!r} names {kind[:-1]} {number}, which the paper does not have"
        for lineno, kind, number, matched in anchors_in(text)
        if number not in allowed[kind]
    ]


def scanned_files() -> list[Path]:
    files = [NOTES] if NOTES.exists() else []
    for folder in SCANNED_DIRS:
        for path in sorted((ROOT / folder).rglob("*")):
            if path.suffix in (".py", ".md") and "__pycache__" not in path.parts and path.is_file():
                files.append(path)
    return files


def code_refs(markdown: str) -> list[tuple[int, str, str | None]]:
    """(line, path, symbol or None) for each entry in the "code" column of every markdown table."""
    refs, code_col, lines = [], None, markdown.splitlines()
    for i, line in enumerate(lines):
        if not line.lstrip().startswith("|"):
            code_col = None  # a table ended
            continue
        cells = [c.strip().strip("`").strip().lower() for c in line.strip().strip("|").split("|")]
        is_separator = all(re.fullmatch(r":?-+:?", c) for c in cells)
        if is_separator:
            continue
        next_is_separator = i + 1 < len(lines) and re.fullmatch(r"\s*\|[\s:|-]+\|?\s*", lines[i + 1])
        if next_is_separator:  # a header row
            code_col = cells.index("code") if "code" in cells else None
            continue
        if code_col is not None:
            raw = line.strip().strip("|").split("|")
            cell = raw[code_col] if code_col < len(raw) else ""
            for path, symbol in re.findall(r"([\w./-]+\.(?:py|md|cu|toml|json))(?::([A-Za-z_][\w.]*))?", cell):
                refs.append((i + 1, path, symbol or None))
    return refs


def broken_code_refs(markdown: str, where: str, root: Path) -> list[str]:
    """'where:line: ...' for each code-column entry whose file or symbol does not exist under root."""
    problems = []
    for lineno, path, symbol in code_refs(markdown):
        target = root / path
        if not target.is_file():
            problems.append(f"{where}:{lineno}: {path} does not exist")
            continue
        if symbol:
            text = target.read_text(encoding="utf-8")
            missing = [part for part in symbol.split(".") if not re.search(rf"\b{re.escape(part)}\b", text)]
            if missing:
                problems.append(f"{where}:{lineno}: {path} has no {'.'.join(missing)} (for {symbol})")
    return problems


GAP = "…"                 # a sentence-list line standing for paper sentences that are not listed
_UNLISTED = "\x00"        # what a gap becomes in the joined text: no quotation can match across it


def load_sentences(path: Path = SENTENCES) -> dict[str, str]:
    """{section: its listed sentences joined by single spaces, in order; a gap line "§x | …" joins as a break}."""
    sections: dict[str, list[str]] = {}
    for lineno, line in enumerate(path.read_text(encoding="utf-8").splitlines(), start=1):
        if not line.strip() or line.startswith("#"):
            continue
        match = re.fullmatch(r"§(\d+(?:\.\d+)*) \| (.+)", line)
        assert match, f"{path.name}:{lineno}: expected '§section | sentence', got {line!r}"
        sentence = match.group(2).strip()
        sections.setdefault(match.group(1), []).append(_UNLISTED if sentence == GAP else sentence)
    return {section: " ".join(sentences) for section, sentences in sections.items()}


def _normalise(text: str) -> str:
    return re.sub(r"\s+", " ", text).strip()


def quotations(text: str) -> list[tuple[int, str, list[str]]]:
    """(line, quoted text, cited sections) for every quotation in a chapter's comment lines.

    Blockquotes: consecutive `# >` lines, ending in an attribution "(§x ...)" that names the sections.
    Inline: "quoted words" (§x ...), "quoted words" of §x, or §x: "quoted words" / (§x, "quoted words").
    """
    found, lines = [], text.splitlines()
    i = 0
    while i < len(lines):
        if not lines[i].startswith("# >"):
            i += 1
            continue
        start, block = i, []
        while i < len(lines) and lines[i].startswith("# >"):
            block.append(lines[i][3:])
            i += 1
        quote = _normalise(" ".join(block))
        attribution = re.search(r"\((§[^()]*(?:\([^()]*\)[^()]*)*)\)$", quote)
        sections = re.findall(r"§(\d+(?:\.\d+)*)", attribution.group(1)) if attribution else []
        found.append((start + 1, quote[:attribution.start()].strip() if attribution else quote, sections))
    prose = [(n, line[2:]) for n, line in enumerate(lines, start=1) if line.startswith("# ") and not line.startswith("# >")]
    joined = " ".join(line for _, line in prose)
    starts = list(itertools.accumulate([0] + [len(line) + 1 for _, line in prose]))
    for pattern in (r'"([^"]{12,}?)"\s*\(§(\d+(?:\.\d+)*)', r'"([^"]{6,}?)"\s+(?:of|in|from)\s+§(\d+(?:\.\d+)*)',
                    r'§(\d+(?:\.\d+)*)[,:]\s*"([^"]{12,}?)"'):
        for match in re.finditer(pattern, joined):
            words, section = match.groups() if pattern.startswith('"') else match.groups()[::-1]
            lineno = prose[bisect.bisect_right(starts, match.start()) - 1][0]
            found.append((lineno, _normalise(words), [section]))
    return found


def misquotes(text: str, where: str, sentences: dict[str, str]) -> list[str]:
    """'where:line: ...' for each quotation (or part between "...") not found verbatim under its sections."""
    problems = []
    for lineno, quote, sections in quotations(text):
        if not sections:
            problems.append(f"{where}:{lineno}: quotation without an attribution '(§x)': {quote[:60]!r}")
            continue
        pool = " ".join(sentences.get(section, "") for section in sections)
        for part in re.split(r"\s*(?:\.\.\.|…)\s*", quote):
            part = part.strip().strip('"').strip()
            if part and part not in pool:
                problems.append(f"{where}:{lineno}: not the paper's words under §{', §'.join(sections)}: {part[:80]!r}")
    return problems


# --- the checks on the repository -------------------------------------------------------------


def test_every_anchor_in_the_repo_exists_in_the_paper():
    allowed = load_allowed()
    problems = []
    for path in scanned_files():
        problems += bad_anchors(path.read_text(encoding="utf-8"), str(path.relative_to(ROOT)), allowed)
    assert not problems, "anchors that are not in the paper (see ../shared/PAPER_MAP.md):\n" + "\n".join(problems)


def test_chapter_quotations_are_the_papers_words():
    sentences = load_sentences()
    problems, count = [], 0
    for path in sorted((ROOT / "chapters").glob("[0-9][0-9]_*.py")):
        text = path.read_text(encoding="utf-8")
        count += len(quotations(text))
        problems += misquotes(text, str(path.relative_to(ROOT)), sentences)
    assert count >= 20, f"only {count} quotations found in the chapters: is the scanner broken?"
    assert not problems, "quotations that are not in tests/paper_sentences.txt:\n" + "\n".join(problems)


def test_sentence_list_sections_exist_in_the_paper():
    allowed = load_allowed()["sections"]
    assert set(load_sentences()) <= allowed, set(load_sentences()) - allowed


def test_reproduction_notes_point_at_real_code():
    if not NOTES.exists():
        pytest.skip("REPRODUCTION_NOTES.md not written yet")
    markdown = NOTES.read_text(encoding="utf-8")
    assert code_refs(markdown), "REPRODUCTION_NOTES.md has no table with a 'code' column"
    problems = broken_code_refs(markdown, NOTES.name, ROOT)
    assert not problems, "REPRODUCTION_NOTES.md points at missing code:\n" + "\n".join(problems)


def test_anchor_list_matches_paper_map():
    if not PAPER_MAP.exists():
        pytest.skip(f"{PAPER_MAP} not present")
    text = PAPER_MAP.read_text(encoding="utf-8")
    allowed = load_allowed()
    sections_part = text.split("## Sections", 1)[1].split("\n## ", 1)[0]
    sections = set(re.findall(r"^\|\s*(\d+(?:\.\d+)*)\s*\|", sections_part, flags=re.M))
    assert sections == allowed["sections"]
    cited = {kind: {n for _, k, n, _ in anchors_in(text) if k == kind} for kind in ANCHOR_PATTERNS}
    for kind in ("equations", "tables", "figures"):
        assert cited[kind] == allowed[kind], kind


# --- self-tests: the scanners can fail ----------------------------------------------------------


def test_scanner_catches_bad_anchors():
    allowed = load_allowed()
    text = "ok line §3.2.1 Eq. (1)\n# see §3.9 and Eq. (4)\nTable 5, Fig. 6, Eq.(7), Eq. 8\nFigures 3–6\n"
    problems = bad_anchors(text, "x.py", allowed)
    assert any(p.startswith("x.py:2: '§3.9' names section 3.9") for p in problems), problems
    assert any(p.startswith("x.py:2: 'Eq. (4)' names equation 4") for p in problems), problems
    assert {p.split(" names ")[1].split(",")[0] for p in problems} == {
        "section 3.9", "equation 4", "table 5", "figure 6", "equation 7", "equation 8"}
    assert not any(p.startswith("x.py:1:") for p in problems)


def test_scanner_accepts_valid_anchors_and_ignore_marker():
    allowed = load_allowed()
    text = (
        "# §3.2.1 Eq. (1): softmax(QK^T/sqrt(d_k)) V\n"
        "§5.3 Eq. 3, Eq.(2), Eqs. (1) and (2), Table 3 row (E), Figure 1, Fig. 2, Figures 3–5.\n"
        "§§3.1, 3.2; see §6.1. DEVIATION(§3.1): pre-norm\n"
        "Adam paper §2.1 Eq. (9)  # anchors: ignore\n"
        "plt.figure(7); table 9; Equal; §§ alone\n"
    )
    assert bad_anchors(text, "x.py", allowed) == []
    kinds = [(k, n) for _, k, n, _ in anchors_in(text)]
    assert ("figures", "4") in kinds and ("sections", "3.2") in kinds


def test_quote_checker_catches_altered_and_misattributed_quotes():
    sentences = {"3.1": "The encoder is composed of a stack of N = 6 identical layers. Each layer has two sub-layers.",
                 "5.4": "We apply dropout to the output of each sub-layer, before it is added to the sub-layer input "
                        "and normalized."}
    good = ("# > The encoder is composed of a stack of N = 6\n# > identical layers. ... Each layer has two "
            "sub-layers. (§3.1)\n# the paper says \"We apply dropout to the output of each sub-layer\" (§5.4).\n")
    assert misquotes(good, "x.py", sentences) == []
    assert [q[2] for q in quotations(good)] == [["3.1"], ["5.4"]]
    altered = good.replace("N = 6", "N = 8")
    assert misquotes(altered, "x.py", sentences)[0].startswith("x.py:1: not the paper's words under §3.1")
    misattributed = good.replace("(§5.4)", "(§3.1)")
    assert misquotes(misattributed, "x.py", sentences) == [
        "x.py:3: not the paper's words under §3.1: 'We apply dropout to the output of each sub-layer'"]
    unattributed = "# > The encoder is composed of a stack of N = 6 identical layers.\n"
    assert "without an attribution" in misquotes(unattributed, "x.py", sentences)[0]
    short = '# the "learns to be more unsure" of §5.4\n'
    assert misquotes(short, "x.py", sentences) and quotations(short)[0][2] == ["5.4"]


def test_quote_checker_rejects_a_quotation_across_unlisted_sentences(tmp_path):
    """A quotation that drops a sentence of the paper must say so with "...", even where the list
    skips that sentence: the list marks the gap ("§x | …") and nothing matches across it."""
    listed = tmp_path / "sentences.txt"
    listed.write_text("§5.2 | We trained the base models for a total of 100,000 steps or 12 hours.\n§5.2 | …\n"
                      "§5.2 | The big models were trained for 300,000 steps (3.5 days).\n", encoding="utf-8")
    sentences = load_sentences(listed)
    bridged = ("# > We trained the base models for a total of 100,000 steps or 12 hours. The big models were\n"
               "# > trained for 300,000 steps (3.5 days). (§5.2)\n")
    assert misquotes(bridged, "x.py", sentences), "a quotation across a gap must fail"
    assert misquotes(bridged.replace("12 hours. The", "12 hours. ... The"), "x.py", sentences) == []


def test_code_ref_checker_catches_missing_files_and_symbols(tmp_path):
    (tmp_path / "pkg").mkdir()
    (tmp_path / "pkg" / "mod.py").write_text("class Attention:\n    def forward(self): ...\n")
    markdown = (
        "Intro text | not a table\n\n"
        "| paper | code | note |\n"
        "| --- | --- | --- |\n"
        "| §3.2.1 | `pkg/mod.py:Attention.forward` | fine |\n"
        "| §3.3 | `pkg/mod.py:FeedForward` | missing symbol |\n"
        "| §3.5 | `pkg/positional.py` | missing file |\n"
        "| §5.3 | — | no code yet |\n"
        "\n| other | table |\n| --- | --- |\n| `pkg/nothere.py` | no code column: ignored |\n"
    )
    assert code_refs(markdown) == [
        (5, "pkg/mod.py", "Attention.forward"), (6, "pkg/mod.py", "FeedForward"), (7, "pkg/positional.py", None)]
    assert broken_code_refs(markdown, "NOTES.md", tmp_path) == [
        "NOTES.md:6: pkg/mod.py has no FeedForward (for FeedForward)",
        "NOTES.md:7: pkg/positional.py does not exist",
    ]
