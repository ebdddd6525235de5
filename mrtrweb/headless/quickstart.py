"""The headless client's start in one thread hop (issue 30): the member check with the tenant's
server row for the URL (:func:`.client._member_server`, one statement) and the operation's start
(:func:`mrtrweb.operations.start_operation`, its one statement) in the same hop -- four hops a round
instead of five.

Two hops were needed because between them the client judges the tool from the server's tools
listing (:func:`refusal_in`, by :func:`.client._not_run`: an app-only tool, or one that must run as a
task the server cannot run, is never called), which needs the server row. This process knows both beforehand when the same person
started an operation on that URL before: the row the last member check found (kept per tenant
and URL, :data:`KNOWN_MAX` at most) and the tools listing their pooled connection keeps (held only
while the server would say that it changed: ``McpConnection.tools_kept``; and only from a
connection made under the row's settings as they are: ``servers.connections.kept_connection``).
When the listing lets the tool be called, the hop makes the member check -- a non-member is
refused there, before anything is started, as before -- and starts on the server it finds, only if
that row still has the settings the listing was judged under (the same row, pool key, URL,
protocol, configuration digest and URL-policy flag: :func:`_settings`); else nothing is started and
the client goes on the two-hop way with the row the hop found. (This worker's draining refusal and
its lease come first, before the member check, as for any start: nothing is listed, connected or
started for a non-member either way.) A listing that refuses the tool, or none kept:
the two-hop way (the refusal is then given after the member check, as always).

May import: operations, servers, models, mcpapps, :mod:`.policy` (not :mod:`.client`, which imports it).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from ..models import McpServer, Operation
from ..servers import connections

__all__ = ["KNOWN_MAX", "forget", "refusal_in", "remember", "start_known"]

#: the most (tenant, URL) -> server rows kept (then the memory starts again, empty)
KNOWN_MAX = 1024
_known: dict[tuple[str, str], McpServer] = {}


def remember(tenant_id: Any, url: str, server: McpServer) -> None:
    """Keep ``server`` as the tenant's server for ``url`` (what the member check last found)."""
    if len(_known) >= KNOWN_MAX:
        _known.clear()
    _known[(str(tenant_id), url)] = server


def forget() -> None:
    """Forget every kept server row (tests)."""
    _known.clear()


def _listing_allows(user: Any, server: McpServer, method: str, name: Any) -> bool:
    """Whether ``method`` may go to ``server`` for ``user`` by what this process keeps (sync, no
    wait): anything but ``tools/call``; a ``tools/call`` when their pooled connection keeps a tools
    listing that does not refuse the tool (:func:`refusal_in`)."""
    if method != "tools/call":
        return True
    conn = connections.kept_connection(user, server)  # only one made under the row's settings as they are
    tools = conn.tools_kept() if conn is not None else None
    return tools is not None and refusal_in(tools, name, conn.server_capabilities) is None


def _settings(server: McpServer) -> tuple[Any, ...]:
    """What the person's pooled connection to ``server`` depends on (:func:`mrtrweb.servers.connections.kept_connection`):
    the row, its pool key, URL, protocol setting, configuration digest (credentials' settings) and
    URL-policy flag. A tools listing judged under one tuple says nothing about another."""
    return (server.pk, connections.server_key(server), server.url, server.protocol, server.config_digest(),
            bool(getattr(server, "url_policy", False)))


def refusal_in(tools: list[Any], name: Any, capabilities: Any) -> str | None:
    """The judgement of a tools listing the headless client makes before it calls ``name`` (sync):
    ``APP_ONLY`` (listed for its MCP App alone), ``TASK_REQUIRED`` (it must run as a task and the
    server, declaring ``capabilities``, cannot run it so), or None."""
    from ..mcpapps import meta as app_meta
    from ..operations.tasks import refused
    from .policy import APP_ONLY, TASK_REQUIRED

    listed = [t for t in tools if isinstance(t, dict) and t.get("name") == name]
    if any(app_meta.app_only(t) for t in listed):
        return APP_ONLY
    return TASK_REQUIRED if any(refused(t, capabilities) for t in listed) else None


async def start_known(*, user: Any, tenant: Any, url: str, method: str, params: dict[str, Any],
                      name: str, member_server: Callable[[Any, Any, str], McpServer]) -> Operation | McpServer | None:
    """Start the operation in one hop when this process knows the server and its listing lets the
    call go (see the module doc). Returns the started :class:`Operation`; or the tenant's server the
    member check found when it was not the one known (nothing started: the caller goes on with it);
    or None when nothing was tried (the caller makes the member check itself). ``member_server``:
    the member check and the server row (:func:`.client._member_server`: ``HeadlessError``
    ``not_a_member`` for a non-member).

    Raises:
        HeadlessError: ``not_a_member``, or the start was refused (``limit_reached``...), as
            :func:`.client.arun` says.
    """
    from .. import operations
    from .policy import HeadlessError

    known = _known.get((str(tenant.pk), url))
    if known is None or not _listing_allows(user, known, method, params.get("name")):
        return None
    found: list[McpServer] = []
    judged = _settings(known)

    def member_then_server() -> McpServer | None:  # (in the start's hop, first)
        server = member_server(user, tenant, url)  # not a member: HeadlessError, nothing started
        found.append(server)
        if _settings(server) != judged:
            return None  # not the server, or not the settings, the listing was judged under
        return server

    try:
        op = await operations.start_operation(user=user, server=known, method=method, name=name, params=params,
                                              before=member_then_server)
    except operations.OperationRefused as exc:
        raise HeadlessError(exc.code, exc.message) from None
    if op is None:
        remember(tenant.pk, url, found[0])
        return found[0]
    remember(tenant.pk, url, found[0])
    return op
