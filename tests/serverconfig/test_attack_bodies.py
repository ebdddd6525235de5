"""Attacks by a hostile MCP server (or any server an authorization flow contacts) through the
bodies it sends: every size bound of the outbound guard and of an MCP connection counts the bytes
the product gets, not the bytes on the wire -- a compressed body (``Content-Encoding: gzip``) of a
few kilobytes that inflates to gigabytes is stopped at the bound like an uncompressed one.

Each test here failed before its fix (see the commit that added it).
"""

from __future__ import annotations

import gzip
import json
import zlib

import pytest
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from mrtrweb.demo.server import serve_asgi_in_thread
from mrtrweb.mcp.errors import origin_of
from mrtrweb.mcp.outbound import OutboundPolicy, OutboundRefused, guarded_client
from mrtrweb.serverconfig.probe import probe

from tests.serverconfig.policies import LOOPBACK, OUTBOUND

#: what each bomb inflates to (past the 8 MiB bound of an MCP answer; compressed: a few KiB)
INFLATED = 9 * 1024 * 1024


def _bomb(prefix: bytes, suffix: bytes, coding: str = "gzip") -> bytes:
    body = prefix + b" " * INFLATED + suffix
    if coding == "deflate":
        return zlib.compress(body, 9)
    return gzip.compress(body, 9)


async def _rpc_bomb(request: Request) -> Response:
    """An MCP endpoint whose every answer is a valid JSON-RPC result padded to 9 MiB, gzipped."""
    if request.method != "POST":
        return Response(status_code=405)
    sent = json.loads(await request.body())
    prefix = json.dumps({"jsonrpc": "2.0", "id": sent.get("id"), "result": {}})[:-2].encode() + b'{"padding": "'
    return Response(_bomb(prefix, b'"}}'), media_type="application/json", headers={"Content-Encoding": "gzip"})


async def _metadata_bomb(request: Request) -> Response:
    coding = request.query_params.get("coding", "gzip")
    return Response(_bomb(b'{"authorization_servers": ["https://auth.example.com"], "padding": "', b'"}', coding),
                    media_type="application/json", headers={"Content-Encoding": coding})


async def _small(request: Request) -> Response:
    coding = request.query_params.get("coding", "gzip")
    body = json.dumps({"authorization_servers": ["https://auth.example.com"]}).encode()
    return Response(zlib.compress(body) if coding == "deflate" else gzip.compress(body), media_type="application/json",
                    headers={"Content-Encoding": coding})


@pytest.fixture(scope="module")
def bombs():
    handle = serve_asgi_in_thread(Starlette(routes=[
        Route("/mcp", _rpc_bomb, methods=["GET", "POST", "DELETE"]),
        Route("/meta", _metadata_bomb), Route("/small", _small)]), path="")
    yield f"http://127.0.0.1:{handle.port}"
    handle.stop()


async def test_a_compressed_answer_is_bounded_by_what_it_inflates_to(bombs) -> None:
    report = await probe(f"{bombs}/mcp", url_policy=LOOPBACK, outbound=OUTBOUND, timeout_s=15.0)
    assert report["outcome"] == "failed" and report["reason"] == "too_large", report


@pytest.mark.parametrize("coding", ["gzip", "deflate"])
@pytest.mark.parametrize("own_origin", [False, True])
async def test_the_guards_body_bound_counts_inflated_bytes(bombs, coding, own_origin) -> None:
    """The outbound guard's ``max_bytes`` (OAuth discovery, the probe's resource metadata): on another
    origin and on the MCP server's own (``bound_mcp``)."""
    policy = OutboundPolicy(allow_http_loopback=True, timeout_s=10.0, max_bytes=64 * 1024)
    async with guarded_client(policy, mcp_origin=origin_of(bombs) if own_origin else None, bound_mcp=True) as client:
        with pytest.raises(OutboundRefused, match="larger than 65536 bytes"):
            await client.get(f"{bombs}/meta?coding={coding}")
        # an answer within the bound, compressed, arrives whole and decoded
        small = await client.get(f"{bombs}/small?coding={coding}")
        assert small.json() == {"authorization_servers": ["https://auth.example.com"]}
