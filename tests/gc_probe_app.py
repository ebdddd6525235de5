"""The production ASGI application (``mrtrweb.site.asgi``, imported exactly as uvicorn imports it)
behind one extra path, ``GET /__gc__``: the worker process's collector state as JSON
(``{"frozen": gc.get_freeze_count(), "thresholds": gc.get_threshold(), "every_s": <the spacer's
period or null>, "threads": [<thread names>]}``), read straight from the
interpreter. Used by tests/runtime/test_gcpolicy.py only."""

from __future__ import annotations

import gc
import json
import threading

from mrtrweb.site.asgi import application as product


async def application(scope, receive, send):
    if scope["type"] == "http" and scope["path"] == "/__gc__":
        from mrtrweb.runtime import gcpolicy

        body = json.dumps({"frozen": gc.get_freeze_count(), "thresholds": list(gc.get_threshold()),
                           "every_s": gcpolicy.state()["every_s"],
                           "threads": [t.name for t in threading.enumerate()]}).encode()
        await send({"type": "http.response.start", "status": 200,
                    "headers": [(b"content-type", b"application/json")]})
        await send({"type": "http.response.body", "body": body})
        return
    await product(scope, receive, send)
