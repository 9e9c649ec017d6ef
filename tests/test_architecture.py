"""The shape of the code (ARCHITECTURE.md): no import circles, no module past 500
lines. CI's import-linter contract (pyproject.toml) holds the layers; this checks
the whole module graph on its own, imports inside functions included."""

from __future__ import annotations

from pathlib import Path

import grimp

PACKAGE = Path(__file__).resolve().parent.parent / "mq_cli"
MAX_LINES = 500


def _cycles(graph: grimp.ImportGraph) -> list[list[str]]:
    """Strongly connected groups of more than one module (Tarjan)."""
    modules = sorted(graph.modules)
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []
    counter = 0

    def visit(module: str) -> None:
        nonlocal counter
        work = [(module, iter(sorted(graph.find_modules_directly_imported_by(module))))]
        index[module] = low[module] = counter
        counter += 1
        stack.append(module)
        on_stack.add(module)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is not None:
                if child not in index:
                    index[child] = low[child] = counter
                    counter += 1
                    stack.append(child)
                    on_stack.add(child)
                    work.append(
                        (child, iter(sorted(graph.find_modules_directly_imported_by(child))))
                    )
                elif child in on_stack:
                    low[node] = min(low[node], index[child])
                continue
            work.pop()
            if work:
                parent = work[-1][0]
                low[parent] = min(low[parent], low[node])
            if low[node] == index[node]:
                group = []
                while True:
                    top = stack.pop()
                    on_stack.discard(top)
                    group.append(top)
                    if top == node:
                        break
                if len(group) > 1:
                    found.append(sorted(group))

    for module in modules:
        if module not in index:
            visit(module)
    return found


def test_no_import_circles():
    graph = grimp.build_graph("mq_cli", exclude_type_checking_imports=False)
    # A package's __init__ importing its own modules is how a package re-exports:
    # count only imports between modules.
    for module in list(graph.modules):
        for child in graph.find_children(module):
            if graph.direct_import_exists(importer=module, imported=child):
                graph.remove_import(importer=module, imported=child)
    assert _cycles(graph) == []


def test_no_module_is_past_500_lines():
    long = {
        str(path.relative_to(PACKAGE.parent)): count
        for path in PACKAGE.rglob("*.py")
        if (count := len(path.read_text().splitlines())) > MAX_LINES
    }
    assert long == {}
