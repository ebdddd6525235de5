"""Install every peer the tests run, all at once, before the suite needs them (issue 25):

    python -m tests.peers        # ./dev test starts it beside the test runs

The peers are the ones the tests would install on first use anyway, each under ``var/`` in a
prefix or venv keyed by its pinned version (a fresh clone builds each once; a changed pin
replaces it): Node >= 22 (``var/node22``), the conformance suite (``var/conformance``), axe-core
(``var/node``), the everything server (``var/everything``), the filesystem server with
supergateway (``var/filesystem``), the TypeScript MRTR server (``var/ts_server``), FastMCP 3 and 4
(``var/fastmcp3``, ``var/fastmcp4``) and mcp-proxy (``var/mcp-proxy``). Each installer holds the
same file lock as the test that would install it, so a test that needs a peer still being
installed waits for it instead of installing it twice.

The installs run in threads (they wait on npm, pip and the network more than on the CPU); one line
per peer says how long it took, or why it failed. A failure here fails nothing: the test that needs
the peer tries again and reports the reason.
"""

from __future__ import annotations

import sys
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor

from tests import nodejs, thirdparty, ts_peer


def _conformance() -> object:
    return nodejs.npm_install(nodejs.VAR / "conformance", nodejs.CONFORMANCE_SUITE)


#: name -> installer; Node first (the TypeScript build needs it)
PEERS: dict[str, Callable[[], object]] = {
    "node22": nodejs.node22,
    "conformance": _conformance,
    "axe-core": nodejs.install_axe,
    "everything": thirdparty.install_everything,
    "filesystem+supergateway": thirdparty.install_filesystem,
    "ts_server": ts_peer.build,
    "fastmcp3": lambda: thirdparty.install_fastmcp(thirdparty.FASTMCP3),
    "fastmcp4": lambda: thirdparty.install_fastmcp(thirdparty.FASTMCP4),
    "mcp-proxy": thirdparty.install_mcp_proxy,
}


def _install(name: str) -> tuple[str, float, str | None]:
    started = time.monotonic()
    try:
        PEERS[name]()
    except Exception as exc:  # noqa: BLE001 -- reported; the test that needs it fails with the reason
        return name, time.monotonic() - started, f"{type(exc).__name__}: {str(exc)[-300:]}"
    return name, time.monotonic() - started, None


def install_all(workers: int = 4) -> int:
    """Install every peer (threads); print a line each. Returns how many failed."""
    failed = 0
    with ThreadPoolExecutor(max_workers=workers, thread_name_prefix="peer") as pool:
        for name, seconds, error in pool.map(_install, PEERS):
            if error:
                failed += 1
                print(f"peers: {name} FAILED after {seconds:.0f} s: {error}", flush=True)
            else:
                print(f"peers: {name} ready ({seconds:.0f} s)", flush=True)
    return failed


if __name__ == "__main__":
    sys.exit(1 if install_all() else 0)
