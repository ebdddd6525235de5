"""Counting what reaches PostgreSQL (issue 30, item 6): a loopback TCP proxy in front of the
server that reads the frontend protocol of every connection made through it and records each
query message -- ``Query`` (simple protocol: one round trip, maybe several statements separated by
``;``) and ``Execute`` (extended protocol, its text from the ``Parse`` of the statement its ``Bind``
named: a prepared statement is parsed once per connection, then bound by name) -- whatever sent
it: Django's cursors, psycopg's own ``BEGIN`` / ``COMMIT`` / ``ROLLBACK`` and connection set-up,
or any other code holding a connection. Nothing is changed on the way (bytes pass as they came),
and no setting of the server is needed (``pg_stat_statements`` is not preloaded on the test
machine and ``log_statement`` writes to a log nobody here can read).

Usage (tests/operations/test_round_cost.py)::

    with WireCounter(host, port) as wire:     # listens on 127.0.0.1:<wire.port>
        ...point new connections at wire.port (sslmode disable)...
        wire.reset(); ...work...; wire.statements   # [text of each message, in order]
        [s for t in wire.statements for s in split_statements(t)]   # the statements the server ran

Only plain-text connections are read (``sslmode=disable``: the proxy answers nothing itself and
cannot read TLS; an ``SSLRequest`` is passed on and its answer counted as nothing).
"""

from __future__ import annotations

import socket
import struct
import threading

#: request codes of a startup-phase message without a type byte (SSL / GSS encryption, cancel)
_SSL_REQUEST, _GSS_REQUEST, _CANCEL_REQUEST = 80877103, 80877104, 80877102


class WireCounter:
    """A counting TCP proxy to ``host:port`` (see the module docstring). Thread-safe."""

    def __init__(self, host: str, port: int) -> None:
        self.upstream = (host, port)
        self._lock = threading.Lock()
        self._statements: list[str] = []
        self._listener = socket.create_server(("127.0.0.1", 0))
        self.port = self._listener.getsockname()[1]
        self._closed = False
        self._sockets: list[socket.socket] = []
        #: the local ports of the proxy's connections to the server (``pg_stat_activity.client_port``)
        self.upstream_ports: list[int] = []

    # ------------------------------------------------------------------ what was counted
    @property
    def statements(self) -> list[str]:
        """The query messages sent since the last :meth:`reset` (their text, in arrival order)."""
        with self._lock:
            return list(self._statements)

    def reset(self) -> None:
        with self._lock:
            self._statements.clear()

    def _note(self, text: str) -> None:
        with self._lock:
            self._statements.append(text)

    # ------------------------------------------------------------------ the proxy
    def __enter__(self) -> WireCounter:
        threading.Thread(target=self._accept, name="pgwire-accept", daemon=True).start()
        return self

    def __exit__(self, *exc) -> None:
        self._closed = True
        self._listener.close()
        for sock in list(self._sockets):
            try:  # shut down first: a close alone leaves a socket another thread is reading from open
                sock.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
            try:
                sock.close()
            except OSError:
                pass

    def _accept(self) -> None:
        while not self._closed:
            try:
                client, _ = self._listener.accept()
            except OSError:
                return
            server = socket.create_connection(self.upstream)
            self._sockets += [client, server]
            self.upstream_ports.append(server.getsockname()[1])
            threading.Thread(target=self._pump_frontend, args=(client, server), daemon=True).start()
            threading.Thread(target=self._pump, args=(server, client), daemon=True).start()

    @staticmethod
    def _pump(src: socket.socket, dst: socket.socket) -> None:
        try:
            while data := src.recv(65536):
                dst.sendall(data)
        except OSError:
            pass
        finally:
            for sock in (src, dst):
                try:
                    sock.shutdown(socket.SHUT_RDWR)
                except OSError:
                    pass

    def _pump_frontend(self, src: socket.socket, dst: socket.socket) -> None:
        """Forward the client's bytes, reading its messages as they pass."""
        buf = b""
        startup = True  # messages of the startup phase carry no type byte
        texts: dict[bytes, str] = {}  # this connection's statements by name (b"": the unnamed one)
        bound = ""  # the text of the statement the last Bind named (what an Execute runs)
        try:
            while data := src.recv(65536):
                dst.sendall(data)
                buf += data
                while True:
                    if startup:
                        if len(buf) < 8:
                            break
                        (length,) = struct.unpack("!I", buf[:4])
                        if len(buf) < length:
                            break
                        (code,) = struct.unpack("!I", buf[4:8])
                        buf = buf[length:]
                        startup = code in (_SSL_REQUEST, _GSS_REQUEST)  # a real startup message follows
                        continue
                    if len(buf) < 5:
                        break
                    kind = buf[:1]
                    (length,) = struct.unpack("!I", buf[1:5])
                    if len(buf) < 1 + length:
                        break
                    body, buf = buf[5:1 + length], buf[1 + length:]
                    if kind == b"Q":
                        self._note(body.rstrip(b"\0").decode("utf-8", "replace"))
                    elif kind == b"P":  # name\0 query\0 ...
                        name, text = body.split(b"\0", 2)[:2]
                        texts[name] = text.decode("utf-8", "replace")
                    elif kind == b"B":  # portal\0 statement\0 ...
                        bound = texts.get(body.split(b"\0", 2)[1], "")
                    elif kind == b"E":
                        self._note(bound)
        except OSError:
            pass
        finally:
            for sock in (src, dst):
                try:
                    sock.shutdown(socket.SHUT_RDWR)
                except OSError:
                    pass


def split_statements(text: str) -> list[str]:
    """The statements of one simple-protocol query text, split at ``;`` outside quoted literals
    and identifiers (``'...'`` with ``''``, ``E'...'`` with backslash escapes, ``"..."``), empty
    ones dropped."""
    parts, start, i, n = [], 0, 0, len(text)
    while i < n:
        ch = text[i]
        if ch == "'":
            escaped = i > 0 and text[i - 1] in "eE" and (i == 1 or not (text[i - 2].isalnum() or text[i - 2] == "_"))
            i += 1
            while i < n:
                if escaped and text[i] == "\\":
                    i += 2
                    continue
                if text[i] == "'":
                    if i + 1 < n and text[i + 1] == "'":
                        i += 2
                        continue
                    break
                i += 1
        elif ch == '"':
            i = text.find('"', i + 1)
            i = n if i < 0 else i
        elif ch == ";":
            parts.append(text[start:i])
            start = i + 1
        i += 1
    parts.append(text[start:])
    return [p.strip() for p in parts if p.strip()]
