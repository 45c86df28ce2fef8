"""Build the chapters as a static web book that opens from the file system, with no network.

    pip install -e ".[book]"                  # once: nbconvert and latex2mathml on top of the test tools
    python chapters/book.py                   # every chapter at full size -> build/book/index.html
    python chapters/book.py --fast            # the --fast sizes, as in CI
    python chapters/book.py --fast --only 05,07,09

Every chapter is executed as a notebook (jupytext + nbclient in a fresh kernel, as tests/chapters/test_chapters.py
does), and nbconvert renders it with chapters/book_template/: its printed output and figures under the
cells that made them, CHECK cells marked as passed, the solutions folded under the exercises, a sidebar
table of contents and previous/next links. Equations ($...$ and $$...$$ in the markdown, numbered with
\\tag{n}) become MathML at build time (latex2mathml), which the browser typesets itself: no MathJax, no
CDN. Code spans and links that name library files or modules (`transformer/attention.py`,
`transformer.attention`) link to highlighted copies of that source inside the book.

A chapter that fails stops the build with its name and its first error. The book is built in a
temporary folder beside --out and replaces --out only when every chapter passed, so no page whose checks
failed is ever published, and --out is replaced only if it is a book this command built.
"""
from __future__ import annotations

import argparse
import datetime
import html
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
CHAPTERS_DIR = ROOT / "chapters"
TEMPLATE_DIR = CHAPTERS_DIR / "book_template"
MARKER = ".chapters-book"                     # in every folder this command built: the only kind it replaces
LIBRARY = ("minitensor", "transformer", "train")
SOURCE_SUFFIXES = (".py", ".cu", ".cuh")
TIMEOUT_S = 3600                              # a hang guard per cell: full-size training cells take minutes


class BuildError(Exception):
    """A chapter (or page) that cannot be published: the message names it and the first error."""


def chapter_files() -> list[Path]:
    return sorted(CHAPTERS_DIR.glob("[0-9][0-9]_*.py"))


def chapter_title(path: Path) -> str:
    """'05 · Scaled dot-product attention': the chapter's first heading, without markdown."""
    for line in path.read_text(encoding="utf-8").splitlines():
        if line.startswith("# # "):
            return line[4:].replace("`", "").strip()
    return path.stem


# ---------------------------------------------------------------------------------------------- equations

_TAG = re.compile(r"\\tag\{([^}]*)\}")


def typeset(latex: str, display: bool) -> str:
    """LaTeX -> MathML (latex2mathml); a display equation's \\tag{n} becomes its number at the right margin.

    latex2mathml passes unknown commands through as text and mangles `&` outside arrays: both raise here,
    so a formula that would show as garbage fails the build instead.
    """
    from latex2mathml.converter import convert

    tag = _TAG.search(latex)
    body = _TAG.sub("", latex).strip()
    mathml = convert(html.unescape(body), display="block" if display else "inline")
    if re.search(r"<m[io]>\\", mathml) or "<mi>&amp;</mi>" in mathml or "<mi>&</mi>" in mathml:
        raise ValueError(f"latex2mathml cannot typeset {body!r} (an unknown command, or & outside an array)")
    if not display:
        return mathml
    number = f'<span class="book-eqno">({html.escape(tag.group(1))})</span>' if tag else ""
    return f'<div class="book-equation">{mathml}{number}</div>'


# ---------------------------------------------------------------------------------------------- source links

