"""The README stays a short front door, and every number it shows has a row in docs/results.md
naming its date, commit, machine and a command that still exists.

Commands a row may name: `python -m train [SUB] ...` (SUB a subcommand of the real parser, each
`--flag` one that SUB takes), `python benchmarks/X.py` / `bash benchmarks/X.sh` /
`python chapters/X.py` (the file exists, each `--flag` appears in it or in the chapters' shared
`_common.py`), and `python -m pytest [tests/...]` (the paths exist).
"""
import argparse
import re
from pathlib import Path

import pytest

from train.__main__ import build_parser

ROOT = Path(__file__).resolve().parents[1]
README = ROOT / "README.md"
RESULTS = ROOT / "docs" / "results.md"
HEADER = ["what", "command", "result", "date", "commit", "machine"]
README_MAX_LINES = 300

COMMAND = re.compile(r"(python -m train|python -m pytest|python benchmarks/\S+|bash benchmarks/\S+"
                     r"|python -m benchmarks\.\S+|python chapters/\S+)((?:\s+(?![;&|])\S+)*)")


def cells(line: str) -> list[str]:
    """The cells of a Markdown table row, ignoring pipes inside backticks."""
    parts, depth, cell = [], False, ""
    for ch in line.strip().strip("|"):
        if ch == "`":
            depth = not depth
        if ch == "|" and not depth:
            parts.append(cell.strip())
            cell = ""
        else:
            cell += ch
    parts.append(cell.strip())
    return parts


def result_rows(text: str) -> list[list[str]]:
    """Every body row of every table whose header is exactly HEADER."""
    rows, inside = [], False
    for line in text.splitlines():
        if not line.startswith("|"):
            inside = False
            continue
        row = cells(line)
        if row == HEADER:
            inside = True
        elif inside and not set(line) <= set("|- "):
            rows.append(row)
    return rows


def subcommand_flags() -> dict[str, set[str]]:
    parser = build_parser()
    [subparsers] = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]
    return {name: {o for a in sub._actions for o in a.option_strings} for name, sub in subparsers.choices.items()}


def command_problems(cell: str, flags: dict[str, set[str]]) -> list[str]:
    """What is wrong with the commands in one `command` cell ([] if it names at least one and all exist)."""
    problems, found = [], 0
    for span in re.findall(r"`([^`]+)`", cell):
        for match in COMMAND.finditer(span):
            found += 1
            head, rest = match.group(1), match.group(2).split()
            options = [w.split("=")[0] for w in rest if w.startswith("--")]
            if head == "python -m train":
                words = [w for w in rest if not w.startswith("-")]
                sub = words[0] if rest and not rest[0].startswith("-") else "demo"
                if sub not in flags:
                    problems.append(f"`{match.group(0)}`: no subcommand {sub!r} in python -m train")
                    continue
                problems += [f"`{match.group(0)}`: {sub} has no option {o}" for o in options if o not in flags[sub]]
            elif head == "python -m pytest":
                problems += [f"`{match.group(0)}`: no {w}" for w in rest
                             if w.startswith("tests/") and not (ROOT / w.split("::")[0]).exists()]
            else:
                name = head.split()[-1]
                path = ROOT / (name.replace(".", "/") + ".py" if head.startswith("python -m ") else name)
                if not path.is_file():
                    problems.append(f"`{match.group(0)}`: no file {path.relative_to(ROOT)}")
                    continue
                source = path.read_text(encoding="utf-8")
                shared = {"chapters": "_common.py", "benchmarks": "common.py"}.get(path.parent.name)
                if shared:
                    source += (path.parent / shared).read_text(encoding="utf-8")
                problems += [f"`{match.group(0)}`: {path.name} has no option {o}" for o in options
                             if f'"{o}"' not in source and f"'{o}'" not in source]
    if not found:
        problems.append(f"names no command that exists here: {cell!r}")
    return problems


def row_problems(row: list[str], flags: dict[str, set[str]]) -> list[str]:
    if len(row) != len(HEADER):
        return [f"{len(row)} cells, not {len(HEADER)}: {row}"]
    empty = [name for name, cell in zip(HEADER, row) if not cell]
    if empty:
        return [f"empty {', '.join(empty)}: {row}"]
    return [f"{row[0]}: {p}" for p in command_problems(row[1], flags)]


