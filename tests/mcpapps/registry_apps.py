"""Support of the MCP Apps browser tests (public names): what every frame records, a free port,
an npm MCP App example server run on loopback."""

from __future__ import annotations

import socket
import subprocess
import time
from pathlib import Path

import pytest

from tests.nodejs import VAR, NodeUnavailable, node22, node_env, npm_install

# Recorded in every frame (the proxy's included, at document start): each message it receives.
RECORDER = """
window.__seen = [];
window.addEventListener("message", (e) => {
  let text;
  try { text = JSON.stringify(e.data); } catch (err) { text = String(e.data); }
  window.__seen.push(text);
  if (window.__record) window.__record(text);
}, true);
"""


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def node_app_server(prefix: str, package: str):
    """Run an npm MCP App example server on 127.0.0.1 (it listens on every interface; PORT from its
    main.ts); yields its MCP URL."""
    try:
        modules = npm_install(VAR / prefix, package)
        node = node22()
    except NodeUnavailable as exc:
        pytest.fail(str(exc))
    port = free_port()
    log = (VAR / f"{prefix}-{port}.log").open("w")
    entry = modules / package.rsplit("@", 1)[0] / "dist" / "index.js"
    proc = subprocess.Popen([node, str(entry)], env={**node_env(node), "PORT": str(port)}, stdout=log,
                            stderr=subprocess.STDOUT, cwd=str(entry.parent))
    try:
        for _ in range(300):
            try:
                socket.create_connection(("127.0.0.1", port), timeout=0.2).close()
                break
            except OSError:
                if proc.poll() is not None:
                    pytest.fail(f"{package} ended: {Path(log.name).read_text()[-2000:]}")
                time.sleep(0.1)
        else:
            pytest.fail(f"{package} did not listen")
        yield f"http://127.0.0.1:{port}/mcp"
    finally:
        proc.terminate()
        proc.wait(timeout=10)
        log.close()
