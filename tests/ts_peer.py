"""The TypeScript MRTR server (``tests/ts_server/``, written with ``@modelcontextprotocol/server``)
as a real peer for the tests: installed, type-checked, started on loopback, recorded.

* :func:`build` installs the pinned npm packages of ``tests/ts_server/package.json`` into
  ``var/ts_server`` (once, through :func:`tests.nodejs.npm_install`), copies the TypeScript source
  there and compiles it with the pinned ``typescript`` (strict type-check against the SDK's own
  types; skipped when the compiled output is of the same source).
* :func:`start` runs ``node build/server.mjs --port 0 --log FILE`` with Node >= 22
  (:func:`tests.nodejs.node22`), waits for its ``listening URL`` line and returns a
  :class:`TsServer`.
* :class:`TsServer` reads the server's JSON-lines log: every HTTP request the server got (raw
  JSON-RPC body) and its response, every ``requestState`` a tool minted, every state the SDK's
  verify hook consumed or refused.
* :func:`ts_server` is a module-scoped pytest fixture around :func:`start`/:meth:`TsServer.stop`.
"""

from __future__ import annotations

import hashlib
import json
import shutil
import subprocess
import threading
from pathlib import Path
from typing import Any

import pytest

from tests.nodejs import VAR, _locked, node22, node_env, npm_install

SOURCE = Path(__file__).resolve().parent / "ts_server"
PREFIX = VAR / "ts_server"
SDK_PACKAGE = "@modelcontextprotocol/server"
PROTOCOL_VERSION = "2026-07-28"
PROTOCOL_META = "io.modelcontextprotocol/protocolVersion"


def pinned_packages() -> list[str]:
    """``name@version`` of every dependency in ``tests/ts_server/package.json`` (exact pins only)."""
    manifest = json.loads((SOURCE / "package.json").read_text())
    specs = []
    for section in ("dependencies", "devDependencies"):
        for name, version in manifest.get(section, {}).items():
            if not version[:1].isdigit():
                raise ValueError(f"{name}@{version}: pin an exact version in tests/ts_server/package.json")
            specs.append(f"{name}@{version}")
    return specs


def _installed_version(name: str) -> str:
    return json.loads((PREFIX / "node_modules" / name / "package.json").read_text())["version"]


def build() -> Path:
    """Install, copy and compile; returns the compiled ``server.mjs`` (an ES module).

    Raises:
        tests.nodejs.NodeUnavailable: npm or Node >= 22 is missing, or an install failed.
        RuntimeError: the TypeScript does not compile (tsc's output in the message).
    """
    specs = pinned_packages()
    npm_install(PREFIX, *specs, marker=SDK_PACKAGE)
    for spec in specs:  # an older var/ts_server with other versions is reinstalled
        name, version = spec.rsplit("@", 1)
        if _installed_version(name) != version:
            shutil.rmtree(PREFIX / "node_modules" / name)
            npm_install(PREFIX, *specs, marker=name)
    node = node22()
    sources = sorted(p for p in (SOURCE / "src").rglob("*.mts"))
    digest = hashlib.sha256()
    for path in [SOURCE / "tsconfig.json", SOURCE / "package.json", *sources]:
        digest.update(path.name.encode() + b"\0" + path.read_bytes() + b"\0")
    stamp = PREFIX / "build" / ".source-sha256"
    with _locked("ts_server_build"):
        if stamp.exists() and stamp.read_text() == digest.hexdigest():
            return PREFIX / "build" / "server.mjs"
        shutil.rmtree(PREFIX / "src", ignore_errors=True)
        shutil.rmtree(PREFIX / "build", ignore_errors=True)
        shutil.copytree(SOURCE / "src", PREFIX / "src")
        shutil.copy2(SOURCE / "tsconfig.json", PREFIX / "tsconfig.json")
        tsc = PREFIX / "node_modules" / "typescript" / "bin" / "tsc"
        proc = subprocess.run([node, str(tsc), "-p", str(PREFIX / "tsconfig.json")], cwd=PREFIX,
                              capture_output=True, text=True, timeout=300, env=node_env(node))
        if proc.returncode != 0:
            raise RuntimeError(f"tsc failed:\n{proc.stdout[-4000:]}{proc.stderr[-2000:]}")
        stamp.write_text(digest.hexdigest())
    return PREFIX / "build" / "server.mjs"


