"""When access ends, pending operations end: the ORM's signals (a membership deleted or moved, a
user deactivated or deleted, a server disabled, moved, deleted or given to another owner, a tenant deleted) end the
person's pending operations (``running`` or ``awaiting_input``) concerned at once: ``denied``, with
the audit reason ``access_revoked: <cause>`` (nothing is sent to the server; a call in flight is
abandoned), and close the person's open WebSockets (code :data:`mrtrweb.tenancy.access.CLOSE_CODE`).

Who may act is decided by :mod:`mrtrweb.tenancy.access` alone (and checked again at every step, so access
that ended is refused even where these signals were bypassed); this module only ends what is
pending. :func:`connect_signals` is called from ``MrtrwebConfig.ready``.
"""

from __future__ import annotations

import logging
from typing import Any

from asgiref.sync import sync_to_async
from django.contrib.auth import get_user_model
from django.db import transaction
from django.db.models.signals import post_delete, post_save, pre_delete, pre_save
from django.http import Http404
from django.utils import timezone

from ..tenancy import access
from ..runtime import push
from ..runtime.syncbridge import run_async as _run_async
from ..tenancy.access import (ACCESS_REVOKED, MEMBERSHIP_REMOVED, MESSAGE, PENDING, SERVER_DISABLED, SERVER_REMOVED,
                      TENANT_REMOVED, USER_INACTIVE, USER_REMOVED)
from ..runtime.gates import get_gate, handle_of
from ..models import McpServer, Membership, Operation, Tenant
from ..runtime.push import user_group
from .runtime import finish_operation
from .stopping import request_stop

logger = logging.getLogger("mrtrweb.access")


async def operation_for(user: Any, op_id: Any) -> Operation:
    """``user``'s operation ``op_id`` while they may act on it (server and tenant loaded).

    Raises:
        Http404: no such operation of this user (also for an ``op_id`` that is no UUID).
        access.AccessEnded: it is theirs but their access ended (it is ended now if it was pending).
    """
    op, cause = await sync_to_async(_mine)(user.pk, op_id)  # one thread hop: the row and the access check
    if op is None:
        raise Http404("No such operation")
    if cause:
        await end_operation(op, cause)
        raise access.AccessEnded(op, cause)
    return op


async def operation_and_state(user: Any, op_id: Any) -> tuple[Operation, Any]:
    """:func:`operation_for`, and the gate's state of the operation read in the same thread hop
    (an answer POST reads both): ``(op, state)``, ``state`` the gate's
    :class:`~mrtrweb.gate.OperationState` (None: no live binding) or the
    :class:`~mrtrweb.gate.StoreUnavailable` its read raised (returned, not raised: the caller
    answers it as it answers an unreachable store).

    Raises:
        as :func:`operation_for`."""
    op, cause, state = await sync_to_async(_mine_and_state)(user.pk, op_id)
    if op is None:
        raise Http404("No such operation")
    if cause:
        await end_operation(op, cause)
        raise access.AccessEnded(op, cause)
    return op, state


def _mine_and_state(user_id: Any, op_id: Any) -> tuple[Operation | None, str, Any]:
    from ..gate import StoreUnavailable

    op, cause = _mine(user_id, op_id)
    if op is None or cause:
        return op, cause, None
    try:
        return op, cause, get_gate().state(handle_of(op))
    except StoreUnavailable as exc:
        return op, cause, exc


def _mine(user_id: Any, op_id: Any) -> tuple[Operation | None, str]:
    """Sync: (the user's operation ``op_id`` with its server and tenant, or None; the access
    check's cause for it, ``""`` when allowed)."""
    return access.operation_and_access(op_id, user_id)  # (None, "") also for a value that is no UUID


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
    logger.info("operation %s denied: access ended (%s)", op.id, cause)
    try:
        await sync_to_async(request_stop)(op.id)
    except Exception:  # noqa: BLE001 -- the holder of a legacy call still sees the row ended within a second
        logger.warning("could not write the stop request of operation %s", op.id)
    op.status = Operation.Status.DENIED
    if audit:
        await finish_operation(op, Operation.Status.DENIED, code="denied", reason=f"{ACCESS_REVOKED}: {cause}",
                                 message=str(MESSAGE), event="denied", already_marked=True)
        return
    try:
        await sync_to_async(get_gate().close)(handle_of(op))
    except Exception:  # noqa: BLE001 -- the binding expires on its own; nothing is sent for it anyway
        logger.warning("could not close binding of operation %s; it expires on its own", op.id)


