"""Who may act on an operation: the one access check, and what happens when access ends.

An operation (or a server) may be seen, answered, stopped or pushed only while all of these hold:
the user exists and is active, the user is a member of the operation's tenant (the tenant exists),
and the server exists in that tenant and is enabled. :func:`denial` / :func:`adenial` say which one
failed; views (review, Send, Decline, Stop, the operation page and panel), the WebSocket consumer
(connect, every push) and :mod:`mrtrweb.operations` (before each request is sent, before a round
is shown, before an answer is built) all ask it, so access that ended is refused even when the
signals below were bypassed (``QuerySet.update``, raw SQL).

When access ends through the ORM (a membership deleted or moved, a user deactivated or deleted,
a server disabled, moved or deleted, a tenant deleted), :func:`connect_signals`' handlers end the
person's pending operations (``running`` or ``awaiting_input``) concerned at once: ``denied``,
with the audit reason ``access_revoked: <cause>`` (nothing is sent to the server; a call in
flight is abandoned), and close the person's open WebSockets (code :data:`CLOSE_CODE`).
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import logging
from typing import Any, Final

from asgiref.sync import async_to_sync, sync_to_async
from django.contrib.auth import get_user_model
from django.core.exceptions import ValidationError
from django.db import transaction
from django.db.models import Exists, OuterRef, Subquery
from django.db.models.signals import post_delete, post_save, pre_delete, pre_save
from django.http import Http404
from django.utils import timezone
from django.utils.translation import gettext_lazy as _

from .models import McpServer, Membership, Operation, Tenant

logger = logging.getLogger("mrtrweb.access")

#: the ``reason`` prefix of the ``denied`` audit event of an operation whose access ended
ACCESS_REVOKED: Final = "access_revoked"
#: the WebSocket close code sent to a person's sockets when their access ended
CLOSE_CODE: Final = 4403
#: causes (the second part of the audit reason; also logged)
USER_REMOVED, USER_INACTIVE = "user_removed", "user_inactive"
MEMBERSHIP_REMOVED, TENANT_REMOVED = "membership_removed", "tenant_removed"
SERVER_REMOVED, SERVER_DISABLED = "server_removed", "server_disabled"

MESSAGE = _("Your access to this server or organisation ended; nothing more was sent for this operation.")
PENDING = (Operation.Status.RUNNING, Operation.Status.AWAITING_INPUT)


class AccessEnded(Http404):
    """The user's own operation, whose access ended (``cause``): shown as 404, acted on never."""

    def __init__(self, op: Operation, cause: str) -> None:
        super().__init__("No such operation")
        self.op, self.cause = op, cause


def _query(user_id: Any, tenant_id: Any, server_id: Any):
    """One row for the user (or none): ``is_active`` (when the model has it), ``_member`` (bool),
    ``_server`` (the server's ``enabled`` in that tenant, None when it is not there)."""
    User = get_user_model()
    fields = {f.name for f in User._meta.get_fields()}
    annotations = {"_member": Exists(Membership.objects.filter(tenant_id=tenant_id, user_id=OuterRef("pk")))}
    if server_id is not None:
        annotations["_server"] = Subquery(McpServer.objects.filter(pk=server_id, tenant_id=tenant_id)
                                          .values("enabled")[:1])
    names = ["is_active"] if "is_active" in fields else []
    return User._default_manager.filter(pk=user_id).annotate(**annotations).values(*names, *annotations)


def _cause(row: dict[str, Any] | None, tenant_id: Any, server_id: Any) -> str:
    if row is None:
        return USER_REMOVED
    if row.get("is_active", True) is not True:
        return USER_INACTIVE
    if not row["_member"]:
        return MEMBERSHIP_REMOVED if Tenant.objects.filter(pk=tenant_id).exists() else TENANT_REMOVED
    if server_id is not None and row["_server"] is None:
        return SERVER_REMOVED
    if server_id is not None and row["_server"] is not True:
        return SERVER_DISABLED
    return ""


