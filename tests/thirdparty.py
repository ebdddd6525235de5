"""Third-party MCP servers for the interop matrix (issue 15), installed by the tests from the
registries at pinned versions, started on free loopback ports.

* :data:`EVERYTHING` -- npm ``@modelcontextprotocol/server-everything`` (the reference server,
  on the TypeScript SDK 1.x: 2025-11-25 and older, ``initialize`` handshake), in its
  ``streamableHttp`` mode (``PORT`` env, endpoint ``/mcp``), installed into ``var/everything``
  through :func:`tests.nodejs.npm_install`, run with :func:`tests.nodejs.node22`.
* :data:`FASTMCP3`, :data:`FASTMCP4` -- PyPI ``fastmcp`` 3.x (speaks 2025-11-25) and 4.x
  (2026-07-28 and the handshake era), each in its own venv under ``var/fastmcp3`` /
  ``var/fastmcp4`` (``/usr/bin/python3 -m venv``, ``pip install fastmcp==X``: never into our
  venv), running ``tests/thirdparty_servers/fastmcp_features.py``.
* :data:`FILESYSTEM` -- npm ``@modelcontextprotocol/server-filesystem`` (stdio only, TypeScript SDK
  1.x, 2025-11-25) behind a bridge to Streamable HTTP (:data:`BRIDGES`):

  - ``supergateway`` (npm, installed beside it in ``var/filesystem``) with ``--outputTransport
    streamableHttp --stateful``: **one stdio child per HTTP session**, spawned on that session's
    ``initialize`` and sent the client's own ``initialize`` (its capabilities, so ``roots``), ended
    with the session. (Without ``--stateful`` it spawns a child per POST and sends it
    ``capabilities: {}``: a server there never learns of roots.)
  - ``mcp-proxy`` (PyPI, its own venv ``var/mcp-proxy``): **one stdio child shared by every HTTP
    session**, started and initialized by the proxy itself (its own client, declaring no roots)
    before it listens.

  The server gets the directories given on its command line (under the test's ``tmp_path``).

API::

    install_fastmcp(FASTMCP4)            # -> the venv's python (installed once, under a file lock)
    install_everything()                 # -> the server's dist/index.js
    server = start_fastmcp(FASTMCP4)     # -> ThirdPartyServer (url, name, version, log_path)
    server = start_everything()
    server = start_filesystem("supergateway", [directory], log_path)   # or "mcp-proxy"
    server.stop()

An install failure raises :class:`InstallFailed` with pip's or npm's output (tests fail with it,
they are never skipped). A server that does not answer on its port within the timeout raises
``RuntimeError`` with its stderr. Each server's stdout+stderr goes to ``log_path``.

Pytest fixtures (module scope, one process per module): :func:`everything_server`,
:func:`fastmcp3_server`, :func:`fastmcp4_server` (the filesystem server's directories are the
test's own: its tests start it themselves).
"""

from __future__ import annotations

import dataclasses
import os
import shlex
import shutil
import signal
import socket
import subprocess
import time
from pathlib import Path

import pytest

from tests.nodejs import VAR, NodeUnavailable, _locked, node22, node_env, npm_install

SERVERS_DIR = Path(__file__).resolve().parent / "thirdparty_servers"
FEATURES_SCRIPT = SERVERS_DIR / "fastmcp_features.py"
SYSTEM_PYTHON = "/usr/bin/python3"

#: the npm package and its pinned version (the newest ``npm view`` gave, 2026-08-31)
EVERYTHING_PACKAGE = "@modelcontextprotocol/server-everything"
EVERYTHING_VERSION = "2026.8.31"
EVERYTHING_PREFIX = VAR / "everything"

#: the stdio filesystem server and the npm bridge, pinned (the newest ``npm view`` gave, 2026-12-01),
#: installed together into one prefix
FILESYSTEM_PACKAGE = "@modelcontextprotocol/server-filesystem"
FILESYSTEM_VERSION = "2026.8.31"
SUPERGATEWAY_PACKAGE = "supergateway"
SUPERGATEWAY_VERSION = "4.0.0"
FILESYSTEM_PREFIX = VAR / "filesystem"
#: the PyPI bridge, pinned (the newest on PyPI, 2026-12-01), in its own venv
MCP_PROXY_VERSION = "0.13.0"
MCP_PROXY_VENV = VAR / "mcp-proxy"
#: the bridges :func:`start_filesystem` knows
BRIDGES = ("supergateway", "mcp-proxy")


