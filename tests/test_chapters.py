"""Every chapter runs as a script, and every exercise solution passes the checks its chapter defines.

Each chapter runs once in a subprocess as `python chapters/NN_*.py --fast --check-solutions`:
`--fast` shrinks sizes and training runs, `--check-solutions` makes the chapter import
`chapters/solutions/NN_*.py` and run its `check_<name>` functions on them (it prints
"solutions OK"). The chapters also check their own checks against a wrong answer.

The subprocess runs on one CPU thread (train.threads does the same for training runs):
the chapters' matrices are tiny, and on a shared 2-core machine extra BLAS/Numba
threads make them many times slower.
"""
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
CHAPTERS = sorted((ROOT / "chapters").glob("[0-9][0-9]_*.py"))
TIMEOUT_S = 600  # a hang guard: chapters take seconds, CI machines are busy


def _run(chapter: Path) -> subprocess.CompletedProcess:
    env = dict(os.environ, PYTHONPATH=str(ROOT), MPLBACKEND="Agg",
               OPENBLAS_NUM_THREADS="1", OMP_NUM_THREADS="1", MKL_NUM_THREADS="1", NUMBA_NUM_THREADS="1")
    return subprocess.run([sys.executable, str(chapter), "--fast", "--check-solutions"], cwd=ROOT, env=env,
                          capture_output=True, text=True, timeout=TIMEOUT_S)


def test_chapters_exist_in_reading_order():
    numbers = [int(p.name[:2]) for p in CHAPTERS]
    assert numbers == list(range(1, len(numbers) + 1)), f"chapters must be numbered 01.. without gaps: {numbers}"
    assert len(CHAPTERS) >= 12


@pytest.mark.parametrize("chapter", CHAPTERS, ids=[p.stem for p in CHAPTERS])
def test_chapter_runs_and_solutions_pass(chapter):
    result = _run(chapter)
    tail = (result.stdout + result.stderr)[-4000:]
    assert result.returncode == 0, f"{chapter.name} failed:\n{tail}"
    number = chapter.name[:2]
    assert f"chapter {number} OK" in result.stdout, f"{chapter.name} did not reach its end:\n{tail}"
    assert "solutions OK" in result.stdout, f"{chapter.name}: the solutions were not checked:\n{tail}"


@pytest.mark.parametrize("chapter", CHAPTERS, ids=[p.stem for p in CHAPTERS])
def test_chapter_structure(chapter):
    """STYLE.md §7: percent cells, a paper quote, CHECK cells, Summary (≤3 bullets), 2-4 Exercises with a predict."""
    text = chapter.read_text(encoding="utf-8")
    assert "# %% [markdown]" in text and "\n# %%\n" in text, "jupytext percent format"
    assert "§" in text, "quote the paper with § anchors"
    assert "# %% CHECK" in text, "at least one CHECK cell of asserts"
    summary = text.split("## Summary", 1)[1].split("## Exercises", 1)[0]
    bullets = [line for line in summary.splitlines() if line.startswith("# - ")]
    assert 1 <= len(bullets) <= 3, f"Summary needs 1-3 bullets, has {len(bullets)}"
    exercises = text.split("## Exercises", 1)[1].split("# %%", 1)[0]
    items = re.findall(r"^# \d+\. ", exercises, flags=re.M)
    assert 2 <= len(items) <= 4, f"Exercises needs 2-4 items, has {len(items)}"
    assert "Predict, then run" in exercises, "one exercise is 'predict, then run'"
    checks = set(re.findall(r"^def (check_\w+)\(", text, flags=re.M))
    solution = ROOT / "chapters" / "solutions" / chapter.name
    assert checks, "a chapter defines check_<name> functions for its code exercises"
    assert solution.is_file(), f"{solution.relative_to(ROOT)} is missing"
    for check in checks:
        assert re.search(rf"^\s+{check}\(solutions\.", text, flags=re.M), f"{check} is never run on the solutions"


def test_chapters_never_use_environment_flags():
    """The one switch is `--fast` on the command line (STYLE.md §9): no os.environ in chapters."""
    for path in CHAPTERS + sorted((ROOT / "chapters" / "solutions").glob("*.py")):
        assert "os.environ" not in path.read_text(encoding="utf-8"), f"{path.name} reads the environment"


def test_figures_go_to_the_ignored_output_folder():
    assert "chapters/_out/" in (ROOT / ".gitignore").read_text(encoding="utf-8").splitlines()
    for path in CHAPTERS:
        text = path.read_text(encoding="utf-8")
        if "savefig" in text:
            assert 'matplotlib.use("Agg")' in text, f"{path.name}: figures must not need a display"
            assert all("OUT /" in line for line in text.splitlines() if ".savefig(" in line), \
                f"{path.name}: save figures under chapters/_out"


def test_jupytext_reads_every_chapter():
    jupytext = pytest.importorskip("jupytext")
    for path in CHAPTERS:
        notebook = jupytext.read(path)
        kinds = {cell.cell_type for cell in notebook.cells}
        assert kinds == {"markdown", "code"}, f"{path.name}: cells {kinds}"
