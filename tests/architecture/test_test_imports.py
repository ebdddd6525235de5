"""No test file imports another (docs/tests.md, "Where the tests are"): fixtures shared by several
files are in a ``conftest.py`` (or a plugin ``tests/conftest.py`` lists), helpers in support modules
with public names. A test module imported by another runs its module-level code twice, and its
private names become another file's API."""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def _is_test_module(name: str) -> bool:
    return name.rsplit(".", 1)[-1].startswith("test_")


def test_no_test_file_imports_another():
    found = []
    for path in sorted((ROOT / "tests").rglob("test_*.py")):
        if "embed_project" in path.parts or "thirdparty_servers" in path.parts:
            continue
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.ImportFrom):
                names = [node.module or ""] + [f"{node.module or ''}.{a.name}" for a in node.names]
                if any(_is_test_module(n) for n in names if n):
                    found.append(f"{path.relative_to(ROOT)}:{node.lineno}")
            elif isinstance(node, ast.Import):
                if any(_is_test_module(a.name) for a in node.names):
                    found.append(f"{path.relative_to(ROOT)}:{node.lineno}")
    assert found == []
