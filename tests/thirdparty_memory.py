"""The npm knowledge-graph server ``@modelcontextprotocol/server-memory`` (stdio only, TypeScript
SDK 1.x) behind ``supergateway`` (``--stateful``: one stdio child per HTTP session), for the
generated argument fields (issue 28 item 2): its ``create_entities`` takes an array of objects each
holding an array of strings, ``delete_observations`` an array of objects, ``open_nodes`` an array
of strings.

Installed with supergateway into ``var/memory`` (pinned, the newest ``npm view`` gave, 2026-12-04),
run with :func:`tests.nodejs.node22`; the graph is kept in the file given (``MEMORY_FILE_PATH``).

API::

    server = start_memory(graph_file, log_path)   # -> tests.thirdparty.ThirdPartyServer
    server.stop()
"""

from __future__ import annotations

import shlex
import shutil
from pathlib import Path

from tests.nodejs import VAR, NodeUnavailable, _locked, node22, node_env, npm_install
from tests.thirdparty import (SUPERGATEWAY_PACKAGE, SUPERGATEWAY_VERSION, InstallFailed, ThirdPartyServer, _npm_version,
                              _server_env, _spawn, _wait_listening, free_port)

MEMORY_PACKAGE = "@modelcontextprotocol/server-memory"
MEMORY_VERSION = "2026.8.31"
MEMORY_PREFIX = VAR / "memory"


def install_memory() -> tuple[Path, Path]:
    """Install the pinned memory server and supergateway into ``var/memory`` (once; another
    installed version of either is replaced). Returns both ``dist/index.js`` (memory, supergateway).

    Raises:
        InstallFailed: npm is missing or the install failed.
    """
    modules = MEMORY_PREFIX / "node_modules"
    pins = {MEMORY_PACKAGE: MEMORY_VERSION, SUPERGATEWAY_PACKAGE: SUPERGATEWAY_VERSION}
    try:
        with _locked(MEMORY_PREFIX.name + "-check"):
            if any(_npm_version(modules / name) != version for name, version in pins.items()):
                shutil.rmtree(modules, ignore_errors=True)
        npm_install(MEMORY_PREFIX, *(f"{name}@{version}" for name, version in pins.items()),
                    marker=SUPERGATEWAY_PACKAGE)
    except NodeUnavailable as exc:
        raise InstallFailed(str(exc)) from None
    return modules / MEMORY_PACKAGE / "dist" / "index.js", modules / SUPERGATEWAY_PACKAGE / "dist" / "index.js"


def start_memory(graph_file: Path, log_path: Path, timeout_s: float = 60.0) -> ThirdPartyServer:
    """The memory server keeping its graph in ``graph_file``, behind supergateway on a free
    loopback port (endpoint ``/mcp``).

    Raises:
        InstallFailed: see :func:`install_memory`; Node >= 22 unavailable.
        RuntimeError: the bridge did not listen within ``timeout_s`` (its output in the message).
    """
    memory, supergateway = install_memory()
    try:
        node = node22()
    except NodeUnavailable as exc:
        raise InstallFailed(str(exc)) from None
    port = free_port()
    env = _server_env({"PATH": node_env(node)["PATH"], "MEMORY_FILE_PATH": str(graph_file)})
    argv = [node, str(supergateway), "--stdio", shlex.join([node, str(memory)]), "--outputTransport", "streamableHttp",
            "--stateful", "--port", str(port), "--logLevel", "info"]
    proc = _spawn(argv, env, log_path, MEMORY_PREFIX, group=True)
    _wait_listening(proc, port, log_path, f"{MEMORY_PACKAGE} via supergateway", timeout_s)
    version = f"{MEMORY_VERSION} / supergateway {SUPERGATEWAY_VERSION}"
    return ThirdPartyServer(f"{MEMORY_PACKAGE} via supergateway", version, f"http://127.0.0.1:{port}/mcp", proc,
                            log_path, group=True)
