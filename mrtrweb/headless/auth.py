"""Authorization without a person, for ``mrtr_client --conformance`` (MCP authorization 2025-11-25 /
2026-07-28, the authorization code grant with PKCE, driven by a machine).

The browser's code path, with the person's browser replaced by one GET:
:func:`mrtrweb.authz.service.start_connect` (discovery, client identity, PKCE, ``state``, the
authorization URL) -> GET that URL through the outbound guard, **without** following the redirect
to the redirect URI -> :func:`mrtrweb.authz.service.finish_connect` with the redirect's query
(``code``, ``state``, ``iss``; any worker's callback does the same). Only an authorization server
that approves at once can be followed (the conformance suite's does): one that shows a login or
consent page answers ``200`` and the connect is refused with ``authorization_needs_person`` --
a person connects in the browser instead (Connections page).

Shapes::

    await connect(user=u, tenant=t, server=s)            # stores the person's tokens, or raises
    result = await with_authorization(step, user=u, tenant=t, url=URL)

:func:`with_authorization` runs one step (a listing, or one operation through
:func:`mrtrweb.headless.arun`); when it stops on ``authorization_required`` or
``insufficient_scope`` (raised as :class:`~mrtrweb.mcp.McpCallError`, or an operation that ended
``failed`` with that code), it connects and runs the step again: at most :data:`MAX_CONNECTS`
connects per step (MCP authorization, "Scope challenge handling": retries are bounded), then the
step's own failure stands.

Errors: :class:`mrtrweb.headless.HeadlessError` with the service's stable code
(``authorization_failed``, ``outbound_refused``, ``state_invalid``, ``not_oauth``) or
``authorization_needs_person``; messages never hold a code, ``state``, token or verifier.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

from asgiref.sync import sync_to_async

from .. import conf
from ..servers import connections
from . import client as headless
from ..mcp import McpCallError
from ..mcp.errors import AUTHORIZATION_REQUIRED, INSUFFICIENT_SCOPE

logger = logging.getLogger("mrtrweb.headless")

__all__ = ["AUTH_CODES", "DEFAULT_REDIRECT_URI", "MAX_CONNECTS", "SESSION_KEY", "connect", "redirect_uri",
           "with_authorization"]

T = TypeVar("T")

#: the session a headless flow is bound to (a flow's ``state`` is bound to the person, tenant, server
#: and this key, as a browser's is to its session)
SESSION_KEY = "mrtr-headless"
#: the redirect URI of headless flows when ``MRTRWEB["OAUTH_REDIRECT_URI"]`` is not set (never fetched:
#: the redirect to it is read, not followed)
DEFAULT_REDIRECT_URI = "http://127.0.0.1/mrtrweb/oauth/callback"
#: the codes after which a step is run again once connected
AUTH_CODES = frozenset({AUTHORIZATION_REQUIRED, INSUFFICIENT_SCOPE})
#: connects per step at most (the conformance suite allows 3 authorization requests per run)
MAX_CONNECTS = 2


def redirect_uri() -> str:
    """The exact redirect URI of headless flows: ``MRTRWEB["OAUTH_REDIRECT_URI"]``, else
    :data:`DEFAULT_REDIRECT_URI`."""
    return conf.get("OAUTH_REDIRECT_URI") or DEFAULT_REDIRECT_URI


async def connect(*, user: Any, tenant: Any, server: Any) -> None:
    """Connect ``user`` to ``server`` (OAuth per user) without a person: start the flow, follow the
    authorization URL, finish it (the tokens are stored by the service, as after a browser's
    callback). A step-up scope the server asked for is the service's to add.

    Raises:
        headless.HeadlessError: see the module docstring.
    """
    from ..authz import service
    from ..mcp.auth import AuthorizationFailed, follow_authorization_url

    redirect = redirect_uri()
    try:
        start = await service.start_connect(user=user, tenant=tenant, server=server, session_key=SESSION_KEY,
                                            return_to="", redirect_uri=redirect)
        logger.info("headless: connecting user %s to server %s at %s", user.pk, server.pk, start.authorization_origin)
        query = await follow_authorization_url(start.authorization_url, redirect_uri=redirect, policy=service.outbound_policy())
        await service.finish_connect(user=user, session_key=SESSION_KEY, query=query)
    except service.ConnectRefused as exc:
        raise headless.HeadlessError(exc.code, exc.message) from None
    except AuthorizationFailed as exc:
        raise headless.HeadlessError(exc.code, exc.message) from None
    logger.info("headless: user %s connected to server %s", user.pk, server.pk)


def _needs_authorization(result: Any) -> bool:
    return isinstance(result, headless.HeadlessOutcome) and result.status == "failed" \
        and result.error_code in AUTH_CODES


async def with_authorization(step: Callable[[], Awaitable[T]], *, user: Any, tenant: Any, url: str) -> T:
    """Run ``step``; after ``authorization_required`` / ``insufficient_scope`` connect (see
    :func:`connect`) and run it again, at most :data:`MAX_CONNECTS` times. Returns the step's last
    result; raises its last :class:`McpCallError` (or the connect's ``HeadlessError``)."""
    for attempt in range(MAX_CONNECTS + 1):
        try:
            result = await step()
        except McpCallError as exc:
            if exc.code not in AUTH_CODES or attempt == MAX_CONNECTS:
                raise
            logger.info("headless: the server answered %s; connecting (attempt %s)", exc.code, attempt + 1)
        else:
            if not _needs_authorization(result) or attempt == MAX_CONNECTS:
                return result
            logger.info("headless: operation %s ended %s; connecting (attempt %s)", result.operation_id,
                        result.error_code, attempt + 1)
        server = await sync_to_async(headless.server_for)(url, tenant)
        # its session holds the old credentials
        await connections.pool().close(str(user.pk), connections.server_key(server))
        await connect(user=user, tenant=tenant, server=server)
    raise AssertionError("unreachable")  # pragma: no cover
