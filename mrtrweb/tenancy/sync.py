"""Tenants from the embedding portal: its organisations, mapped to tenants by one hook.

A portal that has organisations of its own sets ``MRTRWEB["TENANT_RESOLVER"]`` to the dotted path
of a callable ``(user) -> iterable of TenantGrant(key, name, role)``: the organisations ``user``
belongs to now, ``key`` being the organisation's stable id in the portal. :func:`sync_user` makes
the tenants and that user's memberships follow it:

- a tenant per organisation key (``Tenant.external_key``): created when first seen (a slug made
  from the name), renamed when the organisation is (its slug stays: it is in URLs);
- the user's memberships of those *managed* tenants (``external_key`` set) are added, given the
  grant's role, or deleted when the organisation no longer lists the user. A deletion goes through
  the ORM, so :mod:`mrtrweb.operations.revocation` ends the user's pending rounds there at once
  (``access_revoked: membership_removed``) and closes their sockets, and :mod:`mrtrweb.tenancy.access`
  (unchanged) refuses their next answer;
- tenants managed by hand (``external_key`` empty) and their memberships are never touched.

It runs at sign-in (``user_logged_in``) and, through :class:`TenantSyncMiddleware`, at a request of
a signed-in user once ``MRTRWEB["TENANT_SYNC_S"]`` passed since the last successful sync (a mark in
the binding cache, so one cache read per request). A portal that wants a removal to count at once
calls :func:`sync_user` itself (e.g. from its own ``post_delete`` of an organisation member).

The resolver failing -- it raises, or answers something that is no list -- fails closed:
nothing is created, no membership added or widened (no role raised), nothing removed either (a
portal outage must not end every pending round), and the sync is asked again at the next request.
An item of the list that is no valid grant is left out (its organisation grants nothing). Removals
are applied first and on their own, so no grant that cannot be applied (a name, a value the
database refuses) holds one back.
The reason is logged in one line with a stable code (:data:`RESOLVER_FAILED`,
:data:`RESOLVER_INVALID`, :data:`SYNC_FAILED`); the request goes on, never a 500.
"""

from __future__ import annotations

import functools
import hashlib
import logging
from collections.abc import Callable, Iterable
from typing import Any, Final, NamedTuple

from asgiref.sync import iscoroutinefunction, markcoroutinefunction, sync_to_async
from django.contrib.auth.signals import user_logged_in
from django.core.cache import caches
from django.core.exceptions import ImproperlyConfigured
from django.db import DatabaseError, IntegrityError, transaction
from django.utils.module_loading import import_string
from django.utils.text import slugify

from .. import conf
from ..models import Membership, Tenant

logger = logging.getLogger("mrtrweb.tenancy")

#: stable reasons of a sync that changed nothing (logged)
RESOLVER_FAILED: Final = "tenant_resolver_failed"
RESOLVER_INVALID: Final = "tenant_resolver_invalid"
SYNC_FAILED: Final = "tenant_sync_failed"

#: the most characters of a tenant name and of an organisation key (the model's columns)
NAME_MAX = Tenant._meta.get_field("name").max_length
KEY_MAX = Tenant._meta.get_field("external_key").max_length
SLUG_MAX = Tenant._meta.get_field("slug").max_length
ROLES = frozenset(Membership.Role.values)


class TenantGrant(NamedTuple):
    """One organisation of the portal a user belongs to: its stable ``key`` (a string or an int),
    the ``name`` the tenant takes, and the user's ``role`` there (``"member"`` or ``"admin"``)."""

    key: str
    name: str
    role: str = Membership.Role.MEMBER


class ResolverError(Exception):
    """The resolver could not tell (``reason`` is one of the stable codes; ``detail`` is safe to
    log: no value the resolver returned)."""

    def __init__(self, reason: str, detail: str) -> None:
        super().__init__(f"{reason}: {detail}")
        self.reason, self.detail = reason, detail


