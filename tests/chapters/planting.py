"""Plant one bug in one function, then run a chapter with it: how test_chapter_bugs.py runs each variant.

    PLANTED_BUG='{"file": ..., "function": ..., "original": ..., "buggy": ...}' \\
        python tests/chapters/planting.py chapters/NN_title.py --fast [--check-solutions]

A plant names a file, a function in it by its qualified name ("SublayerConnection.forward",
"dropout_forward_v2") and a text to replace, exactly once, inside that function's lines only. The
file itself is never written: a library module (or a chapter's solutions) is compiled from the
planted text when it is first imported, and a chapter script is run from its planted text. So an
edit anywhere else in the file leaves the plant valid, and a plant whose function or text is gone
stops with a message naming both, before the chapter runs.

A planted module is compiled under the name of a copy of its text in a fresh temporary folder (its
`__file__` stays the real one): Numba's on-disk cache keys a kernel by its source file, so the
planted kernels compile from scratch there while every other module keeps using its cache.
"""
from __future__ import annotations

import ast
import importlib.abc
import importlib.util
import json
import os
import sys
import tempfile
import types
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


class PlantError(Exception):
    """The function to plant in, or the text inside it, is not where the plant says."""


def function_lines(source: str, qualname: str) -> tuple[int, int]:
    """The first (decorators included) and last line, 1-based, of function or class `qualname` in `source`."""
    scope, node = ast.parse(source).body, None
    for part in qualname.split("."):
        node = next((n for n in scope if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef))
                     and n.name == part), None)
        if node is None:
            raise PlantError(f"no function {qualname} (no {part} in its scope)")
        scope = node.body
    first = min([node.lineno] + [d.lineno for d in node.decorator_list])
    return first, node.end_lineno


def plant(source: str, qualname: str, original: str, buggy: str) -> str:
    """`source` with `original` replaced by `buggy` inside function `qualname`; the rest untouched."""
    first, last = function_lines(source, qualname)
    lines = source.splitlines(keepends=True)
    body = "".join(lines[first - 1:last])
    if body.count(original) != 1:
        raise PlantError(f"{qualname} holds the text to replace {body.count(original)} times, not once: "
                         f"{original!r}")
    return "".join(lines[:first - 1]) + body.replace(original, buggy) + "".join(lines[last:])


def module_name(file: str) -> str:
    """The name a file is imported under: solutions are imported from chapters/ (chapters/_common.py)."""
    parts = list(Path(file).with_suffix("").parts)
    if parts[:2] == ["chapters", "solutions"]:
        parts = parts[1:]
    if parts[-1] == "__init__":
        parts = parts[:-1]
    return ".".join(parts)


class PlantedModule(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    """Imports one module from its planted text."""

    def __init__(self, name: str, path: Path, source: str):
        self.name, self.path, self.source = name, path, source
        self.compiled_as = Path(tempfile.mkdtemp(prefix="planted_")) / path.name
        self.compiled_as.write_text(source, encoding="utf-8")

    def find_spec(self, fullname, path=None, target=None):
        if fullname != self.name:
            return None
        package = self.path.name == "__init__.py"
        return importlib.util.spec_from_file_location(
            fullname, self.path, loader=self, submodule_search_locations=[str(self.path.parent)] if package else None)

    def create_module(self, spec):
        return None

    def exec_module(self, module):
        exec(compile(self.source, str(self.compiled_as), "exec"), module.__dict__)


def planted_source(spec: dict) -> str:
    path = ROOT / spec["file"]
    return plant(path.read_text(encoding="utf-8"), spec["function"], spec["original"], spec["buggy"])


def run(chapter: Path, flags: list[str], spec: dict) -> None:
    """Run `chapter` as __main__ with `flags`, the bug of `spec` planted."""
    source = planted_source(spec)
    target = (ROOT / spec["file"]).resolve()
    chapter = chapter.resolve()
    if target != chapter:
        sys.meta_path.insert(0, PlantedModule(module_name(spec["file"]), target, source))
        source = chapter.read_text(encoding="utf-8")
    sys.argv = [str(chapter), *flags]
    sys.path.insert(0, str(chapter.parent))
    main = types.ModuleType("__main__")
    main.__file__ = str(chapter)
    sys.modules["__main__"] = main
    exec(compile(source, str(chapter), "exec"), main.__dict__)


if __name__ == "__main__":
    try:
        run(Path(sys.argv[1]), sys.argv[2:], json.loads(os.environ["PLANTED_BUG"]))
    except PlantError as error:
        sys.exit(f"the plant no longer fits the code: {error}")
