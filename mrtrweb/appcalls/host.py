"""The app host: the person's completed ``tools/call`` operation whose page renders its tool's app,
and the audit event of each rendering (issue 31 item 5).

* :func:`note_read` -- the product's ``resources/read`` of an app's HTML was started for this host
  (kept in the binding cache for :data:`NOTE_TTL_S`, to name the host when the document is handed over);
* :func:`record_rendered` -- an ``app_rendered`` event in the tenant's chain, on the host operation:
  ``name`` its tool, ``display_digest`` ``sha256:`` of the HTML, ``config_digest`` ``sha256:`` of the
  CSP header applied, ``actions`` ``{"resource": uri, "domains": "<outside domains>", "refused": n}``;
* :func:`app_host` -- the :class:`AppHost` an app's request speaks for, or :class:`AppCallRefused`
  (``not_rendered`` when the product never rendered an app for that operation, ``apps_off``).
"""

from __future__ import annotations

import hashlib
import logging
from dataclasses import dataclass
from typing import Any

from asgiref.sync import sync_to_async
from django.core.cache import caches
from django.utils.translation import gettext_noop

from .. import conf, operations
from ..audit import events as audit
from ..mcpapps.sandbox import sandbox_origin
from ..models import AppApproval, AuditEvent, McpServer, Operation
from .errors import AppCallRefused

logger = logging.getLogger("mrtrweb.appcalls")

#: seconds the note "this read is the app of that operation" is kept
NOTE_TTL_S = 600
_NOTE = "mrtrweb-app-read:"
NOT_RENDERED = gettext_noop("This app was not rendered by this site: it may call nothing.")
APPS_OFF = gettext_noop("Apps are turned off for this server.")


def cache():
    return caches[conf.get("BINDING_CACHE")]


@dataclass(frozen=True)
class AppHost:
    """What an app's request speaks for: the host operation (``op``, its ``server``, ``tool`` = its
    name), the rendered app's ``uri`` and ``digest`` (``sha256:`` of its HTML, from the last
    ``app_rendered`` event)."""

    op: Operation
    server: McpServer
    tool: str
    uri: str
    digest: str

    def detail(self) -> dict[str, str]:
        """The ``initiator_detail`` every call of this app carries (ids and digests only)."""
        return {"app_of": str(self.op.id), "tool": self.tool[:200], "app_uri": self.uri[:200], "app_digest": self.digest}


def note_read(read_id: Any, host_id: Any) -> None:
    """Sync: remember that the read ``read_id`` fetches the app of the operation ``host_id``."""
    cache().set(_NOTE + str(read_id), str(host_id), NOTE_TTL_S)


def record_rendered(read: Operation, *, digest: str, csp_header: str, domains: tuple[str, ...],
                    refused: int) -> Operation | None:
    """Sync: the ``app_rendered`` event of a document handed over (``read``: the completed read of
    its HTML), on its host operation (the read's own when the host is no longer known). Returns the
    operation the event was written on. Raises :class:`mrtrweb.audit.events.AuditUnavailable` (the
    document is then not handed over)."""
    host_id = cache().get(_NOTE + str(read.id))
    host = None
    if host_id:
        host = Operation.objects.select_related("server").filter(
            pk=host_id, user_id=read.user_id, server_id=read.server_id, method="tools/call").first()
    target = host or read
    audit.record(target, "app_rendered", display_digest=digest,
                 config_digest="sha256:" + hashlib.sha256(csp_header.encode()).hexdigest(),
                 actions={"resource": read.name[:200], "domains": " ".join(domains)[:200], "refused": str(refused)})
    logger.info("app %s of operation %s rendered (%s, %d outside domain(s))", read.name[:100], target.pk, digest[:19],
                len(domains))
    return target


def _approved(server: Any, uri: str, digest: str) -> bool:
    """The document ``digest`` of ``server``'s app ``uri`` is approved now (issue 31 item 1)."""
    return AppApproval.objects.filter(server=server, resource_uri=uri, digest=digest,
                                      status=AppApproval.Status.APPROVED).exists()


def _last_rendering(op_id: Any) -> dict[str, Any] | None:
    return (AuditEvent.objects.filter(operation_id=op_id, event="app_rendered").order_by("-sequence")
            .values("display_digest", "actions").first())


async def app_host(user: Any, op_id: Any) -> AppHost:
    """The host operation ``op_id`` of ``user`` (their own, while they may act on it: Http404 /
    ``AccessEnded`` otherwise), checked: a ``tools/call`` on a server whose apps are on, with an
    app the product rendered.

    Raises:
        AppCallRefused: ``apps_off`` / ``not_rendered`` (403).
    """
    op = await operations.operation_for(user, op_id)
    server = await sync_to_async(lambda: op.server)()
    # as mrtrweb.views.apps.apps_on: apps on, a sandbox, and with approval required the rendered
    # document's digest approved now -- an app that may not render now may not call either
    if op.method != "tools/call" or not getattr(server, "apps_enabled", False) or sandbox_origin() is None:
        raise AppCallRefused("apps_off", APPS_OFF, 403)
    last = await sync_to_async(_last_rendering)(op.pk)
    if last is None or not isinstance(last.get("actions"), dict):
        raise AppCallRefused("not_rendered", NOT_RENDERED, 403)
    if getattr(server, "apps_require_approval", False) and not await sync_to_async(_approved)(
            server, str(last["actions"].get("resource", "")), last["display_digest"]):
        raise AppCallRefused("apps_off", APPS_OFF, 403)
    return AppHost(op=op, server=server, tool=op.name, uri=str(last["actions"].get("resource", "")),
                   digest=last["display_digest"])
