"""A fork server for the conformance client (tests only; issue 25).

The conformance suite starts the client command once per scenario (66 scenarios). Each start of
``manage.py mrtr_client`` spends ~1.7 s of CPU importing Django, the product and the ``mcp`` SDK
before it sends a byte: ~110 s of a two-core machine per suite run. This server imports them once;
each scenario's command is then :mod:`tests.forkserver_client`, which hands its argv, environment,
working directory and standard streams to the server over a Unix socket. The server forks, and
the child runs the very same ``manage.py`` entry point (:class:`django.core.management.ManagementUtility`)
on those streams, with the scenario's own SQLite file, and reports its exit status.

What differs from a fresh process is only what was imported before the fork: no database
connection is open then (asserted), no event loop exists and no thread runs. A few scenarios still
run ``manage.py`` as its own process (``tests/interop/test_conformance.py``, ``REAL_PROCESS``).

    python -m tests.forkserver SOCKET     # prints "ready" when it accepts; SIGTERM ends it

Protocol (client -> server): ``!I`` length of a JSON body, sent with fds 0, 1, 2 (``SCM_RIGHTS``),
then the body ``{"argv": [...], "env": {...}, "cwd": "..."}``; server -> client: ``!i`` exit status.
A client that goes away (its process killed by the suite's timeout) ends its child (status 143).
"""

from __future__ import annotations

import json
import os
import signal
import socket
import struct
import sys
import threading
import traceback


def _read_exactly(conn: socket.socket, n: int) -> bytes:
    data = b""
    while len(data) < n:
        chunk = conn.recv(n - len(data))
        if not chunk:
            raise EOFError("the client went away")
        data += chunk
    return data


def _child(conn: socket.socket) -> None:
    """Run one command on the client's streams; never returns."""
    code = 70
    try:
        head, fds, _flags, _addr = socket.recv_fds(conn, 4, 3)
        if len(head) < 4:
            head += _read_exactly(conn, 4 - len(head))
        request = json.loads(_read_exactly(conn, struct.unpack("!I", head)[0]))
        for target, fd in enumerate(fds):
            os.dup2(fd, target)
            os.close(fd)
        os.chdir(request["cwd"])
        os.environ.clear()
        os.environ.update(request["env"])
        from django.conf import settings
        from django.db import connections

        path = request["env"].get("MRTRWEB_SQLITE_PATH")
        if path:  # the scenario's own copy of the migrated database
            settings.DATABASES["default"]["NAME"] = path
            connections["default"].settings_dict["NAME"] = path

        def watch() -> None:  # the client killed (the suite's timeout): end this child too
            try:
                conn.recv(1)
            except OSError:
                pass
            os._exit(143)

        threading.Thread(target=watch, daemon=True).start()
        from django.core.management import ManagementUtility

        sys.argv = list(request["argv"])
        try:
            ManagementUtility(sys.argv).execute()
            code = 0
        except SystemExit as exc:
            code = exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 1)
    except BaseException:  # noqa: BLE001 -- reported on the client's stderr and as its status
        traceback.print_exc()
        code = 70 if code == 70 else 1
    finally:
        try:
            sys.stdout.flush()
            sys.stderr.flush()
        except Exception:  # noqa: BLE001
            pass
        try:
            conn.sendall(struct.pack("!i", code))
        except OSError:
            pass
        os._exit(code)


def serve(path: str) -> None:
    import django

    django.setup()
    from django.core.management import ManagementUtility  # noqa: F401 -- imported before the forks
    from django.db import connections

    import mrtrweb.management.commands.mrtr_client  # noqa: F401 -- the command and all it imports

    assert all(c.connection is None for c in connections.all(initialized_only=True)), "a connection is open"
    assert threading.active_count() == 1, threading.enumerate()
    if os.path.exists(path):
        os.unlink(path)
    server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    server.bind(path)
    server.listen(64)
    signal.signal(signal.SIGCHLD, signal.SIG_IGN)  # children are reaped by the kernel
    print("ready", flush=True)
    while True:
        conn, _ = server.accept()
        if os.fork() == 0:
            server.close()
            signal.signal(signal.SIGCHLD, signal.SIG_DFL)  # the command may wait for its own children
            signal.signal(signal.SIGTERM, signal.SIG_DFL)
            _child(conn)
        conn.close()


if __name__ == "__main__":
    serve(sys.argv[1])
