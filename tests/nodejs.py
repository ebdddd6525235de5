"""Node.js for the tests that run JavaScript peers (the official conformance suite, a TypeScript
MCP server): Node >= 22 and npm packages, installed on first use under ``var/`` (git-ignored).

* :func:`node22` returns a Node >= 22 binary: the machine's ``node`` when it is new enough, else
  the npm package ``node@22`` installed into ``var/node22`` (it carries the binary for this
  platform, from the npm registry).
* :func:`npm_install` installs pinned packages into a prefix once (guarded by a file lock, so
  parallel test processes do not install twice) and returns the prefix's ``node_modules``.

Both raise :class:`NodeUnavailable` with the reason when npm is missing or an install fails.
"""

from __future__ import annotations

import fcntl
import os
import shutil
import subprocess
from contextlib import contextmanager
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
VAR = ROOT / "var"
NODE22_PREFIX = VAR / "node22"
#: the official conformance suite (tests/interop/test_conformance.py), pinned
CONFORMANCE_SUITE = "@modelcontextprotocol/conformance@0.2.0-alpha.12"
#: axe-core (the accessibility checks of the browser tests), installed with npm into ``var/node``
AXE_PREFIX = VAR / "node"
AXE_JS = AXE_PREFIX / "node_modules" / "axe-core" / "axe.min.js"


class NodeUnavailable(RuntimeError):
    """Node >= 22 or an npm package could not be provided."""


@contextmanager
def _locked(name: str):
    VAR.mkdir(parents=True, exist_ok=True)
    with open(VAR / f".{name}.lock", "w") as fh:
        fcntl.flock(fh, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(fh, fcntl.LOCK_UN)


def _major(node: str) -> int:
    try:
        out = subprocess.run([node, "--version"], capture_output=True, text=True, timeout=30).stdout.strip()
        return int(out.lstrip("v").split(".")[0])
    except (OSError, ValueError, subprocess.SubprocessError):
        return 0


def _npm() -> str:
    npm = shutil.which("npm")
    if npm is None:
        raise NodeUnavailable("npm is not installed (Debian: apt-get install npm)")
    return npm


def npm_install(prefix: Path, *packages: str, marker: str | None = None) -> Path:
    """Install ``packages`` (pinned specs such as ``"axe-core@4"``) into ``prefix`` unless
    ``prefix/node_modules/<marker>`` already exists (``marker`` defaults to the first package's
    name). Returns ``prefix/node_modules``.

    Raises:
        NodeUnavailable: npm is missing or the install failed (npm's output is in the message).
    """
    first = packages[0]
    name = marker or (first.rsplit("@", 1)[0] if first.count("@") > (1 if first.startswith("@") else 0) else first)
    modules = prefix / "node_modules"
    with _locked(prefix.name):
        if (modules / name).exists():
            return modules
        prefix.mkdir(parents=True, exist_ok=True)
        proc = subprocess.run([_npm(), "install", "--no-audit", "--no-fund", "--prefix", str(prefix), *packages],
                              capture_output=True, text=True, timeout=600)
        if proc.returncode != 0 or not (modules / name).exists():
            raise NodeUnavailable(f"npm install {' '.join(packages)} failed: {proc.stderr[-2000:]}")
    return modules


def node22() -> str:
    """Path of a Node >= 22 binary (the machine's, or ``var/node22``'s from the npm ``node@22``).

    Raises:
        NodeUnavailable: neither is available.
    """
    system = shutil.which("node")
    if system and _major(system) >= 22:
        return system
    modules = npm_install(NODE22_PREFIX, "node@22", marker="node")
    for candidate in (modules / ".bin" / "node", modules / "node" / "bin" / "node"):
        if candidate.exists() and _major(str(candidate)) >= 22:
            return str(candidate)
    raise NodeUnavailable(f"npm package node@22 in {NODE22_PREFIX} gave no usable Node >= 22 binary")


def node_env(node: str) -> dict[str, str]:
    """The environment for running JavaScript tools with ``node`` first on ``PATH``."""
    env = dict(os.environ)
    env["PATH"] = f"{Path(node).parent}{os.pathsep}{env.get('PATH', '')}"
    return env


def install_axe() -> Path:
    """``axe.min.js`` of axe-core 4 in :data:`AXE_PREFIX` (installed once, under the file lock).

    Raises:
        NodeUnavailable: npm is missing or the install failed.
    """
    if not AXE_JS.is_file():
        npm_install(AXE_PREFIX, "axe-core@4")
    if not AXE_JS.is_file():
        raise NodeUnavailable(f"npm did not install {AXE_JS}")
    return AXE_JS