@dataclasses.dataclass(frozen=True)
class FastMcpRelease:
    """A pinned ``fastmcp`` release and the venv it is installed in."""

    version: str
    venv: Path

    @property
    def major(self) -> int:
        return int(self.version.split(".")[0])


FASTMCP3 = FastMcpRelease("3.4.11", VAR / "fastmcp3")
FASTMCP4 = FastMcpRelease("4.2.3", VAR / "fastmcp4")


class InstallFailed(RuntimeError):
    """A pinned third-party server could not be installed (the installer's output in the message)."""


# -- installs -----------------------------------------------------------------------------------------


def _installed_fastmcp(python: Path) -> str:
    if not python.exists():
        return ""
    proc = subprocess.run([str(python), "-c", "import fastmcp; print(fastmcp.__version__)"],
                          capture_output=True, text=True, timeout=120)
    return proc.stdout.strip() if proc.returncode == 0 else ""


def install_fastmcp(release: FastMcpRelease) -> Path:
    """Make ``release.venv`` with the system Python and ``pip install fastmcp==VERSION`` into it,
    unless it already holds that version (guarded by a file lock). Returns the venv's python.

    Raises:
        InstallFailed: the venv or the install failed (pip's output in the message).
    """
    python = release.venv / "bin" / "python"
    with _locked(release.venv.name):
        if _installed_fastmcp(python) == release.version:
            return python
        shutil.rmtree(release.venv, ignore_errors=True)
        steps = [[SYSTEM_PYTHON, "-m", "venv", str(release.venv)],
                 [str(python), "-m", "pip", "install", "--quiet", f"fastmcp=={release.version}"]]
        for argv in steps:
            proc = subprocess.run(argv, capture_output=True, text=True, timeout=900)
            if proc.returncode != 0:
                raise InstallFailed(f"{' '.join(argv)} failed ({proc.returncode}):\n"
                                    f"{proc.stdout[-2000:]}{proc.stderr[-4000:]}")
        got = _installed_fastmcp(python)
        if got != release.version:
            raise InstallFailed(f"pip installed fastmcp {got or 'nothing importable'}, not {release.version}")
    return python


def install_everything() -> Path:
    """Install the pinned everything server into ``var/everything`` (once; a different installed
    version is replaced). Returns its ``dist/index.js``.

    Raises:
        InstallFailed: npm is missing or the install failed (npm's output in the message).
    """
    spec = f"{EVERYTHING_PACKAGE}@{EVERYTHING_VERSION}"
    package = EVERYTHING_PREFIX / "node_modules" / EVERYTHING_PACKAGE
    try:
        if package.exists() and _npm_version(package) != EVERYTHING_VERSION:
            shutil.rmtree(package)
        npm_install(EVERYTHING_PREFIX, spec)
    except NodeUnavailable as exc:
        raise InstallFailed(str(exc)) from None
    return package / "dist" / "index.js"


def install_filesystem() -> tuple[Path, Path]:
    """Install the pinned filesystem server and supergateway into ``var/filesystem`` (once; a
    different installed version of either is replaced). Returns both ``dist/index.js``
    (filesystem, supergateway).

    Raises:
        InstallFailed: npm is missing or the install failed (npm's output in the message).
    """
    modules = FILESYSTEM_PREFIX / "node_modules"
    pins = {FILESYSTEM_PACKAGE: FILESYSTEM_VERSION, SUPERGATEWAY_PACKAGE: SUPERGATEWAY_VERSION}
    try:
        with _locked(FILESYSTEM_PREFIX.name + "-check"):
            if any(_npm_version(modules / name) != version for name, version in pins.items()):
                shutil.rmtree(modules, ignore_errors=True)
        npm_install(FILESYSTEM_PREFIX, *(f"{name}@{version}" for name, version in pins.items()),
                    marker=SUPERGATEWAY_PACKAGE)
    except NodeUnavailable as exc:
        raise InstallFailed(str(exc)) from None
    return modules / FILESYSTEM_PACKAGE / "dist" / "index.js", modules / SUPERGATEWAY_PACKAGE / "dist" / "index.js"