def denial(user_id: Any, tenant_id: Any, server_id: Any = None) -> str:
    """Why ``user_id`` may not act in ``tenant_id`` (on ``server_id``, when given), or ``""`` when
    they may: one of the cause constants (sync; one query, two when the membership is missing)."""
    return _cause(_query(user_id, tenant_id, server_id).first(), tenant_id, server_id)


async def adenial(user_id: Any, tenant_id: Any, server_id: Any = None) -> str:
    """:func:`denial` from async code."""
    return await sync_to_async(denial)(user_id, tenant_id, server_id)


async def operation_denial(op: Operation) -> str:
    """Why ``op``'s owner may no longer act on it, or ``""``."""
    return await adenial(op.user_id, op.tenant_id, op.server_id)


async def server_for(user: Any, server_id: Any) -> McpServer:
    """The enabled server ``server_id`` of a tenant ``user`` is a member of and may act in (tenant
    loaded): every page and action on a server starts here.

    Raises:
        Http404: no such server for this user, or their access ended (e.g. an inactive user).
    """
    try:
        server = await McpServer.objects.select_related("tenant").aget(
            pk=server_id, enabled=True, tenant__memberships__user=user)
    except (McpServer.DoesNotExist, ValueError, TypeError, OverflowError):
        raise Http404("No such server") from None
    if await adenial(user.pk, server.tenant_id, server.pk):
        raise Http404("No such server")
    return server


async def operation_for(user: Any, op_id: Any) -> Operation:
    """``user``'s operation ``op_id`` while they may act on it (server and tenant loaded).

    Raises:
        Http404: no such operation of this user (also for an ``op_id`` that is no UUID).
        AccessEnded: it is theirs but their access ended (it is ended now if it was pending).
    """
    try:
        op = await Operation.objects.select_related("server", "tenant").aget(pk=op_id, user=user)
    except (Operation.DoesNotExist, ValueError, TypeError, ValidationError):  # a value that is no UUID
        raise Http404("No such operation") from None
    cause = await operation_denial(op)
    if cause:
        await end_operation(op, cause)
        raise AccessEnded(op, cause)
    return op


async def visible_operation(user_id: Any, op_id: Any) -> Operation | None:
    """The operation to push to ``user_id``'s sockets, or None (not theirs, or access ended)."""
    try:
        op = await Operation.objects.select_related("server", "tenant").aget(pk=op_id, user_id=user_id)
    except (Operation.DoesNotExist, ValueError, TypeError, ValidationError):
        return None
    return None if await operation_denial(op) else op


async def visible_server(user_id: Any, server_id: Any) -> bool:
    """Whether ``user_id`` may see server ``server_id`` now (as :func:`server_for` would let them):
    the check before a server's listing push reaches their sockets."""
    try:
        server = await McpServer.objects.only("pk", "tenant_id").aget(
            pk=server_id, enabled=True, tenant__memberships__user_id=user_id)
    except (McpServer.DoesNotExist, ValueError, TypeError, OverflowError):
        return False
    return not await adenial(user_id, server.tenant_id, server.pk)


async def user_may_connect(user: Any) -> bool:
    """A WebSocket connect: the user (re-read now) exists and is active."""
    User = get_user_model()
    names = ["is_active"] if "is_active" in {f.name for f in User._meta.get_fields()} else ["pk"]
    row = await User._default_manager.filter(pk=user.pk).values(*names).afirst()
    return row is not None and row.get("is_active", True) is True


async def end_operation(op: Operation, cause: str) -> bool:
    """End ``op`` as ``denied`` (``access_revoked: <cause>``) if it is still pending: its binding
    closed, the audit event written, a call in flight abandoned, nothing sent. False when it had
    already ended."""
    if op.status not in PENDING:
        op = await Operation.objects.select_related("server", "tenant").aget(pk=op.pk)
        if op.status not in PENDING:
            return False
    claimed = await Operation.objects.filter(pk=op.pk, status__in=PENDING).aupdate(
        status=Operation.Status.DENIED, error_code="denied", error_message=str(MESSAGE), updated_at=timezone.now())
    if claimed:
        await _settle(op, cause, audit=True)
    return bool(claimed)


