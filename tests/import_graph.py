"""The import graph of a package, read from its source with `ast`: for the layout tests of train/, transformer/
and minitensor/ (imports inside functions count: a function-local import is still a dependency)."""

import ast
from pathlib import Path


def import_graph(package: Path) -> dict[str, set[str]]:
    """module -> the modules of the same package it imports, at any depth (`from a.b import c` names a.b.c
    when c is a module; relative imports resolved), built from the source with `ast`."""
    top = package.name
    modules = {module_name_in(package, p) for p in package.rglob("*.py")}
    graph = {}
    for path in package.rglob("*.py"):
        name = module_name_in(package, path)
        base = name if path.stem == "__init__" else name.rpartition(".")[0]
        edges = set()
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Import):
                edges |= {a.name for a in node.names if a.name in modules}
            elif isinstance(node, ast.ImportFrom):
                parts = base.split(".")[:len(base.split(".")) - node.level + 1] if node.level else []
                source = ".".join(parts + ([node.module] if node.module else []))
                if source.split(".")[0] != top:
                    continue
                for alias in node.names:
                    edges.add(f"{source}.{alias.name}" if f"{source}.{alias.name}" in modules else source)
        graph[name] = (edges & modules) - {name}
    return graph


def module_name_in(package: Path, path: Path) -> str:
    parts = path.relative_to(package.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def a_cycle(graph: dict[str, set[str]]) -> list[str]:
    """One circle of imports in `graph` (its modules, the first repeated at the end), or [] when there is none."""
    state, path = {}, []

    def visit(node):
        state[node], path[len(path):] = "open", [node]
        for nxt in sorted(graph.get(node, ())):
            if state.get(nxt) == "open":
                return path[path.index(nxt):] + [nxt]
            if nxt not in state and (found := visit(nxt)):
                return found
        state[node] = "done"
        path.pop()
        return []

    for start in sorted(graph):
        if start not in state and (found := visit(start)):
            return found
    return []