class SourceLinks:
    """Which repository files the book carries as highlighted pages, and the link for a code span or a URL."""

    def __init__(self, built_chapters: dict[str, str]):
        self.built_chapters = built_chapters                     # "05_scaled_dot_product_attention.py" -> page
        files = [p for package in LIBRARY for p in sorted((ROOT / package).rglob("*"))
                 if p.suffix in SOURCE_SUFFIXES and "__pycache__" not in p.parts]
        files += chapter_files() + sorted((CHAPTERS_DIR / "solutions").glob("[0-9][0-9]_*.py"))
        files += [CHAPTERS_DIR / "_common.py"]
        self.files = {p.relative_to(ROOT).as_posix(): p for p in files}
        self.linked: set[str] = set()                            # the files some page links to get a page

    def page(self, relative: str) -> str:
        self.linked.add(relative)
        return f"src/{relative}.html"

    def _symbol_line(self, relative: str, symbol: str) -> str:
        """'#L-12' for the line that defines the last part of symbol (class, def or assignment), else ''."""
        name = re.escape(symbol.split(".")[-1])
        pattern = re.compile(rf"^\s*(?:class|def)\s+{name}\b|^\s*{name}\s*[:=]")
        for number, line in enumerate(self.files[relative].read_text(encoding="utf-8").splitlines(), start=1):
            if pattern.search(line):
                return f"#L-{number}"                            # pygments' line anchors
        return ""

    def for_code(self, text: str) -> str | None:
        """The href for a code span: a repository path (with an optional :symbol), a chapter file, or a module."""
        text = text.strip()
        if text in self.built_chapters:
            return self.built_chapters[text]
        match = re.fullmatch(r"([\w./-]+\.(?:py|cu|cuh))(?::([A-Za-z_][\w.]*))?", text)
        if match:
            relative = match.group(1)
            if relative not in self.files and f"chapters/{relative}" in self.files:
                relative = f"chapters/{relative}"
            if relative in self.files:
                return self.page(relative) + (self._symbol_line(relative, match.group(2)) if match.group(2) else "")
            return None
        parts = text.split(".")
        if len(parts) < 2 or parts[0] not in LIBRARY or not all(p.isidentifier() for p in parts):
            return None
        for cut in range(len(parts), 0, -1):                     # the longest prefix that is a module
            for relative in ("/".join(parts[:cut]) + ".py", "/".join(parts[:cut]) + "/__init__.py"):
                if relative in self.files:
                    rest = ".".join(parts[cut:])
                    return self.page(relative) + (self._symbol_line(relative, rest) if rest else "")
        return None

    def for_url(self, url: str, base: Path) -> str | None:
        """The href for a relative markdown link to a repository file, seen from the folder `base`."""
        if re.match(r"^[a-z]+:|^#|^/", url):
            return None
        path, _, anchor = url.partition("#")
        try:
            relative = (base / path).resolve().relative_to(ROOT).as_posix()
        except ValueError:
            return None
        if relative in self.built_chapters:
            return self.built_chapters[relative]
        if relative in self.files:
            return self.page(relative) + (f"#{anchor}" if anchor else "")
        return None


# ---------------------------------------------------------------------------------------------- rendering

def make_exporter(links: SourceLinks):
    """nbconvert's HTMLExporter with chapters/book_template/, MathML equations and links into the book."""
    from jinja2 import pass_context
    from nbconvert import HTMLExporter, TemplateExporter
    from nbconvert.filters.markdown_mistune import IPythonRenderer, MarkdownWithMath
    from nbconvert.preprocessors import ExtractOutputPreprocessor

    class BookRenderer(IPythonRenderer):
        def __init__(self, base: Path, **kwargs):
            super().__init__(**kwargs)
            self.base = base

        def block_math(self, body: str) -> str:
            return typeset(body, display=True)

        def inline_math(self, body: str) -> str:
            return typeset(body, display=False)

        def latex_environment(self, name: str, body: str) -> str:
            return typeset(f"\\begin{{{name}}}{body}\\end{{{name}}}", display=True)

        def codespan(self, text: str) -> str:
            code = super().codespan(text)
            href = links.for_code(text)
            return f'<a class="book-source-link" href="{href}">{code}</a>' if href else code

        def link(self, text: str, url: str, title: str | None = None) -> str:
            text = re.sub(r'<a class="book-source-link" href="[^"]*">(.*?)</a>', r"\1", text)   # no link in a link
            href = links.for_url(url, self.base)
            if href is None:
                return super().link(text, url, title)
            return f'<a class="book-source-link" href="{html.escape(href)}">{text}</a>'

    class BookExporter(HTMLExporter):
        @pass_context
        def markdown2html(self, context, source):
            base = Path(context.get("resources", {}).get("metadata", {}).get("path", "") or CHAPTERS_DIR)
            renderer = BookRenderer(base, escape=False, anchor_link_text="¶")
            return MarkdownWithMath(renderer=renderer).render(source)

        def from_notebook_node(self, nb, resources=None, **kw):
            if nb.cells:
                return super().from_notebook_node(nb, resources, **kw)
            # a source page (no cells): skip HTMLExporter's pass over the page for cells' alt texts and tab stops,
            # which costs a second a page for long files
            return TemplateExporter.from_notebook_node(self, nb, resources, **kw)

    exporter = BookExporter(template_file="index.html.j2", extra_template_basedirs=[str(TEMPLATE_DIR.parent)],
                            template_name=TEMPLATE_DIR.name)
    exporter.register_preprocessor(ExtractOutputPreprocessor(), enabled=True)
    return exporter