class TsServer:
    """A running TypeScript MRTR server and its request log."""

    def __init__(self, proc: subprocess.Popen[str], url: str, log_path: Path) -> None:
        self.proc = proc
        self.url = url
        self.log_path = log_path

    # -- the log -----------------------------------------------------------------------------------

    def entries(self, kind: str | None = None) -> list[dict[str, Any]]:
        """The log's entries (``request``, ``response``, ``minted``, ``consumed``, ``refused``,
        ``sdk-error``, ``http-error``), oldest first."""
        if not self.log_path.exists():
            return []
        out = [json.loads(line) for line in self.log_path.read_text().splitlines() if line.strip()]
        return [e for e in out if kind is None or e.get("kind") == kind]

    def rpc_requests(self, method: str | None = None) -> list[dict[str, Any]]:
        """The JSON-RPC requests (bodies) the server received over HTTP, oldest first."""
        bodies = [e["body"] for e in self.entries("request") if isinstance(e.get("body"), dict)]
        return [b for b in bodies if "id" in b and (method is None or b.get("method") == method)]

    def tool_calls(self, tool: str) -> list[dict[str, Any]]:
        return [b for b in self.rpc_requests("tools/call") if b.get("params", {}).get("name") == tool]

    def retries(self, tool: str) -> list[dict[str, Any]]:
        """``tools/call`` of ``tool`` that carried ``requestState`` or ``inputResponses``."""
        return [b for b in self.tool_calls(tool) if {"requestState", "inputResponses"} & set(b.get("params", {}))]

    def minted(self, tool: str) -> list[dict[str, Any]]:
        """The states ``tool`` minted (``requestState`` wire string, ``payload``, ``keys`` asked)."""
        return [e for e in self.entries("minted") if e.get("tool") == tool]

    def response_to(self, request_id: Any) -> dict[str, Any] | None:
        """The response body the server sent for the JSON-RPC request ``request_id``."""
        seqs = {e["seq"] for e in self.entries("request")
                if isinstance(e.get("body"), dict) and e["body"].get("id") == request_id}
        for e in self.entries("response"):
            if e["seq"] in seqs:
                return e.get("body")
        return None

    def clear(self) -> None:
        self.log_path.write_text("")

    # -- the process -------------------------------------------------------------------------------

    def stop(self, timeout_s: float = 10.0) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout_s)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(timeout_s)


def start(log_path: Path, timeout_s: float = 30.0) -> TsServer:
    """Build and start the server on a free loopback port; returns once it listens."""
    script = build()
    node = node22()
    log_path.parent.mkdir(parents=True, exist_ok=True)
    log_path.write_text("")
    stderr = log_path.with_suffix(".stderr")
    with open(stderr, "w") as err_fh:
        proc = subprocess.Popen([node, str(script), "--port", "0", "--log", str(log_path)], cwd=PREFIX,
                                stdout=subprocess.PIPE, stderr=err_fh, text=True, env=node_env(node))
    ready: list[str] = []
    reader = threading.Thread(target=lambda: ready.append(proc.stdout.readline() if proc.stdout else ""),
                              daemon=True)
    reader.start()
    reader.join(timeout_s)
    line = ready[0].strip() if ready else ""
    if not line.startswith("listening http://127.0.0.1:"):
        proc.kill()
        proc.wait(10)
        raise RuntimeError(f"the TypeScript server did not start (stdout {line!r}): {stderr.read_text()[-2000:]}")
    return TsServer(proc, line.split(" ", 1)[1], log_path)  # the port is bound: requests are served


@pytest.fixture(scope="module")
def ts_server(tmp_path_factory):
    """The TypeScript MRTR server on 127.0.0.1 for one test module (log under the tmp path)."""
    server = start(tmp_path_factory.mktemp("ts_server") / "requests.jsonl")
    yield server
    server.stop()
    assert not server.entries("http-error"), server.entries("http-error")
