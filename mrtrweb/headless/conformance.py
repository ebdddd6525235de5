"""The conformance run's setup for ``mrtr_client --conformance`` (the official MCP conformance
suite, ``@modelcontextprotocol/conformance client --command``): what the suite's scenario tells the
client, turned into the product's own configuration, so that the scenario runs through the code
paths a deployment uses.

* :func:`scenario_context` reads ``MCP_CONFORMANCE_CONTEXT`` (a JSON object the suite sets for
  some scenarios: ``client_id`` / ``client_secret`` for pre-registration and client credentials,
  ``private_key_pem`` / ``signing_algorithm`` for ``private_key_jwt``, ``issuer`` for
  pre-registration).
* :func:`apply_run_settings` sets, for this process only, what a deployer would set: plain http to
  loopback allowed for discovery, registration and tokens (the suite's servers are
  ``http://localhost:PORT``), and the Client ID Metadata Document URL the suite expects
  (:data:`CIMD_URL`, used only where an authorization server advertises CIMD support).
* :func:`prepare_server` gives the scenario a fresh server row (a port an earlier scenario used
  must not lend it that scenario's tokens or client registrations) configured as a tenant admin
  would: ``auth/client-credentials-*`` -> OAuth client credentials (``oauth_client``) with the
  context's client id and secret or private key; any other ``auth/*`` -> OAuth per user
  (``oauth_user``), with the context's client id and secret as a pre-registered client when given;
  every other scenario -> no authorization. A client secret or key is pinned to its issuer
  (``McpServer.oauth_issuer``), as an admin must: the context's ``issuer`` when it has one, else
  (the client-credentials scenarios) looked up the way an admin would, with
  :func:`mrtrweb.authz.service.discover_issuer` (PRM at the server, then its authorization
  server's metadata ``issuer``).

* :func:`plan_for` names the plan of the scenarios whose documented client requirement is a
  specific call (the others run ``mrtr_client --each``): the context's ``toolCalls``
  (``http-custom-headers``: each named tool called with exactly the given arguments, after the
  tools were listed), the echo of a listed schema (``json-schema-2020-12-preservation``), a
  listing only (``json-schema-ref-no-deref``).

Secrets from the context are sealed (:mod:`mrtrweb.authz.crypto`) like an admin's; never printed
or logged.
"""

from __future__ import annotations

import json
import os
from collections.abc import Awaitable, Callable
from typing import Any

from . import client as headless
from ..models import McpServer

__all__ = ["CIMD_URL", "Plan", "apply_run_settings", "plan_for", "prepare_server", "scenario_context"]

#: ``async (user, tenant, url) -> [(method, params), ...]``: the operations one run makes
Plan = Callable[[Any, Any, str], Awaitable[list[tuple[str, dict[str, Any]]]]]

#: the client id the suite's ``auth/basic-cimd`` expects (its authorization server never fetches it)
CIMD_URL = "https://conformance-test.local/client-metadata.json"


def scenario_context() -> dict[str, Any]:
    """``MCP_CONFORMANCE_CONTEXT`` as a dict (``{}`` when unset).

    Raises:
        headless.HeadlessError: ``bad_context`` (not a JSON object).
    """
    raw = os.environ.get("MCP_CONFORMANCE_CONTEXT") or "{}"
    try:
        data = json.loads(raw)
    except ValueError:
        data = None
    if not isinstance(data, dict):
        raise headless.HeadlessError("bad_context", "MCP_CONFORMANCE_CONTEXT is not a JSON object")
    return data


def apply_run_settings() -> None:
    """For this process: ``OUTBOUND_ALLOW_HTTP_LOOPBACK`` on, ``OAUTH_CLIENT_METADATA_URL`` =
    :data:`CIMD_URL` (both unless the project set them)."""
    from django.conf import settings

    current = dict(getattr(settings, "MRTRWEB", {}) or {})
    current.setdefault("OUTBOUND_ALLOW_HTTP_LOOPBACK", True)
    current.setdefault("OAUTH_CLIENT_METADATA_URL", CIMD_URL)
    settings.MRTRWEB = current


def _auth_config(scenario: str, context: dict[str, Any]) -> tuple[str, str, dict[str, Any] | None, str]:
    """(auth_mode, oauth_client_id, secret JSON or None, the context's issuer or "") for ``scenario``."""
    issuer = context.get("issuer") if isinstance(context.get("issuer"), str) else ""
    if not scenario.startswith("auth/"):
        return McpServer.AuthMode.NONE, "", None, ""
    client_id = context.get("client_id") if isinstance(context.get("client_id"), str) else ""
    secret: dict[str, Any] | None = None
    if isinstance(context.get("private_key_pem"), str):
        secret = {"private_key_pem": context["private_key_pem"],
                  "signing_algorithm": str(context.get("signing_algorithm") or "ES256")}
    elif isinstance(context.get("client_secret"), str):
        secret = {"client_secret": context["client_secret"]}
    if scenario.startswith("auth/client-credentials-"):
        return McpServer.AuthMode.OAUTH_CLIENT, client_id, secret, issuer
    return McpServer.AuthMode.OAUTH_USER, client_id, secret if client_id else None, issuer