async def close_sockets(user_ids: set[Any], cause: str) -> None:
    """Close every open WebSocket of ``user_ids`` (code :data:`CLOSE_CODE`). Never raises: a
    channel layer outage is logged (:mod:`mrtrweb.runtime.push`); each push re-checks access anyway."""
    for uid in user_ids:
        await push.group_send(user_group(uid), {"type": "access.revoked", "cause": cause}, what="access revoked")


# -- ending access from the ORM's signals --------------------------------------------------------

async def _after_commit(ops: list[Operation], cause: str, audit: bool, user_ids: set[Any]) -> None:
    for op in ops:
        try:
            await _settle(op, cause, audit=audit)
        except Exception:  # noqa: BLE001 -- the row is already denied: nothing can be sent for it
            logger.exception("operation %s: ending after access ended failed", op.id)
    await close_sockets(user_ids, cause)


def revoke(ops_filter: dict[str, Any], cause: str, user_ids: set[Any], *, audit: bool = True,
           exclude: dict[str, Any] | None = None) -> list[Any]:
    """Access ended for the operations matching ``ops_filter`` and not ``exclude`` (sync, from a signal handler):
    claim the pending ones as ``denied`` now (in the caller's transaction), then, once it commits,
    settle them (:func:`_settle`) and close the sockets of ``user_ids`` and of the operations'
    owners. Returns the ids of the operations claimed."""
    ops = list(Operation.objects.filter(status__in=PENDING, **ops_filter).exclude(**(exclude or {}))
               .select_related("server", "tenant"))
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
    from ..authz.models import OAuthConnection

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
        instance._mrtr_was = McpServer.objects.filter(pk=instance.pk).values_list("tenant_id", "owner_id").first()


def _server_saved(sender, instance: McpServer, created: bool, raw: bool = False, **kwargs: Any) -> None:
    was = getattr(instance, "_mrtr_was", None)
    if created or raw:
        return
    if was is not None and was[0] != instance.tenant_id:
        revoke({"server_id": instance.pk, "tenant_id": was[0]}, SERVER_REMOVED, set())
    if was is not None and instance.owner_id is not None and was[1] != instance.owner_id:
        # a personal server given to another person (or a tenant server made personal): everyone
        # else's pending operations on it end, as its access rule (access.mine) now says
        revoke({"server_id": instance.pk}, SERVER_REMOVED, set(), exclude={"user_id": instance.owner_id})
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
    uid = "mrtrweb.access."  # unchanged: a project that disconnects them by uid keeps working
    pre_save.connect(_membership_saving, sender=Membership, dispatch_uid=uid + "membership-saving")
    post_save.connect(_membership_saved, sender=Membership, dispatch_uid=uid + "membership-saved")
    post_delete.connect(_membership_deleted, sender=Membership, dispatch_uid=uid + "membership-deleted")
    post_save.connect(_user_saved, sender=User, dispatch_uid=uid + "user-saved")
    pre_delete.connect(_user_deleting, sender=User, dispatch_uid=uid + "user-deleting")
    pre_save.connect(_server_saving, sender=McpServer, dispatch_uid=uid + "server-saving")
    post_save.connect(_server_saved, sender=McpServer, dispatch_uid=uid + "server-saved")
    pre_delete.connect(_server_deleting, sender=McpServer, dispatch_uid=uid + "server-deleting")
    pre_delete.connect(_tenant_deleting, sender=Tenant, dispatch_uid=uid + "tenant-deleting")


async def _access_ended(op: Operation) -> bool:
    """Whether the owner's access to ``op`` ended (:mod:`mrtrweb.tenancy.access`); it is then ended as
    ``denied`` (``access_revoked``) and nothing more is sent for it."""
    cause = await access.operation_denial(op)
    if cause:
        await end_operation(op, cause)
    return bool(cause)
