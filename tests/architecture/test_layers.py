"""The layers of mrtrweb (issue 27), written once as import-linter contracts in pyproject.toml
(``[tool.importlinter]``): gate and mcp at the bottom and free of Django, views / live /
management at the top, demo and bench imported by nothing of the product. ``lint-imports`` keeps
them here, and is shown to fail on a wrong import; no module imports another package's private
name."""

from __future__ import annotations

import ast
import os
import shutil
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PKG = ROOT / "mrtrweb"


def lint_imports(cwd: Path) -> subprocess.CompletedProcess[str]:
    exe = Path(sys.executable).with_name("lint-imports")
    command = [str(exe)] if exe.exists() else [shutil.which("lint-imports") or "lint-imports"]
    # the package found first on the path is the one in cwd (the copy below, or this checkout)
    env = {**os.environ, "PYTHONPATH": str(cwd)}
    return subprocess.run([*command, "--no-cache", str(cwd / "pyproject.toml")], cwd=cwd, env=env,
                          capture_output=True, text=True, timeout=300)


def test_the_contracts_are_kept():
    proc = lint_imports(ROOT)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "0 broken" in proc.stdout


def _copy(tmp_path: Path) -> Path:
    shutil.copytree(PKG, tmp_path / "mrtrweb",
                    ignore=shutil.ignore_patterns("__pycache__", "static", "templates", "locale"))
    shutil.copy(ROOT / "pyproject.toml", tmp_path / "pyproject.toml")
    return tmp_path


def _add_import(path: Path, line: str) -> None:
    src = path.read_text()
    path.write_text(src.replace("from __future__ import annotations\n",
                                f"from __future__ import annotations\n\n{line}\n", 1))


def test_a_wrong_import_breaks_the_contracts(tmp_path):
    """The gate (bottom, no Django) importing a view: the layers and the no-Django contract break."""
    copy = _copy(tmp_path)
    assert lint_imports(copy).returncode == 0  # the copy as it is: kept
    _add_import(copy / "mrtrweb" / "gate" / "ids.py", "from mrtrweb.views import common  # noqa: F401")
    proc = lint_imports(copy)
    assert proc.returncode != 0, proc.stdout
    assert "BROKEN" in proc.stdout
    assert "mrtrweb.gate.ids -> mrtrweb.views.common" in proc.stdout
    assert "the gate and the MCP client import no Django or Channels BROKEN" in " ".join(proc.stdout.split())


def test_a_product_module_importing_the_demo_breaks_the_contracts(tmp_path):
    copy = _copy(tmp_path)
    _add_import(copy / "mrtrweb" / "operations" / "starting.py", "from mrtrweb.demo import server  # noqa: F401")
    proc = lint_imports(copy)
    assert proc.returncode != 0, proc.stdout
    assert "mrtrweb.operations.starting -> mrtrweb.demo.server" in proc.stdout


def _package(module: str, path: Path) -> str:
    return module if path.name == "__init__.py" else module.rsplit(".", 1)[0]


def private_imports() -> list[str]:
    """``from X import _name`` where X is in another package of mrtrweb than the importer."""
    found = []
    for path in PKG.rglob("*.py"):
        if "migrations" in path.parts:
            continue
        rel = path.relative_to(ROOT).with_suffix("")
        module = ".".join(rel.parts[:-1] if rel.name == "__init__" else rel.parts)
        package = _package(module, path)
        for node in ast.walk(ast.parse(path.read_text())):
            if not isinstance(node, ast.ImportFrom):
                continue
            if node.level:
                parts = package.split(".")
                target = ".".join(parts[:len(parts) - (node.level - 1)]) + (f".{node.module}" if node.module else "")
            else:
                target = node.module or ""
            if not target.startswith("mrtrweb"):
                continue
            target_pkg = target if (ROOT / target.replace(".", "/")).is_dir() else target.rsplit(".", 1)[0]
            for alias in node.names:
                if alias.name.startswith("_") and not alias.name.startswith("__") and target_pkg != package:
                    found.append(f"{module}: from {target} import {alias.name}")
    return sorted(found)


def test_no_private_name_crosses_a_package():
    assert private_imports() == []