def install_mcp_proxy() -> Path:
    """Make ``var/mcp-proxy`` with the system Python and ``pip install mcp-proxy==VERSION`` into it,
    unless it already holds that version (guarded by a file lock). Returns its ``mcp-proxy`` script.

    Raises:
        InstallFailed: the venv or the install failed (pip's output in the message).
    """
    python = MCP_PROXY_VENV / "bin" / "python"
    script = MCP_PROXY_VENV / "bin" / "mcp-proxy"

    def installed() -> str:
        if not python.exists():
            return ""
        proc = subprocess.run([str(python), "-c", "import importlib.metadata as m; print(m.version('mcp-proxy'))"],
                              capture_output=True, text=True, timeout=120)
        return proc.stdout.strip() if proc.returncode == 0 else ""

    with _locked(MCP_PROXY_VENV.name):
        if installed() == MCP_PROXY_VERSION and script.exists():
            return script
        shutil.rmtree(MCP_PROXY_VENV, ignore_errors=True)
        for argv in ([SYSTEM_PYTHON, "-m", "venv", str(MCP_PROXY_VENV)],
                     [str(python), "-m", "pip", "install", "--quiet", f"mcp-proxy=={MCP_PROXY_VERSION}"]):
            proc = subprocess.run(argv, capture_output=True, text=True, timeout=900)
            if proc.returncode != 0:
                raise InstallFailed(f"{' '.join(argv)} failed ({proc.returncode}):\n"
                                    f"{proc.stdout[-2000:]}{proc.stderr[-4000:]}")
        if installed() != MCP_PROXY_VERSION or not script.exists():
            raise InstallFailed(f"pip installed mcp-proxy {installed() or 'nothing'}, not {MCP_PROXY_VERSION}")
    return script


def _npm_version(package: Path) -> str:
    import json

    try:
        return json.loads((package / "package.json").read_text())["version"]
    except (OSError, ValueError, KeyError):
        return ""


# -- running ------------------------------------------------------------------------------------------


@dataclasses.dataclass
class ThirdPartyServer:
    """A running third-party server: its MCP endpoint ``url`` (``http://127.0.0.1:PORT/mcp``), the
    package ``name`` and ``version``, the process and its output file ``log_path``."""

    name: str
    version: str
    url: str
    proc: subprocess.Popen
    log_path: Path
    group: bool = False  # started in a process group of its own (see stop)

    def output(self) -> str:
        """What the process wrote to stdout and stderr so far."""
        try:
            return self.log_path.read_text(errors="replace")
        except OSError:
            return ""

    def stop(self, timeout_s: float = 10.0) -> None:
        """Terminate the process (then kill it after ``timeout_s``). A bridge runs in its own
        process group (``group``): what is left of the group then (stdio children) is killed too."""
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout_s)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(timeout_s)
        if self.group:
            try:
                os.killpg(self.proc.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass


def free_port() -> int:
    """A TCP port free on 127.0.0.1 right now (the server binds it a moment later), from this test
    process's own range (:func:`mrtrweb.bench.machine.free_port`)."""
    from mrtrweb.bench.machine import free_port as own_port

    return own_port()


def _wait_listening(proc: subprocess.Popen, port: int, log_path: Path, what: str, timeout_s: float) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            break
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=0.5):
                return
        except OSError:
            time.sleep(0.1)
    if proc.poll() is None:
        proc.kill()
        proc.wait(10)
    raise RuntimeError(f"{what} did not listen on 127.0.0.1:{port} (exit {proc.returncode}): "
                       f"{log_path.read_text(errors='replace')[-3000:]}")


def _server_env(extra: dict[str, str]) -> dict[str, str]:
    """A minimal environment for a third-party server: nothing of ours (the everything server's
    ``get-env`` tool returns its whole environment to the client)."""
    env = {k: os.environ[k] for k in ("PATH", "HOME", "LANG", "TMPDIR") if k in os.environ}
    env.update(extra)
    return env


def _spawn(argv: list[str], env: dict[str, str], log_path: Path, cwd: Path, group: bool = False) -> subprocess.Popen:
    log_path.parent.mkdir(parents=True, exist_ok=True)
    with open(log_path, "w") as out:
        return subprocess.Popen(argv, stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, env=env,
                                cwd=cwd, start_new_session=group)


def start_fastmcp(release: FastMcpRelease, log_path: Path, timeout_s: float = 60.0) -> ThirdPartyServer:
    """Install ``release`` if needed and run the features server on a free loopback port.

    Raises:
        InstallFailed: see :func:`install_fastmcp`.
        RuntimeError: the server did not listen within ``timeout_s`` (its output in the message).
    """
    python = install_fastmcp(release)
    port = free_port()
    env = _server_env({"FASTMCP_LOG_LEVEL": "WARNING", "FASTMCP_SHOW_CLI_BANNER": "false", "PYTHONUNBUFFERED": "1"})
    proc = _spawn([str(python), str(FEATURES_SCRIPT), "--port", str(port)], env, log_path, SERVERS_DIR)
    _wait_listening(proc, port, log_path, f"fastmcp {release.version}", timeout_s)
    return ThirdPartyServer("fastmcp", release.version, f"http://127.0.0.1:{port}/mcp", proc, log_path)