def prepare_server(url: str, tenant: Any, scenario: str, context: dict[str, Any]) -> McpServer:
    """The tenant's server row for ``url``, new and configured for ``scenario`` (sync; see the
    module docstring). Rows the tenant had for ``url`` are deleted first, with their connections
    and registrations."""
    from asgiref.sync import async_to_sync

    from ..authz import crypto, service

    McpServer.objects.filter(tenant=tenant, url=url, owner__isnull=True).delete()
    server = headless.server_for(url, tenant)
    mode, client_id, secret, issuer = _auth_config(scenario, context)
    server.auth_mode = mode
    server.oauth_client_id = client_id
    crypto.set_server_secret(server, secret)
    if secret and not issuer:  # as an admin would: look it up, then confirm (here: take it)
        issuer = async_to_sync(service.discover_issuer)(server) or ""
    server.oauth_issuer = issuer[:500] if secret else ""
    server.save(update_fields=["auth_mode", "oauth_client_id", "auth_secret_sealed", "auth_secret_digest",
                               "oauth_issuer", "updated_at"])
    return server


# --------------------------------------------------------------------------------------------
# Plans: what a scenario requires the client to call
# --------------------------------------------------------------------------------------------


async def _connection(user: Any, tenant: Any, url: str) -> Any:
    from asgiref.sync import sync_to_async

    from ..servers import connections

    server = await sync_to_async(headless.server_for)(url, tenant)
    return await connections.connection_for(user, server)


def _context_calls(context: dict[str, Any]) -> list[tuple[str, dict[str, Any]]] | None:
    """The context's ``toolCalls`` (``[{"name": str, "arguments": object}, ...]``) as
    ``(name, arguments)``, or ``None`` when it has none.

    Raises:
        headless.HeadlessError: ``bad_context`` (``toolCalls`` is not a list of such objects).
    """
    calls = context.get("toolCalls")
    if calls is None:
        return None
    if not isinstance(calls, list) or not all(
            isinstance(c, dict) and isinstance(c.get("name"), str) and isinstance(c.get("arguments", {}), dict)
            for c in calls):
        raise headless.HeadlessError("bad_context", "MCP_CONFORMANCE_CONTEXT toolCalls is not a list of "
                                                    "{name, arguments} objects")
    return [(c["name"], dict(c.get("arguments", {}))) for c in calls]


def _plan_context_calls(calls: list[tuple[str, dict[str, Any]]]) -> Plan:
    async def plan(user: Any, tenant: Any, url: str) -> list[tuple[str, dict[str, Any]]]:
        conn = await _connection(user, tenant, url)
        listed = {t.get("name") for t in await conn.list_tools()}  # the calls' headers come from this listing
        missing = [name for name, _ in calls if name not in listed]
        if missing:
            raise headless.HeadlessError("bad_scenario", f"{len(missing)} of the tools the scenario asks to call "
                                                         "are not listed")
        return [("tools/call", {"name": name, "arguments": arguments}) for name, arguments in calls]

    return plan


async def plan_list_only(user: Any, tenant: Any, url: str) -> list[tuple[str, dict[str, Any]]]:
    """``json-schema-ref-no-deref``: the suite requires the client to list the tools (and not to
    fetch the network ``$ref`` of their schemas); no call is required."""
    conn = await _connection(user, tenant, url)
    if "tools" in (conn.server_capabilities or {}):
        await conn.list_tools()
    return []


async def plan_schema_echo(user: Any, tenant: Any, url: str) -> list[tuple[str, dict[str, Any]]]:
    """``json-schema-2020-12-preservation``: the suite requires the client to send the focal tool's
    ``inputSchema``, exactly as listed, as the ``schema`` argument of its echo tool.

    Raises:
        headless.HeadlessError: ``bad_scenario`` (the server lists neither tool).
    """
    conn = await _connection(user, tenant, url)
    tools = {t.get("name"): t for t in await conn.list_tools()}
    focal = tools.get("json_schema_2020_12_tool", {}).get("inputSchema")
    if "json_schema_echo" not in tools or not isinstance(focal, dict):
        raise headless.HeadlessError("bad_scenario", "the server lists no json_schema_echo / json_schema_2020_12_tool "
                                                     "tools")
    return [("tools/call", {"name": "json_schema_echo", "arguments": {"schema": focal}})]


#: scenario name -> plan (only scenarios whose documented client requirement is a specific call)
PLANS: dict[str, Plan] = {
    "json-schema-2020-12-preservation": plan_schema_echo,
    "json-schema-ref-no-deref": plan_list_only,
}


def plan_for(scenario: str, context: dict[str, Any]) -> Plan | None:
    """The plan of ``scenario``: the context's ``toolCalls`` when it has them, else :data:`PLANS`'
    entry, else ``None`` (the caller runs every listed tool, prompt and resource once).

    Raises:
        headless.HeadlessError: ``bad_context`` (see :func:`_context_calls`).
    """
    calls = _context_calls(context)
    if calls is not None:
        return _plan_context_calls(calls)
    return PLANS.get(scenario)