async def _settle(op: Operation, cause: str, *, audit: bool) -> None:
    """After ``op``'s row was marked ``denied`` (or deleted with its server/user): stop its call,
    close its binding, write the ``denied`` event (unless its tenant is gone), push."""
    from . import operations

    logger.info("operation %s denied: access ended (%s)", op.id, cause)
    try:
        await sync_to_async(operations.request_stop)(op.id)
    except Exception:  # noqa: BLE001 -- the holder of a legacy call still sees the row ended within a second
        logger.warning("could not write the stop request of operation %s", op.id)
    op.status = Operation.Status.DENIED
    if audit:
        await operations._finish(op, Operation.Status.DENIED, code="denied", reason=f"{ACCESS_REVOKED}: {cause}",
                                 message=str(MESSAGE), event="denied", already_marked=True)
        return
    try:
        await sync_to_async(operations.get_gate().close)(operations.handle_of(op))
    except Exception:  # noqa: BLE001 -- the binding expires on its own; nothing is sent for it anyway
        logger.warning("could not close binding of operation %s; it expires on its own", op.id)


async def close_sockets(user_ids: set[Any], cause: str) -> None:
    """Close every open WebSocket of ``user_ids`` (code :data:`CLOSE_CODE`). Never raises: a
    channel layer outage is logged (:mod:`mrtrweb.push`); each push re-checks access anyway."""
    from . import push
    from .operations import user_group

    for uid in user_ids:
        await push.group_send(user_group(uid), {"type": "access.revoked", "cause": cause}, what="access revoked")


# -- ending access from the ORM's signals --------------------------------------------------------

def _run_async(fn, *args: Any, **kwargs: Any) -> None:
    """Run coroutine function ``fn`` from sync code; in another thread when an event loop runs in
    this one (sync ORM calls allowed inside async code by ``DJANGO_ALLOW_ASYNC_UNSAFE``)."""
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        async_to_sync(fn)(*args, **kwargs)
        return
    with concurrent.futures.ThreadPoolExecutor(1) as pool:
        pool.submit(async_to_sync(fn), *args, **kwargs).result()


async def _after_commit(ops: list[Operation], cause: str, audit: bool, user_ids: set[Any]) -> None:
    for op in ops:
        try:
            await _settle(op, cause, audit=audit)
        except Exception:  # noqa: BLE001 -- the row is already denied: nothing can be sent for it
            logger.exception("operation %s: ending after access ended failed", op.id)
    await close_sockets(user_ids, cause)


def revoke(ops_filter: dict[str, Any], cause: str, user_ids: set[Any], *, audit: bool = True) -> list[Any]:
    """Access ended for the operations matching ``ops_filter`` (sync, from a signal handler):
    claim the pending ones as ``denied`` now (in the caller's transaction), then, once it commits,
    settle them (:func:`_settle`) and close the sockets of ``user_ids`` and of the operations'
    owners. Returns the ids of the operations claimed."""
    ops = list(Operation.objects.filter(status__in=PENDING, **ops_filter).select_related("server", "tenant"))
    claimed = []
    for op in ops:
        if Operation.objects.filter(pk=op.pk, status__in=PENDING).update(
                status=Operation.Status.DENIED, error_code="denied", error_message=str(MESSAGE),
                updated_at=timezone.now()):
            claimed.append(op)
    users = set(user_ids) | {op.user_id for op in claimed}
    if claimed or users:
        logger.info("access ended (%s): %d pending operation(s) denied, sockets of %d user(s) closed", cause,
                    len(claimed), len(users))
        transaction.on_commit(lambda: _run_async(_after_commit, claimed, cause, audit, users))
    return [op.pk for op in claimed]


def _membership_saving(sender, instance: Membership, raw: bool = False, **kwargs: Any) -> None:
    instance._mrtr_was = None
    if instance.pk and not raw:
        instance._mrtr_was = Membership.objects.filter(pk=instance.pk).values_list("tenant_id", "user_id").first()