def configured() -> bool:
    """Whether a tenant resolver is configured (False, logged, when the setting is unusable:
    system check mrtrweb.E001 names it; nothing is synced, so nothing is granted)."""
    try:
        return conf.get("TENANT_RESOLVER") is not None
    except ImproperlyConfigured:
        logger.warning("%s: MRTRWEB TENANT_RESOLVER is not usable (see system check mrtrweb.E001)", RESOLVER_FAILED)
        return False


@functools.lru_cache(maxsize=4)
def load(path: str) -> Callable[[Any], Iterable[Any]]:
    """The resolver at the dotted ``path`` (imported once).

    Raises:
        ImportError: no such module or attribute.
        TypeError: it is not callable.
    """
    resolver = import_string(path)
    if not callable(resolver):
        raise TypeError(f"{path} is not callable")
    return resolver


def grants_of(user: Any) -> dict[str, TenantGrant]:
    """The configured resolver's grants for ``user``, by key (checked; a key listed twice keeps its
    first name and its highest role). An item that is not a valid grant is left out, with its
    position and what is wrong logged (:data:`RESOLVER_INVALID`): its organisation then grants
    nothing, and one bad organisation cannot hold back the rest of the sync (removals included).

    Raises:
        ResolverError: the resolver failed, or answered something that is not a list of grants.
    """
    try:
        found = list(load(conf.get("TENANT_RESOLVER"))(user))
    except Exception as exc:  # noqa: BLE001 -- the portal's code: any failure fails closed
        raise ResolverError(RESOLVER_FAILED, exc.__class__.__name__) from exc
    grants: dict[str, TenantGrant] = {}
    for index, item in enumerate(found):
        try:
            grant = _checked(item, index)
        except ResolverError as exc:
            logger.warning("%s: a grant of user %s left out (%s)", exc.reason, getattr(user, "pk", None), exc.detail)
            continue
        held = grants.get(grant.key)
        if held is None or (held.role != Membership.Role.ADMIN and grant.role == Membership.Role.ADMIN):
            grants[grant.key] = TenantGrant(grant.key, held.name if held else grant.name, grant.role)
    return grants


def _checked(item: Any, index: int) -> TenantGrant:
    """One grant as :class:`TenantGrant` (a 2- or 3-tuple is taken too).

    Raises:
        ResolverError: (:data:`RESOLVER_INVALID`) naming the item's position and what is wrong.
    """
    if not isinstance(item, (tuple, list)) or len(item) not in (2, 3):
        raise ResolverError(RESOLVER_INVALID, f"item {index} is no TenantGrant(key, name, role)")
    key, name, role = (*item, Membership.Role.MEMBER) if len(item) == 2 else item
    if isinstance(key, int) and not isinstance(key, bool):
        key = str(key)
    if not isinstance(key, str) or not key.strip() or len(key) > KEY_MAX or not key.isprintable():
        raise ResolverError(RESOLVER_INVALID, f"item {index}: the key must be a non-empty string of at most "
                                              f"{KEY_MAX} printable characters, or an int")
    if isinstance(name, str):  # control characters (NUL: PostgreSQL refuses it) become spaces
        name = "".join(ch if ch.isprintable() else " " for ch in name)
    if not isinstance(name, str) or not name.strip():
        raise ResolverError(RESOLVER_INVALID, f"item {index}: the name must be a non-empty string")
    if role not in ROLES:
        raise ResolverError(RESOLVER_INVALID, f"item {index}: the role must be one of {sorted(ROLES)}")
    return TenantGrant(key, " ".join(name.split())[:NAME_MAX], str(role))


