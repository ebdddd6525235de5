"""A 2025-11-25 server that restarts (public names; tests of several folders): the legacy demo
server on one port, restarted on demand, and the call the tests make of it."""

from __future__ import annotations

import time

from mrtrweb.demo.legacy import serve_legacy_in_thread

ECHO = {"name": "echo", "arguments": {"text": "hello"}}


class Restarting:
    """The legacy demo server on one port, restarted on demand (each run: a fresh WireLog)."""

    def __init__(self) -> None:
        self.runs = [serve_legacy_in_thread(port=0)]  # a free port, bound at once (xdist-safe)
        self.port = self.runs[0].port

    @property
    def now(self):
        return self.runs[-1]

    @property
    def url(self) -> str:
        return self.now.url

    def restart(self) -> None:
        """Stop listening, and serve a new server on the same port at once (the old one drains its
        open streams meanwhile, up to uvicorn's 2 s grace, then cuts them)."""
        old = self.now
        old._server.should_exit = True
        deadline = time.monotonic() + 10
        while True:
            try:
                self.runs.append(serve_legacy_in_thread(port=self.port))
                return
            except (OSError, RuntimeError):  # the old one still listens
                assert time.monotonic() < deadline, "the port was not free again within 10 s"
                time.sleep(0.02)

    def initializes(self) -> int:
        """``initialize`` requests the current run received (= sessions opened on it)."""
        return sum(1 for m in self.now.log.messages() if m.method == "initialize")

    def requests(self, method: str):
        return [m for m in self.now.log.messages() if m.method == method]

    def stop(self) -> None:
        for run in self.runs:
            run.stop()
