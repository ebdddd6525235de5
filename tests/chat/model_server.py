"""A scripted OpenAI-compatible chat-completions endpoint on loopback (a real HTTP server, SSE
streaming), driven by the tests through the ``openai`` SDK as in production.

``ModelServer().start()``; ``server.script(step, ...)`` queues what the next requests answer, one
step per ``POST /v1/chat/completions``:

* ``{"text": "..."}`` -- the text streamed in pieces of ``piece`` characters (default 5), ``delay``
  seconds apart (default 0);
* ``{"calls": [{"name", "arguments"}, ...]}`` (with an optional ``"text"``) -- tool calls, each
  streamed as its id and name, then its arguments in pieces (several: parallel calls);
* ``{"status": 429}`` / ``{"status": 500}`` -- an error answer;
* ``{"malformed": True}`` -- an SSE event that is not JSON;
* ``{"hang": True}`` -- one piece of text, then nothing more until the server stops;
* ``{"trickle": True}`` -- a stream that never ends: a one-character piece every 50 ms until the
  client goes away or the server stops (each read answers in time; only a bound on the whole
  reply stops it).

With no step queued it answers the text "(nothing scripted)". ``server.requests``: the JSON body
and the ``Authorization`` header of every request, in order.
"""

from __future__ import annotations

import json
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any


class ModelServer:
    def __init__(self) -> None:
        self.steps: list[dict[str, Any]] = []
        self.requests: list[dict[str, Any]] = []
        self.lock = threading.Lock()
        self.stopping = threading.Event()
        self.httpd: ThreadingHTTPServer | None = None

    @property
    def url(self) -> str:
        assert self.httpd is not None
        return f"http://127.0.0.1:{self.httpd.server_address[1]}/v1"

    def script(self, *steps: dict[str, Any]) -> None:
        with self.lock:
            self.steps.extend(steps)

    def start(self) -> "ModelServer":
        owner = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args: Any) -> None:
                pass

            def do_POST(self) -> None:  # noqa: N802
                length = int(self.headers.get("Content-Length") or 0)
                body = json.loads(self.rfile.read(length) or b"{}")
                with owner.lock:
                    owner.requests.append({"body": body, "authorization": self.headers.get("Authorization", "")})
                    step = owner.steps.pop(0) if owner.steps else {"text": "(nothing scripted)"}
                if not self.path.endswith("/chat/completions"):
                    self._plain(404, {"error": {"message": "not found"}})
                    return
                if "status" in step:
                    self._plain(step["status"], {"error": {"message": "scripted error", "type": "scripted"}})
                    return
                self.send_response(200)
                self.send_header("Content-Type", "text/event-stream")
                self.send_header("Cache-Control", "no-cache")
                self.send_header("Connection", "close")
                self.end_headers()
                try:
                    self._stream(step)
                except (BrokenPipeError, ConnectionResetError):
                    pass
                self.close_connection = True

            def _plain(self, status: int, payload: dict[str, Any]) -> None:
                data = json.dumps(payload).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                if status == 429:
                    self.send_header("Retry-After", "1")
                self.end_headers()
                self.wfile.write(data)

            def _event(self, delta: dict[str, Any], finish: str | None = None) -> None:
                chunk = {"id": "chatcmpl-test", "object": "chat.completion.chunk", "created": int(time.time()),
                         "model": "scripted", "choices": [{"index": 0, "delta": delta, "finish_reason": finish}]}
                self.wfile.write(b"data: " + json.dumps(chunk).encode() + b"\n\n")
                self.wfile.flush()

            def _stream(self, step: dict[str, Any]) -> None:
                if step.get("malformed"):
                    self.wfile.write(b"data: {this is not json\n\n")
                    self.wfile.flush()
                    return
                piece = int(step.get("piece", 5))
                self._event({"role": "assistant", "content": ""})
                text = step.get("text", "")
                for i in range(0, len(text), piece):
                    self._event({"content": text[i:i + piece]})
                    time.sleep(float(step.get("delay", 0)))
                if step.get("trickle"):
                    while not owner.stopping.wait(0.05):
                        self._event({"content": "."})
                    return
                if step.get("hang"):
                    self._event({"content": "…"})
                    owner.stopping.wait(600)
                    return
                for index, call in enumerate(step.get("calls", [])):
                    self._event({"tool_calls": [{"index": index, "id": call.get("id", f"call_{index}"), "type": "function",
                                                 "function": {"name": call["name"], "arguments": ""}}]})
                    args = call.get("arguments", "{}")
                    for i in range(0, len(args), 7):
                        self._event({"tool_calls": [{"index": index, "function": {"arguments": args[i:i + 7]}}]})
                self._event({}, "tool_calls" if step.get("calls") else "stop")
                self.wfile.write(b"data: [DONE]\n\n")
                self.wfile.flush()

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.httpd.daemon_threads = True
        threading.Thread(target=self.httpd.serve_forever, daemon=True).start()
        return self

    def stop(self) -> None:
        self.stopping.set()
        if self.httpd is not None:
            self.httpd.shutdown()
            self.httpd.server_close()