def sync_user(user: Any) -> bool:
    """Make ``user``'s memberships of managed tenants (and those tenants) follow the resolver.

    True when they do now; False when no resolver is configured, the user is anonymous or
    inactive, or the sync failed (logged with its reason; nothing was granted). Never raises."""
    if not configured() or not getattr(user, "is_authenticated", False) or not getattr(user, "is_active", True):
        return False
    try:
        grants = grants_of(user)
    except ResolverError as exc:
        logger.warning("%s: memberships of user %s left as they were (%s)", exc.reason, user.pk, exc.detail)
        return False
    try:
        changes = _apply(user, grants)
    except DatabaseError as exc:
        logger.warning("%s: memberships of user %s left as they were (%s)", SYNC_FAILED, user.pk,
                       exc.__class__.__name__)
        return False
    if any(changes.values()):
        logger.info("tenant sync of user %s: %s", user.pk, ", ".join(f"{k} {v}" for k, v in changes.items() if v))
    _mark_fresh(user.pk)
    return True


def _apply(user: Any, grants: dict[str, TenantGrant]) -> dict[str, int]:
    """Set ``user``'s memberships of managed tenants to exactly the grants, creating or renaming
    the grants' tenants. Returns counts of what changed.

    Removals come first, in a transaction of their own, so nothing about the user's other
    organisations (a name no tenant can take, a database refusing a value) can hold them back.
    Then each grant in a savepoint of its own: a tenant that cannot be created or renamed is
    logged (:data:`SYNC_FAILED`) and skipped -- no membership is added for a tenant that does not
    exist; a failed rename keeps the old name and the membership.

    Raises:
        DatabaseError: the removals themselves failed (nothing else was tried).
    """
    changes = {"tenants created": 0, "renamed": 0, "memberships added": 0, "removed": 0, "role changed": 0}
    with transaction.atomic():
        for membership in (Membership.objects.filter(user_id=user.pk, tenant__external_key__isnull=False)
                           .exclude(tenant__external_key__in=list(grants))):
            membership.delete()  # the revocation signals end pending rounds there (access_revoked)
            changes["removed"] += 1
    tenants = {t.external_key: t for t in Tenant.objects.filter(external_key__in=list(grants))}
    held = {m.tenant_id: m for m in Membership.objects.filter(user_id=user.pk, tenant__external_key__isnull=False)}
    for key, grant in grants.items():
        try:
            with transaction.atomic():
                _apply_grant(user, grant, tenants.get(key), held, changes)
        except DatabaseError as exc:
            logger.warning("%s: organisation grant of user %s skipped (%s)", SYNC_FAILED, user.pk,
                           exc.__class__.__name__)
    return changes


def _apply_grant(user: Any, grant: TenantGrant, tenant: Tenant | None, held: dict[Any, Membership],
                 changes: dict[str, int]) -> None:
    """One grant: its tenant created or renamed, the user's membership added or given its role."""
    if tenant is None:
        tenant = _create_tenant(grant.key, grant.name)
        changes["tenants created"] += 1
    elif tenant.name != grant.name and tenant.name != (name := _free_name(grant.name, grant.key, tenant.pk)):
        try:
            with transaction.atomic():
                Tenant.objects.filter(pk=tenant.pk).update(name=name)
            changes["renamed"] += 1
        except DatabaseError as exc:  # another tenant took the name meanwhile: keep the old one
            logger.warning("%s: tenant %s not renamed (%s)", SYNC_FAILED, tenant.pk, exc.__class__.__name__)
    membership = held.get(tenant.pk)
    if membership is None:
        Membership.objects.create(tenant_id=tenant.pk, user_id=user.pk, role=grant.role)
        changes["memberships added"] += 1
    elif membership.role != grant.role:
        membership.role = grant.role
        membership.save(update_fields=["role"])
        changes["role changed"] += 1


def _free_name(name: str, key: str, own_pk: Any = None) -> str:
    """``name``, else ``name (key)``, else ``name (key) 2``, 3, ...: the first that no other tenant
    has (tenant names are unique), always within :data:`NAME_MAX` (the name and then the key
    are cut to fit; a key too long for a readable suffix is shown as its first 24 characters)."""
    taken = Tenant.objects.exclude(pk=own_pk)
    if not taken.filter(name=name).exists():
        return name
    shown_key = key if len(key) <= 24 else key[:23] + "…"
    for n in range(1, 1000):
        suffix = f" ({shown_key})" + (f" {n}" if n > 1 else "")
        candidate = name[:max(1, NAME_MAX - len(suffix))].rstrip() + suffix
        if not taken.filter(name=candidate).exists():
            return candidate
    return f"{name[:NAME_MAX - 45].rstrip()} ({hashlib.sha256(key.encode()).hexdigest()[:40]})"