def highlighted(path: Path, line_numbers: bool) -> str:
    from pygments import highlight
    from pygments.formatters import HtmlFormatter
    from pygments.lexers import CppLexer, PythonLexer

    lexer = PythonLexer() if path.suffix == ".py" else CppLexer()
    formatter = HtmlFormatter(linenos="table", lineanchors="L", anchorlinenos=True) if line_numbers \
        else HtmlFormatter()
    return highlight(path.read_text(encoding="utf-8"), lexer, formatter)


def pygments_css() -> str:
    from pygments.formatters import HtmlFormatter

    return HtmlFormatter(style="default").get_style_defs(".highlight")


class Book:
    """The pages of one build, in reading order, and how to render each into the staging folder."""

    def __init__(self, chapters: list[Path], built: list[Path], staging: Path):
        self.staging = staging
        self.built = {p.name: f"{p.stem}.html" for p in built}
        self.links = SourceLinks(self.built)
        self.exporter = make_exporter(self.links)
        self.toc = ([{"title": "Start: reading order", "href": "index.html", "built": True}]
                    + [{"title": chapter_title(p), "href": f"{p.stem}.html", "built": p.name in self.built}
                       for p in chapters]
                    + [{"title": "Reproduction notes", "href": "reproduction_notes.html", "built": True}])
        self.reading = [page for page in self.toc if page["built"]]

    def render(self, notebook, href: str, base: Path, **book) -> None:
        """Render `notebook` as the page `href` (relative to the book), figures beside it."""
        import nbformat

        at = next((i for i, page in enumerate(self.reading) if page["href"] == href), None)   # None: a source page
        depth = href.count("/")
        stem = Path(href).stem
        resources = {
            "metadata": {"name": book.get("title", stem), "path": str(base)},
            "unique_key": stem, "output_files_dir": f"{stem}_files",
            "book": {"root": "../" * depth, "href": href, "toc": self.toc, "note": book.get("note", ""),
                     "prev": self.reading[at - 1] if at else None,
                     "next": self.reading[at + 1] if at is not None and at + 1 < len(self.reading) else None,
                     **book},
        }
        notebook = nbformat.from_dict(notebook)
        if "title" in book:
            notebook.metadata["title"] = book["title"]
        try:
            page, resources = self.exporter.from_notebook_node(notebook, resources=resources)
        except ValueError as error:                               # an equation latex2mathml cannot typeset
            raise BuildError(f"{href}: {error}") from None
        target = self.staging / href
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(page, encoding="utf-8")
        for name, data in resources.get("outputs", {}).items():
            (target.parent / name).parent.mkdir(parents=True, exist_ok=True)
            (target.parent / name).write_bytes(data)

    def chapter_page(self, chapter: Path, notebook, note: str) -> None:
        """The chapter's page (solutions folded under its exercises) and its executed notebook, to download."""
        import nbformat

        mark_exercises(notebook)
        solutions = CHAPTERS_DIR / "solutions" / chapter.name
        extra = {"solutions": highlighted(solutions, line_numbers=False),
                 "solutions_path": f"chapters/solutions/{chapter.name}",
                 "solutions_href": self.links.page(f"chapters/solutions/{chapter.name}")} if solutions.is_file() else {}
        downloads = (f' Download: <a href="notebooks/{chapter.stem}.ipynb">the executed notebook</a>, '
                     f'<a href="{self.links.page(f"chapters/{chapter.name}")}">the script</a>.')
        self.render(notebook, f"{chapter.stem}.html", CHAPTERS_DIR, title=chapter_title(chapter), note=note + downloads,
                    **extra)
        (self.staging / "notebooks").mkdir(exist_ok=True)
        nbformat.write(notebook, self.staging / "notebooks" / f"{chapter.stem}.ipynb")

    def markdown_page(self, text: str, href: str, title: str, base: Path) -> None:
        import nbformat

        notebook = nbformat.v4.new_notebook(cells=[nbformat.v4.new_markdown_cell(text)])
        self.render(notebook, href, base, title=title)

    def source_pages(self) -> None:
        """A highlighted page, with line anchors (#L-12), for every repository file a page links to."""
        for relative in sorted(self.links.linked):
            path = self.links.files[relative]
            body = (f'<h1><code>{html.escape(relative)}</code></h1><div class="book-source">'
                    f"{highlighted(path, line_numbers=True)}</div>")
            self.render({"cells": [], "metadata": {}, "nbformat": 4, "nbformat_minor": 5},
                        self.links.page(relative), ROOT, title=relative, body=body)


