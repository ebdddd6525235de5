"""The package's import graph has no cycle (architecture: one concern per module, no import
cycles), counting the imports inside functions too: a cycle hidden in a local import is still a
cycle a newcomer has to untangle. ``from pkg import submodule`` is an edge to the submodule only;
imports under ``if TYPE_CHECKING:`` do not run and do not count."""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def _modules() -> dict[str, Path]:
    mods = {}
    for path in (ROOT / "mrtrweb").rglob("*.py"):
        if "migrations" in path.parts:
            continue
        rel = path.relative_to(ROOT).with_suffix("")
        mods[".".join(rel.parts[:-1] if rel.name == "__init__" else rel.parts)] = path
    return mods


def _targets(mods: dict[str, Path], module: str, node: ast.ImportFrom) -> list[str]:
    package = module if mods[module].name == "__init__.py" else module.rsplit(".", 1)[0]
    if node.level:
        parts = package.split(".")
        base = ".".join(parts[:len(parts) - (node.level - 1)])
        target = base + ("." + node.module if node.module else "")
    else:
        target = node.module or ""
    out, plain = [], False
    for alias in node.names:
        if f"{target}.{alias.name}" in mods:
            out.append(f"{target}.{alias.name}")
        else:
            plain = True
    if plain and target in mods:
        out.append(target)
    return out


def import_graph() -> dict[str, set[str]]:
    mods = _modules()
    graph: dict[str, set[str]] = {m: set() for m in mods}
    for module, path in mods.items():
        tree = ast.parse(path.read_text())
        for node in ast.walk(tree):
            if isinstance(node, ast.If) and getattr(node.test, "id", getattr(node.test, "attr", "")) == "TYPE_CHECKING":
                node.body = []
        for node in ast.walk(tree):
            if isinstance(node, ast.ImportFrom):
                graph[module].update(t for t in _targets(mods, module, node) if t != module)
            elif isinstance(node, ast.Import):
                graph[module].update(a.name for a in node.names if a.name in mods and a.name != module)
    return graph


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan, iterative)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []
    counter = 0
    for root in graph:
        if root in index:
            continue
        work = [(root, iter(sorted(graph[root])))]
        index[root] = low[root] = counter
        counter += 1
        stack.append(root)
        on_stack.add(root)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is not None:
                if child not in index:
                    index[child] = low[child] = counter
                    counter += 1
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(sorted(graph[child]))))
                elif child in on_stack:
                    low[node] = min(low[node], index[child])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                component = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    component.append(member)
                    if member == node:
                        break
                if len(component) > 1:
                    found.append(sorted(component))
    return found


def test_no_import_cycles():
    assert cycles(import_graph()) == []


def test_the_checker_sees_a_cycle_through_a_local_import():
    graph = {"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}
    assert cycles(graph) == [["a", "b", "c"]]
    real = import_graph()
    # the graph holds the edges of local imports: operations' calls import the workers' leases
    assert "mrtrweb.runtime.workers" in real["mrtrweb.operations.calls"]
    assert "mrtrweb.operations" not in real["mrtrweb.runtime.workers"]


#: the modules allowed over ~400 lines (issue 27 split every one: none)
LONG: set[str] = set()


def test_modules_stay_short():
    """One concern per module: no module of the package grows past ~400 lines (:data:`LONG`
    would name an exception; it names none)."""
    paths = [p for p in (ROOT / "mrtrweb").rglob("*.py") if "migrations" not in p.parts]
    long = {str(p.relative_to(ROOT)): n for p in paths if (n := len(p.read_text().splitlines())) > 400}
    assert set(long) <= LONG, {k: v for k, v in long.items() if k not in LONG}