def _create_tenant(key: str, name: str) -> Tenant:
    """A new managed tenant for organisation ``key`` (another request may have just made it)."""
    base = (slugify(name) or "org")[:SLUG_MAX - 8]
    slug, n = base, 1
    while Tenant.objects.filter(slug=slug).exists():
        n += 1
        slug = f"{base}-{n}"
    try:
        with transaction.atomic():
            return Tenant.objects.create(external_key=key, name=_free_name(name, key), slug=slug)
    except IntegrityError:
        tenant = Tenant.objects.filter(external_key=key).first()
        if tenant is None:
            raise
        return tenant


# -- when: at sign-in, and at a request once the last sync is older than TENANT_SYNC_S -----------

def _fresh_key(user_pk: Any) -> str:
    return f"{conf.get('BINDING_KEY_PREFIX')}:tenancy:{user_pk}"


def _mark_fresh(user_pk: Any) -> None:
    try:
        caches[conf.get("BINDING_CACHE")].set(_fresh_key(user_pk), 1, timeout=conf.get("TENANT_SYNC_S"))
    except Exception:  # noqa: BLE001 -- no mark: the next request asks the resolver again
        logger.warning("%s: the sync mark of user %s could not be kept", SYNC_FAILED, user_pk)


def forget(user_pk: Any) -> None:
    """Let the next request of ``user_pk`` ask the resolver again (e.g. after the portal changed
    their organisations and wants it to count before ``TENANT_SYNC_S`` passed)."""
    try:
        caches[conf.get("BINDING_CACHE")].delete(_fresh_key(user_pk))
    except Exception:  # noqa: BLE001 -- the mark expires on its own
        logger.warning("%s: the sync mark of user %s could not be dropped", SYNC_FAILED, user_pk)


def sync_if_stale(user: Any) -> bool:
    """:func:`sync_user` unless the user's last successful sync is younger than ``TENANT_SYNC_S``.
    Returns whether it ran and succeeded."""
    if not configured() or not getattr(user, "is_authenticated", False):
        return False
    try:
        if caches[conf.get("BINDING_CACHE")].get(_fresh_key(user.pk)):
            return False
    except Exception:  # noqa: BLE001 -- the cache is down: ask the resolver (correct, only slower)
        pass
    return sync_user(user)


class TenantSyncMiddleware:
    """Syncs a signed-in user's memberships at a request when stale (:func:`sync_if_stale`).
    Goes after ``AuthenticationMiddleware``; does nothing when no resolver is configured."""

    sync_capable = True
    async_capable = True

    def __init__(self, get_response: Callable) -> None:
        self.get_response = get_response
        self._is_async = iscoroutinefunction(get_response)
        if self._is_async:
            markcoroutinefunction(self)

    def __call__(self, request: Any) -> Any:
        if self._is_async:
            return self._acall(request)
        user = getattr(request, "user", None)
        if user is not None and configured():
            sync_if_stale(user)
        return self.get_response(request)

    async def _acall(self, request: Any) -> Any:
        auser = getattr(request, "auser", None)
        if auser is not None and configured():
            user = await auser()
            if user.is_authenticated:
                await sync_to_async(sync_if_stale)(user)
        return await self.get_response(request)


def _signed_in(sender: Any, request: Any, user: Any, **kwargs: Any) -> None:
    sync_user(user)


def connect_signals() -> None:
    """Sync at every sign-in (called from ``MrtrwebConfig.ready``)."""
    user_logged_in.connect(_signed_in, dispatch_uid="mrtrweb.tenancy.sync.signed-in")