def start_everything(log_path: Path, timeout_s: float = 60.0) -> ThirdPartyServer:
    """Install the everything server if needed and run ``index.js streamableHttp`` on a free
    loopback port (its ``PORT`` environment variable).

    Raises:
        InstallFailed: see :func:`install_everything`; Node >= 22 unavailable.
        RuntimeError: the server did not listen within ``timeout_s`` (its output in the message).
    """
    script = install_everything()
    try:
        node = node22()
    except NodeUnavailable as exc:
        raise InstallFailed(str(exc)) from None
    port = free_port()
    env = _server_env({"PATH": node_env(node)["PATH"], "PORT": str(port)})
    proc = _spawn([node, str(script), "streamableHttp"], env, log_path, EVERYTHING_PREFIX)
    _wait_listening(proc, port, log_path, f"{EVERYTHING_PACKAGE} {EVERYTHING_VERSION}", timeout_s)
    return ThirdPartyServer(EVERYTHING_PACKAGE, EVERYTHING_VERSION, f"http://127.0.0.1:{port}/mcp", proc, log_path)


def start_filesystem(bridge: str, directories: list[Path], log_path: Path, timeout_s: float = 60.0) -> ThirdPartyServer:
    """Install the filesystem server and ``bridge`` (one of :data:`BRIDGES`) if needed and run the
    server, allowed ``directories`` on its command line, behind the bridge on a free loopback port
    (endpoint ``/mcp``). ``name`` is ``"FILESYSTEM via BRIDGE"``, ``version`` both versions.

    Raises:
        InstallFailed: see :func:`install_filesystem`, :func:`install_mcp_proxy`; Node >= 22 unavailable.
        ValueError: an unknown ``bridge``.
        RuntimeError: the bridge did not listen within ``timeout_s`` (its output in the message).
    """
    if bridge not in BRIDGES:
        raise ValueError(f"unknown bridge {bridge!r} (one of {BRIDGES})")
    filesystem, supergateway = install_filesystem()
    try:
        node = node22()
    except NodeUnavailable as exc:
        raise InstallFailed(str(exc)) from None
    port = free_port()
    child = [node, str(filesystem), *(str(d) for d in directories)]
    env = _server_env({"PATH": node_env(node)["PATH"]})
    if bridge == "supergateway":
        argv = [node, str(supergateway), "--stdio", shlex.join(child), "--outputTransport", "streamableHttp",
                "--stateful", "--port", str(port), "--logLevel", "info"]
        version = f"{FILESYSTEM_VERSION} / supergateway {SUPERGATEWAY_VERSION}"
    else:
        argv = [str(install_mcp_proxy()), "--host", "127.0.0.1", "--port", str(port), "--", *child]
        version = f"{FILESYSTEM_VERSION} / mcp-proxy {MCP_PROXY_VERSION}"
    proc = _spawn(argv, env, log_path, FILESYSTEM_PREFIX, group=True)
    _wait_listening(proc, port, log_path, f"{FILESYSTEM_PACKAGE} via {bridge}", timeout_s)
    return ThirdPartyServer(f"{FILESYSTEM_PACKAGE} via {bridge}", version, f"http://127.0.0.1:{port}/mcp", proc,
                            log_path, group=True)


# -- fixtures -----------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def everything_server(tmp_path_factory):
    """The everything server on 127.0.0.1 for one test module."""
    server = start_everything(tmp_path_factory.mktemp("everything") / "server.log")
    yield server
    server.stop()


@pytest.fixture(scope="module")
def fastmcp3_server(tmp_path_factory):
    """The FastMCP 3 features server on 127.0.0.1 for one test module."""
    server = start_fastmcp(FASTMCP3, tmp_path_factory.mktemp("fastmcp3") / "server.log")
    yield server
    server.stop()


@pytest.fixture(scope="module")
def fastmcp4_server(tmp_path_factory):
    """The FastMCP 4 features server on 127.0.0.1 for one test module."""
    server = start_fastmcp(FASTMCP4, tmp_path_factory.mktemp("fastmcp4") / "server.log")
    yield server
    server.stop()
