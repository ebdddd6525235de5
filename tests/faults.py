"""Real faults for the resilience tests (issue 14): a private Redis server that can be stopped and
restarted empty, and a TCP proxy in front of any service (PostgreSQL, Redis) that can cut every
connection and refuse new ones, as a network partition or a stopped service does.

Both are real: ``redis-server`` from Debian's package (``./dev test`` installs it) with no
persistence (``--save "" --appendonly no``, the common default of a cache), and an asyncio proxy
forwarding bytes in a thread of the test process.
"""

from __future__ import annotations

import asyncio
import shutil
import subprocess
import threading
import time
from pathlib import Path

from mrtrweb.bench.common import free_port, wait_port

ROOT = Path(__file__).resolve().parents[1]


class RedisServer:
    """A private ``redis-server`` on a free loopback port, without persistence.

    ``url(db)`` is its address; :meth:`restart` stops it and starts it again **empty** on the same
    port (what a restart of a cache without persistence does); :meth:`stop` / :meth:`start` leave
    it down in between."""

    def __init__(self, port: int | None = None) -> None:
        if shutil.which("redis-server") is None:
            raise RuntimeError("redis-server is missing (Debian package redis-server; ./dev test installs it)")
        self.port = port or free_port()
        self.proc: subprocess.Popen | None = None
        self.log = ROOT / "var" / f"redis-{self.port}.log"
        self.start()

    def url(self, db: int = 0) -> str:
        return f"redis://127.0.0.1:{self.port}/{db}"

    def start(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            return
        self.log.parent.mkdir(exist_ok=True)
        self.proc = subprocess.Popen(
            ["redis-server", "--bind", "127.0.0.1", "--port", str(self.port), "--save", "", "--appendonly", "no",
             "--protected-mode", "no"], stdout=self.log.open("a"), stderr=subprocess.STDOUT)
        wait_port(self.port, proc=self.proc, log=self.log)

    def stop(self) -> None:
        """Kill it (SIGKILL: nothing is saved, every connection drops)."""
        if self.proc is not None and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(timeout=10)
        self.proc = None

    def restart(self, down_s: float = 0.0) -> None:
        """Stop, stay down ``down_s`` seconds, start again empty on the same port."""
        self.stop()
        if down_s:
            time.sleep(down_s)
        self.start()

    def close(self) -> None:
        self.stop()


class TcpProxy:
    """Forward ``127.0.0.1:<port>`` to ``target``; :meth:`cut` drops every connection and refuses
    new ones (as a stopped service does) until :meth:`restore`."""

    def __init__(self, target_host: str, target_port: int) -> None:
        self.target = (target_host, target_port)
        self.port = free_port()
        self._loop = asyncio.new_event_loop()
        self._server: asyncio.AbstractServer | None = None
        self._writers: set[asyncio.StreamWriter] = set()
        #: connections accepted so far
        self.accepted = 0
        self._thread = threading.Thread(target=self._loop.run_forever, daemon=True, name=f"tcp-proxy-{self.port}")
        self._thread.start()
        self.restore()

    @property
    def address(self) -> tuple[str, int]:
        return "127.0.0.1", self.port

    def _run(self, coro):
        return asyncio.run_coroutine_threadsafe(coro, self._loop).result(timeout=10)

    async def _pipe(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            while data := await reader.read(65536):
                writer.write(data)
                await writer.drain()
        except (ConnectionError, OSError):
            pass
        finally:
            writer.close()

    async def _handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.accepted += 1
        try:
            up_reader, up_writer = await asyncio.open_connection(*self.target)
        except OSError:
            writer.close()
            return
        self._writers.update((writer, up_writer))
        try:
            await asyncio.gather(self._pipe(reader, up_writer), self._pipe(up_reader, writer))
        finally:
            self._writers.difference_update((writer, up_writer))

    async def _start(self) -> None:
        if self._server is None:
            self._server = await asyncio.start_server(self._handle, "127.0.0.1", self.port, reuse_address=True)

    async def _cut(self) -> None:
        if self._server is not None:
            self._server.close()
            await self._server.wait_closed()
            self._server = None
        for w in list(self._writers):
            w.transport.abort()
        self._writers.clear()

    def restore(self) -> None:
        """Accept and forward connections again."""
        self._run(self._start())
        wait_port(self.port)

    def cut(self) -> None:
        """Drop every forwarded connection (RST) and refuse new ones."""
        self._run(self._cut())

    def close(self) -> None:
        self._run(self._cut())
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(timeout=5)