# ---------------------------------------------------------------------------------------------- executing

def kernel_env() -> dict:
    """The chapters' environment in tests/chapters/test_chapters.py: this checkout first, one BLAS/Numba thread."""
    path = os.pathsep.join(p for p in (str(ROOT), os.environ.get("PYTHONPATH", "")) if p)
    return dict(os.environ, PYTHONPATH=path, MPLBACKEND="Agg", OPENBLAS_NUM_THREADS="1", OMP_NUM_THREADS="1",
                MKL_NUM_THREADS="1", NUMBA_NUM_THREADS="1")


def execute(chapter: Path, fast: bool):
    """The chapter as an executed notebook; BuildError naming the chapter and its first error otherwise."""
    import jupytext
    import nbclient
    import nbformat
    from nbclient.exceptions import CellExecutionError

    notebook = jupytext.read(chapter)
    if fast:
        notebook.cells.insert(0, nbformat.v4.new_code_cell('import sys\nsys.argv.append("--fast")'))
    client = nbclient.NotebookClient(notebook, timeout=TIMEOUT_S, kernel_name="python3",
                                     resources={"metadata": {"path": str(CHAPTERS_DIR)}})
    try:
        client.execute(env=kernel_env())
    except CellExecutionError as error:
        raise BuildError(f"{chapter.name}: {error.ename}: {error.evalue}".rstrip()) from None
    except Exception as error:                                    # a dead kernel, a timeout, no kernel at all
        first = (str(error).strip().splitlines() or [""])[0]
        raise BuildError(f"{chapter.name}: {type(error).__name__}: {first}") from None
    if fast:
        notebook.cells.pop(0)
    printed = "".join(out.get("text", "") for cell in notebook.cells if cell.cell_type == "code"
                      for out in cell.get("outputs", []) if out.output_type == "stream")
    if f"chapter {chapter.name[:2]} OK" not in printed:
        raise BuildError(f"{chapter.name}: the chapter did not reach its end (no 'chapter {chapter.name[:2]} OK')")
    for cell in notebook.cells:
        if cell.cell_type != "code":
            continue
        if any(out.output_type == "error" for out in cell.get("outputs", [])) or cell.execution_count is None:
            raise BuildError(f"{chapter.name}: a cell did not run cleanly:\n{cell.source[:200]}")
        if cell.metadata.get("title", "").startswith("CHECK"):
            cell.metadata["book_check"] = "passed"
    return notebook