def _forget_connections(tenant_id: Any, user_id: Any) -> None:
    """A person who left a tenant keeps no OAuth connection to its servers (their tokens are
    deleted here; the authorization server's grant stays until it expires: revoking needs the
    network, which a signal handler must not wait on)."""
    from .authz.models import OAuthConnection

    gone, _ = OAuthConnection.objects.filter(tenant_id=tenant_id, user_id=user_id).delete()
    if gone:
        logger.info("access ended (%s): %d OAuth connection(s) of user %s deleted", MEMBERSHIP_REMOVED, gone, user_id)


def _membership_saved(sender, instance: Membership, created: bool, raw: bool = False, **kwargs: Any) -> None:
    was = getattr(instance, "_mrtr_was", None)
    if was and was != (instance.tenant_id, instance.user_id):
        revoke({"tenant_id": was[0], "user_id": was[1]}, MEMBERSHIP_REMOVED, {was[1]})
        _forget_connections(was[0], was[1])


def _membership_deleted(sender, instance: Membership, **kwargs: Any) -> None:
    revoke({"tenant_id": instance.tenant_id, "user_id": instance.user_id}, MEMBERSHIP_REMOVED, {instance.user_id})
    _forget_connections(instance.tenant_id, instance.user_id)


def _user_saved(sender, instance: Any, created: bool, raw: bool = False, **kwargs: Any) -> None:
    if not created and not raw and getattr(instance, "is_active", True) is not True:
        revoke({"user_id": instance.pk}, USER_INACTIVE, {instance.pk})


def _user_deleting(sender, instance: Any, **kwargs: Any) -> None:
    revoke({"user_id": instance.pk}, USER_REMOVED, {instance.pk})


def _server_saving(sender, instance: McpServer, raw: bool = False, **kwargs: Any) -> None:
    instance._mrtr_was = None
    if instance.pk and not raw:
        instance._mrtr_was = McpServer.objects.filter(pk=instance.pk).values_list("tenant_id", flat=True).first()


def _server_saved(sender, instance: McpServer, created: bool, raw: bool = False, **kwargs: Any) -> None:
    was = getattr(instance, "_mrtr_was", None)
    if created or raw:
        return
    if was is not None and was != instance.tenant_id:
        revoke({"server_id": instance.pk, "tenant_id": was}, SERVER_REMOVED, set())
    if not instance.enabled:
        revoke({"server_id": instance.pk}, SERVER_DISABLED, set())


def _server_deleting(sender, instance: McpServer, **kwargs: Any) -> None:
    revoke({"server_id": instance.pk}, SERVER_REMOVED, set())


def _tenant_deleting(sender, instance: Tenant, **kwargs: Any) -> None:
    # A tenant with audit events cannot be deleted (PROTECT): what is pending here never reached a
    # round; its operations and the tenant go, so no audit event can be written for them.
    members = set(Membership.objects.filter(tenant=instance).values_list("user_id", flat=True))
    revoke({"tenant_id": instance.pk}, TENANT_REMOVED, members, audit=False)


def connect_signals() -> None:
    """Wire the handlers above (called from ``MrtrwebConfig.ready``)."""
    User = get_user_model()
    uid = "mrtrweb.access."
    pre_save.connect(_membership_saving, sender=Membership, dispatch_uid=uid + "membership-saving")
    post_save.connect(_membership_saved, sender=Membership, dispatch_uid=uid + "membership-saved")
    post_delete.connect(_membership_deleted, sender=Membership, dispatch_uid=uid + "membership-deleted")
    post_save.connect(_user_saved, sender=User, dispatch_uid=uid + "user-saved")
    pre_delete.connect(_user_deleting, sender=User, dispatch_uid=uid + "user-deleting")
    pre_save.connect(_server_saving, sender=McpServer, dispatch_uid=uid + "server-saving")
    post_save.connect(_server_saved, sender=McpServer, dispatch_uid=uid + "server-saved")
    pre_delete.connect(_server_deleting, sender=McpServer, dispatch_uid=uid + "server-deleting")
    pre_delete.connect(_tenant_deleting, sender=Tenant, dispatch_uid=uid + "tenant-deleting")
