"""A person's "Test" of a server: who may, how often, and the result kept on a saved server.

* :func:`may_test` -- whether ``user`` may test servers for ``tenant``: its tenant admins, and its
  members where the tenant allows personal servers (``Tenant.allow_personal_servers``).
* :func:`allowed` -- the per-person rate limit: at most ``MRTRWEB["SERVER_TESTS_PER_MINUTE"]``
  tests a minute (a fixed window in the shared ``default`` cache, as the other throttles; a cache
  that fails refuses, logged).
* ``async`` :func:`run_test` ``(user, tenant, url, protocol, bearer=None, *, server=None) -> dict``
  -- the rate limit, then :func:`mrtrweb.serverconfig.probe.probe` under the deployer's URL policy
  (a saved ``server`` is tested under :func:`~mrtrweb.serverconfig.policy.for_server`: a superuser's
  server unrestricted), the report returned (``reason="rate_limited"`` without connecting when over
  the limit). The caller checked :func:`may_test`; the bearer is used, never logged or kept.
* :func:`record_test` / :func:`arecord_test` ``(server, report)`` -- keep a report as the server's
  last test (``McpServer.last_test``, ``last_tested_at``).
"""

from __future__ import annotations

import logging
import time
from typing import Any

from django.core.cache import caches
from django.utils import timezone

from .. import conf
from ..authz.config import outbound_policy
from ..mcp.loglimit import LogLimiter
from ..models import McpServer, Membership, Tenant
from . import policy
from .probe import probe, refused_report

__all__ = ["WINDOW_S", "allowed", "arecord_test", "may_test", "record_test", "run_test"]

logger = logging.getLogger("mrtrweb.serverconfig")
_log = LogLimiter(logger, 60.0)

#: the rate limit's window, seconds
WINDOW_S = 60


def allowed(user_id: Any) -> bool:
    """Sync: count one test of ``user_id``; whether it is within ``SERVER_TESTS_PER_MINUTE``."""
    limit = int(conf.get("SERVER_TESTS_PER_MINUTE"))
    key = f"mrtrweb-server-test:{user_id}:{int(time.time() // WINDOW_S)}"
    cache = caches["default"]
    try:
        if cache.add(key, 1, WINDOW_S * 2):
            return limit >= 1
        try:
            return cache.incr(key) <= limit
        except ValueError:  # expired between add and incr: a new window
            return True
    except Exception as exc:  # noqa: BLE001 -- any cache failure: refuse, never test unthrottled
        _log.warning("cache", "server tests refused: the cache failed (%s)", type(exc).__name__)
        return False


async def may_test(user: Any, tenant: Tenant) -> bool:
    """Whether ``user`` may test servers of ``tenant`` (see the module doc)."""
    if not getattr(user, "is_authenticated", False):
        return False
    role = await Membership.objects.filter(user=user, tenant=tenant).values_list("role", flat=True).afirst()
    if role == Membership.Role.ADMIN:
        return True
    return role is not None and bool(tenant.allow_personal_servers)


async def run_test(user: Any, tenant: Tenant, url: str, protocol: str, bearer: str | None = None, *,
                   server: McpServer | None = None) -> dict[str, Any]:
    """Test ``url`` for ``user`` of ``tenant`` (see the module doc); the report. Never raises for
    what the URL or the server does."""
    if protocol not in McpServer.Protocol.values:
        protocol = McpServer.Protocol.AUTO
    from asgiref.sync import sync_to_async

    if not await sync_to_async(allowed, thread_sensitive=False)(user.pk):
        logger.info("server test by user %s in tenant %s refused: over the rate limit", user.pk, tenant.pk)
        return refused_report(url, protocol, "rate_limited", "too many tests in a minute")
    url_policy = policy.for_server(server) if server is not None else policy.current()
    report = await probe(url, protocol, url_policy=url_policy, outbound=outbound_policy(), bearer=bearer or None)
    logger.info("server test by user %s in tenant %s of %s: %s%s (%d ms)", user.pk, tenant.pk, report["origin"],
                report["outcome"], f" ({report['reason']})" if report["reason"] else "", report["elapsed_ms"])
    return report


def record_test(server: McpServer, report: dict[str, Any]) -> None:
    """Keep ``report`` as ``server``'s last test (``last_test``, ``last_tested_at`` now)."""
    server.last_test = dict(report)
    server.last_tested_at = timezone.now()
    McpServer.objects.filter(pk=server.pk).update(last_test=server.last_test, last_tested_at=server.last_tested_at)


async def arecord_test(server: McpServer, report: dict[str, Any]) -> None:
    """:func:`record_test`, async."""
    server.last_test = dict(report)
    server.last_tested_at = timezone.now()
    await McpServer.objects.filter(pk=server.pk).aupdate(last_test=server.last_test,
                                                        last_tested_at=server.last_tested_at)
