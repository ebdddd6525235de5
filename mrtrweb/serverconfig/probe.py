""""Test" a server's URL before (or after) saving it: connect under the deployer's URL policy, find
the protocol version, count what the server offers, say whether it asks for authorization and
which authorization server it names -- bounded in time and size, never a 500, never a stall.

:func:`probe` returns a **report**, a small JSON-able dict (kept on the server as
``McpServer.last_test`` by :func:`mrtrweb.serverconfig.testing.record_test`, rendered by
``mrtrweb/serverconfig/_test_report.html``). No secret is ever in it (a bearer token given for
the test is used, never kept); every text the server chose is cut and cleaned
(:func:`clean_text`: at most :data:`MAX_TEXT` characters, control, bidi and invisible characters
made visible as ``⟨U+202E⟩`` by :func:`mrtrweb.text.display.shown`; pages escape it). Shape (``version`` 1)::

    {"version": 1, "outcome": "connected" | "needs_authorization" | "failed",
     "origin": "https://mcp.example.com:443", "protocol": "auto",     # the choice tested
     "protocol_version": "2026-07-28" | None,                         # negotiated
     "server": {"name": str, "version": str} | None,                  # cleaned serverInfo
     "capabilities": ["logging", "prompts", "resources", "tools", ...],  # the names declared, sorted
     "counts": {"tools": int | None, "prompts": int | None, "resources": int | None},
                                          # None: not offered or the listing failed (see "notes")
     "authorization": None | {"required": True, "scheme_bearer": bool, "scope": str | None,
                              "resource_metadata": str | None,         # the URL the 401 names
                              "authorization_servers": [str, ...],     # from the resource metadata
                              "metadata_problem": str | None},         # why none could be read
     "reason": None | <a reason>, "http_status": int | None,
     "policy_code": None | <UrlRefused code>,                         # reason "policy": which rule
     "policy_detail": {"host", "address", "max", "scheme"},           # what that rule names (cleaned)
     "detail": str,                                                   # English, cleaned (logs, hints)
     "notes": [str, ...], "elapsed_ms": int, "tested_at": "<ISO 8601 UTC>"}

Reasons (``reason``), a failed test's cause in stable words: those of
:data:`mrtrweb.mcp.reachability.REASONS` (``refused``, ``dns``, ``tls``, ``timeout``,
``http_status``, ``not_mcp``, ``policy``, ``unreachable``), and ``redirect`` (an HTTP 3xx: the
product follows no redirect of an MCP endpoint -- a redirect loop ends there), ``too_large`` (a
response past the size bound), ``protocol`` (a pinned protocol version the server does not speak),
``rate_limited`` (too many tests: nothing was tried), ``error`` (anything unforeseen, logged).

Bounds: the whole test :data:`TEST_TIMEOUT_S` (a server that accepts and never answers ends as
``timeout``); a response body at most :data:`mrtrweb.mcp.evidence.MAX_RESPONSE_BYTES` (8 MiB:
more ends as ``too_large``); the resource metadata at most :data:`MAX_METADATA_BYTES`.
"""

from __future__ import annotations

import asyncio
import datetime
import json
import logging
import time
from typing import Any, Final

from ..mcp import McpConnection
from ..mcp.auth import static_headers_auth
from ..mcp.protocol import ProtocolMismatch
from ..mcp.errors import (AUTHORIZATION_FAILED, AUTHORIZATION_REQUIRED, INSUFFICIENT_SCOPE, TIMEOUT, McpCallError,
                          origin_of)
from ..mcp.outbound import OutboundPolicy, OutboundRefused, guarded_client
from ..mcp.url_policy import UrlPolicy, UrlRefused
from ..text import display

__all__ = ["MAX_METADATA_BYTES", "MAX_TEXT", "REPORT_VERSION", "TEST_TIMEOUT_S", "probe", "refused_report"]

logger = logging.getLogger("mrtrweb.serverconfig")

#: the report format (``report["version"]``)
REPORT_VERSION: Final = 1
#: seconds one whole test may take (connect, negotiation, three listings, the resource metadata)
TEST_TIMEOUT_S: Final = 20.0
#: characters of one server-chosen text kept in a report
MAX_TEXT: Final = 200
#: bytes of protected resource metadata read
MAX_METADATA_BYTES: Final = 64 * 1024
#: authorization servers named in a report, at most
MAX_AUTH_SERVERS: Final = 5
_KINDS: Final = ("tools", "prompts", "resources")


def clean_text(value: Any, limit: int = 200) -> str:
    """``value`` as text to keep in a report: at most ``limit`` characters of it (``…`` marks a
    cut), every control, bidi and invisible character made visible (:func:`mrtrweb.text.display.shown`)."""
    raw = value if isinstance(value, str) else str(value)
    cut = raw if len(raw) <= limit else raw[: limit - 1] + "…"
    return display.shown(cut)