def mark_exercises(notebook) -> None:
    """The markdown cell that holds the exercises gets the folded solutions under it."""
    for cell in notebook.cells:
        if cell.cell_type == "markdown" and "## Exercises" in cell.source:
            cell.metadata["book_solutions"] = True


def build_note(fast: bool) -> str:
    try:
        commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True, text=True,
                                timeout=30).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        commit = ""
    sizes = "the --fast sizes (smaller models and shorter runs: numbers differ from a full run)" if fast \
        else "full size"
    return f"Built {datetime.date.today().isoformat()}{f' from commit {commit}' if commit else ''}, at {sizes}."


# ---------------------------------------------------------------------------------------------- the command

def check_out_folder(out: Path) -> None:
    if out.exists() and (not out.is_dir() or (any(out.iterdir()) and not (out / MARKER).is_file())):
        raise BuildError(f"--out {out} exists and is not a book this command built: choose another folder")


def select(only: str | None) -> list[Path]:
    chapters = chapter_files()
    if not only:
        return chapters
    wanted = {n.strip().zfill(2) for n in only.split(",") if n.strip()}
    unknown = wanted - {p.name[:2] for p in chapters}
    if unknown:
        raise BuildError(f"--only names chapters that do not exist: {', '.join(sorted(unknown))}")
    return [p for p in chapters if p.name[:2] in wanted]


def build(out: Path, fast: bool, only: str | None) -> Path:
    check_out_folder(out)
    chapters, selected = chapter_files(), select(only)
    out.parent.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=f".{out.name}-", dir=out.parent))
    try:
        executed = {}
        for i, chapter in enumerate(selected, start=1):
            start = time.perf_counter()
            executed[chapter] = execute(chapter, fast)
            print(f"[{i}/{len(selected)}] {chapter.name}: ok, {time.perf_counter() - start:.1f} s", flush=True)
        book = Book(chapters, selected, staging)
        note = build_note(fast)
        for chapter, notebook in executed.items():
            book.chapter_page(chapter, notebook, note)
        start_text = f"{note}\n\n" + (CHAPTERS_DIR / "README.md").read_text(encoding="utf-8")
        book.markdown_page(start_text, "index.html", "The chapters", CHAPTERS_DIR)
        book.markdown_page((ROOT / "REPRODUCTION_NOTES.md").read_text(encoding="utf-8"), "reproduction_notes.html",
                           "Reproduction notes", ROOT)
        book.source_pages()
        (staging / "static").mkdir(exist_ok=True)
        shutil.copy2(TEMPLATE_DIR / "book.css", staging / "static" / "book.css")
        (staging / "static" / "pygments.css").write_text(pygments_css(), encoding="utf-8")
        (staging / MARKER).write_text("built by python chapters/book.py; replaced on the next build\n")
    except BaseException:
        shutil.rmtree(staging, ignore_errors=True)
        raise
    if out.exists():
        shutil.rmtree(out)
    staging.rename(out)
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="Execute the chapters and build them as a static HTML book.")
    parser.add_argument("--fast", action="store_true", help="the chapters' --fast sizes, as in CI")
    parser.add_argument("--only", metavar="NN,NN", help="build only these chapters, e.g. 05,07,09")
    parser.add_argument("--out", type=Path, default=ROOT / "build" / "book",
                        help="the book's folder (default: build/book, ignored by git)")
    args = parser.parse_args(argv)
    missing = [m for m in ("nbconvert", "latex2mathml", "jupytext", "nbclient") if not _importable(m)]
    if missing:
        print(f"error: the book needs {', '.join(missing)}: pip install -e \".[book]\"", file=sys.stderr)
        return 2
    start = time.perf_counter()
    try:
        out = build(args.out.resolve(), args.fast, args.only)
    except BuildError as error:
        print(f"error: {error}", file=sys.stderr)
        return 1
    print(f"book: {out / 'index.html'} ({time.perf_counter() - start:.0f} s)")
    return 0


def _importable(module: str) -> bool:
    import importlib.util

    return importlib.util.find_spec(module) is not None


if __name__ == "__main__":
    sys.exit(main())
