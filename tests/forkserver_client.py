"""The command the conformance suite starts per scenario when a fork server runs (tests only):

    python -S tests/forkserver_client.py SOCKET ARG...   # as ``manage.py ARG...``, exit status included

Standard library only (``-S``: no site-packages, a ~20 ms start). See :mod:`tests.forkserver`.
"""

import json
import os
import socket
import struct
import sys


def main() -> int:
    path, argv = sys.argv[1], sys.argv[2:]
    conn = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    conn.connect(path)
    body = json.dumps({"argv": ["manage.py", *argv], "env": dict(os.environ), "cwd": os.getcwd()}).encode()
    socket.send_fds(conn, [struct.pack("!I", len(body))], [0, 1, 2])
    conn.sendall(body)
    data = b""
    while len(data) < 4:
        chunk = conn.recv(4 - len(data))
        if not chunk:
            print("forkserver_client: the command's process ended without a status", file=sys.stderr)
            return 70
        data += chunk
    return struct.unpack("!i", data)[0]


if __name__ == "__main__":
    sys.exit(main())