def _base(url: Any, protocol: str) -> dict[str, Any]:
    try:
        origin = origin_of(url) if isinstance(url, str) and len(url) <= 4096 else ""
    except ValueError:
        origin = ""
    return {"version": REPORT_VERSION, "outcome": "failed", "origin": clean_text(origin, MAX_TEXT),
            "protocol": protocol, "protocol_version": None, "server": None, "capabilities": [],
            "counts": {k: None for k in _KINDS}, "authorization": None, "reason": None, "http_status": None,
            "policy_code": None, "policy_detail": {}, "detail": "", "notes": [], "elapsed_ms": 0,
            "tested_at": datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds")}


def refused_report(url: Any, protocol: str, reason: str, detail: str) -> dict[str, Any]:
    """A report of a test that was not tried (``reason`` e.g. ``rate_limited``)."""
    report = _base(url, protocol)
    report.update(reason=reason, detail=clean_text(detail, MAX_TEXT))
    return report


def _failure(report: dict[str, Any], exc: McpCallError) -> None:
    """Fill ``reason`` / ``http_status`` / ``detail`` of a failed connect."""
    status = exc.http_status
    reason = exc.reason or ("timeout" if exc.code == TIMEOUT else "unreachable")
    text = str(exc)
    if "larger than" in text:
        reason = "too_large"
    elif "redirect to" in text.lower():
        reason = "redirect"
    elif isinstance(exc, ProtocolMismatch):
        reason = "protocol"
    elif status is not None and 300 <= status < 400:
        reason = "redirect"
    elif reason == "http_status" and status is None:
        reason = "unreachable"
    report.update(reason=reason, http_status=status if reason in ("http_status", "redirect") else None,
                  detail=clean_text(text, MAX_TEXT))


async def _read_metadata(url: str, origin: str, outbound: OutboundPolicy, url_policy: UrlPolicy | None) -> Any:
    """The JSON at ``url`` (bounded; the MCP origin under the URL policy, others under the guard), or None for a 404."""
    bounded = OutboundPolicy(allow_http_loopback=outbound.allow_http_loopback, allow_hosts=outbound.allow_hosts,
                             timeout_s=min(outbound.timeout_s, 10.0), max_bytes=MAX_METADATA_BYTES)
    async with guarded_client(bounded, mcp_origin=origin, bound_mcp=True, mcp_policy=url_policy) as client:
        response = await client.get(url, headers={"Accept": "application/json"})
        body = await response.aread()
    if response.status_code == 404:
        return None
    if response.status_code != 200:
        raise ValueError(f"HTTP {response.status_code}")
    return json.loads(body)


async def _authorization(report: dict[str, Any], exc: McpCallError, url: str, outbound: OutboundPolicy,
                         url_policy: UrlPolicy | None) -> None:
    """What a 401/403 says: the challenge, then the protected resource metadata (RFC 9728: the
    challenge's ``resource_metadata``, else the path-based and root well-known URLs of the origin)
    and the authorization servers it names. Nothing is registered, no credential is sent."""
    challenge = exc.challenge or {}
    origin = origin_of(url)
    auth: dict[str, Any] = {
        "required": True, "scheme_bearer": bool(challenge) or exc.code == AUTHORIZATION_REQUIRED,
        "scope": clean_text(challenge["scope"], MAX_TEXT) if challenge.get("scope") else None,
        "resource_metadata": None, "authorization_servers": [], "metadata_problem": None}
    report["authorization"] = auth
    candidates = []
    if challenge.get("resource_metadata"):
        auth["resource_metadata"] = clean_text(challenge["resource_metadata"], MAX_TEXT)
        candidates.append(challenge["resource_metadata"])
    path = url[len(url.split("://", 1)[0]) + 3:].partition("/")[2].split("?", 1)[0].strip("/")
    base = origin.removesuffix(":443") if origin.startswith("https:") else origin.removesuffix(":80")
    if path:
        candidates.append(f"{base}/.well-known/oauth-protected-resource/{path}")
    candidates.append(f"{base}/.well-known/oauth-protected-resource")
    problem = "the server names no protected resource metadata"
    for candidate in candidates:
        try:
            metadata = await _read_metadata(candidate, origin, outbound, url_policy)
        except OutboundRefused as refused:
            problem = f"the resource metadata was not read: {refused.reason}"
            continue
        except (ValueError, UnicodeError) as bad:
            problem = f"the resource metadata is not usable JSON ({clean_text(bad, 80)})"
            continue
        except Exception as failed:  # noqa: BLE001 -- an httpx error of any kind: say so, go on
            problem = f"the resource metadata could not be fetched ({type(failed).__name__})"
            continue
        if metadata is None:
            continue
        servers = metadata.get("authorization_servers") if isinstance(metadata, dict) else None
        if not isinstance(servers, list) or not servers:
            problem = "the resource metadata names no authorization server"
            continue
        auth["authorization_servers"] = [clean_text(s, MAX_TEXT) for s in servers[:MAX_AUTH_SERVERS]
                                         if isinstance(s, str) and s.lower().startswith(("https://", "http://"))]
        if auth["resource_metadata"] is None:
            auth["resource_metadata"] = clean_text(candidate, MAX_TEXT)
        problem = None
        break
    auth["metadata_problem"] = problem


async def _offered(report: dict[str, Any], conn: McpConnection) -> None:
    """Protocol version, server info, capabilities and the counts of what is listed."""
    report["protocol_version"] = conn.protocol_version
    info = conn.server_info or {}
    if info:
        report["server"] = {"name": clean_text(info.get("name", ""), MAX_TEXT),
                            "version": clean_text(info.get("version", ""), MAX_TEXT)}
    caps = conn.server_capabilities or {}
    report["capabilities"] = sorted(clean_text(k, 40) for k in list(caps)[:20])
    listers = {"tools": conn.list_tools, "prompts": conn.list_prompts, "resources": conn.list_resources}
    for kind in _KINDS:
        if kind not in caps:
            continue
        try:
            report["counts"][kind] = len(await listers[kind]())
        except McpCallError as exc:
            report["notes"].append(clean_text(f"listing {kind} failed: {exc}", MAX_TEXT))


async def probe(url: str, protocol: str = "auto", *, url_policy: UrlPolicy | None, outbound: OutboundPolicy,
                bearer: str | None = None, timeout_s: float = TEST_TIMEOUT_S) -> dict[str, Any]:
    """Test ``url`` (see the module doc); never raises for anything the server or the URL does.

    Args:
        url: the Streamable HTTP endpoint.
        protocol: ``McpServer.protocol``'s choice (``"auto"``, ``"2026-07-28"``, ``"2025-11-25"``).
        url_policy: the deployer's policy (checked first, then at the connection, pinned);
            ``None`` only for a superuser's server (not restricted).
        outbound: the outbound guard's policy for the resource metadata on other origins.
        bearer: a bearer token to send (a person's own server); used, never kept or reported.
        timeout_s: the whole test's bound, seconds.
    """
    started = time.monotonic()
    report = _base(url, protocol)
    try:
        async with asyncio.timeout(timeout_s):
            await _run(report, url, protocol, url_policy, outbound, bearer, timeout_s)
    except TimeoutError:
        report.update(outcome="failed", reason="timeout", detail=f"no complete answer within {timeout_s:g}s")
    except Exception as exc:  # noqa: BLE001 -- a test never fails the page
        logger.warning("server test of %s failed unexpectedly: %s", report["origin"], type(exc).__name__)
        report.update(outcome="failed", reason="error", detail=clean_text(type(exc).__name__, MAX_TEXT))
    report["elapsed_ms"] = int((time.monotonic() - started) * 1000)
    return report


async def _run(report: dict[str, Any], url: str, protocol: str, url_policy: UrlPolicy | None,
               outbound: OutboundPolicy, bearer: str | None, timeout_s: float) -> None:
    if url_policy is not None:
        try:
            await url_policy.resolve(url)
        except UrlRefused as refused:
            report.update(reason="policy", policy_code=refused.code, detail=clean_text(refused.reason, MAX_TEXT),
                          policy_detail={k: clean_text(v, MAX_TEXT) if isinstance(v, str) else v
                                         for k, v in refused.detail.items() if k in ("host", "address", "max", "scheme", "literal")})
            return
    try:
        auth = static_headers_auth(url, {"Authorization": f"Bearer {bearer}"}) if bearer else None
    except ValueError:
        report.update(reason="error", detail="the bearer token is not a usable header value (visible ASCII only)")
        return
    conn = McpConnection(url, timeout_s=max(1.0, timeout_s * 0.6), protocol=protocol, auth=auth, outbound=outbound,
                         url_policy=url_policy)
    try:
        await conn.open()
    except McpCallError as exc:
        if exc.code in (AUTHORIZATION_REQUIRED, INSUFFICIENT_SCOPE, AUTHORIZATION_FAILED):
            report.update(outcome="needs_authorization", reason=None,
                          detail=clean_text(exc.message, MAX_TEXT))
            await _authorization(report, exc, url, outbound, url_policy)
            return
        _failure(report, exc)
        if exc.reason == "policy":
            report["policy_code"] = "address"
        return
    try:
        await _offered(report, conn)
        report["outcome"] = "connected"
    finally:
        await conn.close()
