"""train/ reads as its pipeline: every import goes down the stages, every module says what it is for, and no
modules of train/ or transformer/ import each other in a circle (function-local imports included)."""

import ast
from pathlib import Path

import pytest
from import_graph import a_cycle, import_graph

ROOT = Path(__file__).resolve().parents[2]
TRAIN = ROOT / "train"
FOUNDATION = {"errors", "config", "threads"}
CLI = {"__main__", "commands", "doctor"}
STAGES = ["parsing", "data", "evaluate", "distributed", "run", "experiments"]  # the order of train/__init__.py
MODULES = sorted(p for p in TRAIN.rglob("*.py"))


def layer(module: str) -> int:
    """0 the foundation, 1.. the stages in order, then the CLI."""
    parts = module.split(".")
    if parts[0] != "train" or len(parts) == 1:
        raise ValueError(module)
    head = parts[1]
    if head in FOUNDATION:
        return 0
    if head in CLI:
        return len(STAGES) + 1
    return STAGES.index(head) + 1


def module_name(path: Path) -> str:
    parts = path.relative_to(TRAIN.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def train_imports(path: Path) -> list[tuple[int, str]]:
    """(line, module) for every import of a train module, at any depth (imports inside functions count)."""
    found = []
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            found += [(node.lineno, a.name) for a in node.names if a.name.startswith("train.")]
        elif isinstance(node, ast.ImportFrom):
            assert node.level == 0, f"{path}:{node.lineno}: relative import; write train.<stage>.<module>"
            if node.module == "train":
                found += [(node.lineno, f"train.{a.name}") for a in node.names]
            elif node.module and node.module.startswith("train."):
                found.append((node.lineno, node.module))
    return found


def test_the_stage_list_is_the_packages_on_disk():
    packages = {p.parent.name for p in TRAIN.glob("*/__init__.py")}
    assert packages == set(STAGES)
    top = {p.stem for p in TRAIN.glob("*.py")} - {"__init__"}
    assert top == FOUNDATION | CLI, "a module at the top of train/ is neither the foundation nor the CLI"


@pytest.mark.parametrize("path", MODULES, ids=lambda p: str(p.relative_to(TRAIN)))
def test_imports_only_go_down_the_stages(path):
    name = module_name(path)
    if name == "train":
        return
    own = layer(name)
    for line, imported in train_imports(path):
        there = layer(imported)
        if own == 0:
            assert there == 0, f"{path.name}:{line}: the foundation imports {imported}"
        else:
            assert there <= own, f"{name}:{line} imports {imported}, a later stage"
        assert there <= len(STAGES) or own == len(STAGES) + 1, f"{name}:{line}: only the CLI imports the CLI"


@pytest.mark.parametrize("path", MODULES, ids=lambda p: str(p.relative_to(TRAIN)))
def test_each_module_opens_with_what_it_is_for_and_stays_small(path):
    tree = ast.parse(path.read_text())
    doc = ast.get_docstring(tree)
    assert doc and len(doc.splitlines()[0]) > 20, f"{path}: no first line saying what the module is for"
    assert len(path.read_text().splitlines()) <= 400, f"{path}: over 400 lines; split it by purpose"


def test_a_planted_upward_import_is_caught(tmp_path):
    """The check above can fail: a data module importing the run stage is reported."""
    bad = tmp_path / "bad.py"
    bad.write_text('"""A data module that reaches up into the run stage."""\nfrom train.run.loop import fit\n')
    imports = train_imports(bad)
    assert imports == [(2, "train.run.loop")] and layer("train.run.loop") > layer("train.data.files")


@pytest.mark.parametrize("package", ["train", "transformer"])
def test_no_modules_import_each_other_in_a_circle(package):
    """A helper two modules share lives below both; a function-local import that dodges a circle is still one."""
    cycle = a_cycle(import_graph(ROOT / package))
    assert not cycle, "import circle: " + " -> ".join(cycle)


def test_a_planted_import_circle_is_caught(tmp_path):
    """The check above can fail: two modules importing each other (one inside a function) are a circle."""
    package = tmp_path / "pkg"
    package.mkdir()
    (package / "__init__.py").write_text("")
    (package / "a.py").write_text("from pkg.b import helper\n")
    (package / "b.py").write_text("def helper():\n    from . import a\n")
    (package / "c.py").write_text("from pkg import a, b\n")
    graph = import_graph(package)
    assert graph["pkg.c"] == {"pkg.a", "pkg.b"} and a_cycle(graph) == ["pkg.a", "pkg.b", "pkg.a"]
    assert a_cycle({"x": {"y"}, "y": set()}) == []
