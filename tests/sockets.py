"""A person's round waiting for her with her WebSocket open, driven through Django's test client
and the ASGI app in process: for the tests of what happens when access ends or the socket closes.
"""

from __future__ import annotations

from channels.testing.websocket import WebsocketCommunicator
from django.test import AsyncClient

from mrtrweb import operations
from mrtrweb.models import AuditEvent, Operation
from mrtrweb.site.asgi import application


async def csrf_client(user) -> AsyncClient:
    """A test client signed in as ``user``, with the CSRF cookie of a page it read."""
    client = AsyncClient()
    await client.aforce_login(user)
    await client.get("/mcp/")  # the CSRF cookie
    return client


def open_socket(client: AsyncClient | None, origin: bytes = b"http://127.0.0.1:8000") -> WebsocketCommunicator:
    """The person's WebSocket (``/ws/mrtrweb/``) with the client's cookies (none: anonymous), from
    ``origin``; not yet connected."""
    headers = [(b"origin", origin), (b"host", b"127.0.0.1:8000")]
    if client is not None:
        cookie = "; ".join(f"{k}={v.value}" for k, v in client.cookies.items())
        headers.append((b"cookie", cookie.encode()))
    return WebsocketCommunicator(application, "/ws/mrtrweb/", headers=headers)


async def round_on_socket(seeded, who: str = "carol"):
    """``who`` starts deploy on acme's server and looks at the card (the consent receipt); their
    WebSocket is open. Returns (client, op, socket)."""
    client = await csrf_client(seeded["users"][who])
    server = seeded["servers"]["acme"]
    resp = await client.post(f"/mcp/servers/{server.pk}/tools/deploy/", {"arg-env": "staging", "arg-replicas": "2"})
    assert resp.status_code == 302
    await operations.wait_idle()
    op = await Operation.objects.select_related("server", "tenant").aget(pk=resp["Location"].rstrip("/").split("/")[-1])
    assert op.status == Operation.Status.AWAITING_INPUT, (op.error_code, op.error_message)
    assert (await client.get(f"/mcp/operations/{op.id}/")).status_code == 200
    ws = open_socket(client)
    assert (await ws.connect())[0]
    return client, op, ws


async def closed_with(ws: WebsocketCommunicator, code: int) -> None:
    """The consumer closes the socket with ``code`` (pushes for the ended operation are not sent)."""
    while True:
        out = await ws.receive_output(timeout=5)
        if out["type"] == "websocket.close":
            assert out.get("code") == code, out
            return
        assert out["type"] == "websocket.send", out
        assert "CHG-1042" not in out.get("text", "")


async def denied_in_audit(op: Operation, cause: str) -> AuditEvent:
    """The one ``denied`` event of ``op`` for ``access_revoked: <cause>``; nothing was submitted."""
    rows = [e async for e in AuditEvent.objects.filter(operation_id=op.id, event="denied")]
    assert len(rows) == 1, [(e.event, e.reason) for e in rows]
    assert rows[0].reason == f"access_revoked: {cause}" and rows[0].code == "denied"
    assert not await AuditEvent.objects.filter(operation_id=op.id, event="submitted").aexists()
    return rows[0]