def headline_results() -> list[str]:
    """The `result` cells of the README's results table (the table under '## Results')."""
    text = README.read_text(encoding="utf-8")
    section = text.split("\n## Results", 1)[1].split("\n## ", 1)[0]
    lines = [line for line in section.splitlines() if line.startswith("|")]
    header = cells(lines[0])
    return [cells(line)[header.index("result")] for line in lines[2:]]


def numbers(text: str) -> set[str]:
    text = re.sub(r"\]\([^)]*\)", "]", text)           # link targets are not results
    return {n.rstrip(".,") for n in re.findall(r"\d[\d,.]*", text)}


def test_readme_is_a_front_door_of_at_most_300_lines():
    n = len(README.read_text(encoding="utf-8").splitlines())
    assert n <= README_MAX_LINES, f"README.md has {n} lines; move detail into docs/ (limit {README_MAX_LINES})"


def test_every_results_row_has_six_cells_and_a_command_that_exists():
    rows = result_rows(RESULTS.read_text(encoding="utf-8"))
    assert len(rows) > 50, f"docs/results.md: only {len(rows)} rows found under the header {HEADER}"
    flags = subcommand_flags()
    problems = [p for row in rows for p in row_problems(row, flags)]
    assert not problems, "docs/results.md:\n" + "\n".join(problems)


def test_every_headline_number_of_the_readme_is_a_results_row():
    results = RESULTS.read_text(encoding="utf-8")
    rows_text = "\n".join("|".join(row) for row in result_rows(results))
    headline = headline_results()
    assert headline, "README.md has no results table under '## Results'"
    missing = sorted(n for cell in headline for n in numbers(cell) if n not in rows_text)
    assert not missing, f"README's results table shows numbers no row of docs/results.md has: {missing}"


@pytest.mark.parametrize("bad_row, says", [
    ("| x | `python -m train fitt --config c.toml` | 1 | 2026-11-26 | abc1234 | 2-core VM |", "no subcommand 'fitt'"),
    ("| x | `python -m train bench --no-such-flag` | 1 | 2026-11-26 | abc1234 | 2-core VM |", "no option --no-such-flag"),
    ("| x | `python benchmarks/bench_nothing.py` | 1 | 2026-11-26 | abc1234 | 2-core VM |", "no file"),
    ("| x | `python -m benchmarks.bench_nothing` | 1 | 2026-11-26 | abc1234 | 2-core VM |", "no file"),
    ("| x | `python -m benchmarks.bench_softmax_forward --rounds 3` | 1 | 2026-11-26 | abc1234 | 2-core VM |",
     "no option --rounds"),
    ("| x | `python chapters/05_scaled_dot_product_attention.py --slow` | 1 | 2026-11-26 | abc1234 | 2-core VM |",
     "no option --slow"),
    ("| x | `python -m train bench` | 1 | | abc1234 | 2-core VM |", "empty date"),
    ("| x | a script I had | 1 | 2026-11-26 | abc1234 | 2-core VM |", "names no command"),
])
def test_a_bad_row_is_caught(bad_row, says):
    table = "| " + " | ".join(HEADER) + " |\n| --- | --- | --- | --- | --- | --- |\n" + bad_row + "\n"
    [row] = result_rows(table)
    problems = row_problems(row, subcommand_flags())
    assert any(says in p for p in problems), problems


def test_a_good_row_passes():
    row = cells("| x | `mpiexec -n 2 python -m train scale --allreduce-only`, `python -m train fit --config c.toml "
                "--set train.x=1` | 1 | 2026-11-26 | abc1234 | 2-core VM |")
    assert row_problems(row, subcommand_flags()) == []


def slug(heading: str) -> str:
    """GitHub's anchor for a Markdown heading."""
    return re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-")


def test_every_link_to_a_guide_section_lands_on_a_heading():
    pages = [README, *sorted((ROOT / "docs").glob("*.md"))]
    problems = []
    for page in pages:
        for target, anchor in re.findall(r"\]\(([\w./-]*\.md)#([\w-]+)\)", page.read_text(encoding="utf-8")):
            linked = (page.parent / target).resolve()
            headings = re.findall(r"^#+ (.+)$", linked.read_text(encoding="utf-8"), re.M) if linked.exists() else []
            if anchor not in {slug(h) for h in headings}:
                problems.append(f"{page.relative_to(ROOT)}: {target}#{anchor}")
    assert not problems, "links to sections that do not exist:\n" + "\n".join(problems)
