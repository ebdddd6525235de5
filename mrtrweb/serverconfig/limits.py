"""How many servers a tenant and a person may have (issue 29, item 7).

* ``MRTRWEB["MAX_TENANT_SERVERS"]``: the tenant's own servers (``owner`` empty) a tenant admin may
  add from the product's pages;
* ``MRTRWEB["MAX_PERSONAL_SERVERS"]``: one person's personal servers in one tenant.

:func:`check_room` is called inside the transaction that adds the server, after locking the
tenant's row (:func:`lock_tenant`), so two adds at once cannot both take the last place. The
superuser's Django admin is not bounded.
"""

from __future__ import annotations

from typing import Any

from django.utils.translation import gettext_lazy as _

from .. import conf
from ..models import McpServer, Tenant


class LimitReached(Exception):
    """One more server is past the bound; ``message`` says which (translatable), ``code`` is
    ``tenant_servers`` or ``personal_servers``."""

    def __init__(self, code: str, message: str) -> None:
        super().__init__(message)
        self.code, self.message = code, message


def lock_tenant(tenant_id: Any) -> Tenant:
    """The tenant's row, locked until the caller's transaction ends (``SELECT ... FOR UPDATE``;
    call inside ``transaction.atomic``)."""
    return Tenant.objects.select_for_update().get(pk=tenant_id)


def check_room(tenant_id: Any, owner_id: Any = None) -> None:
    """Whether one more server fits: the tenant's (``owner_id`` None) or ``owner_id``'s own.

    Raises:
        LimitReached: the bound is reached (the message names it).
    """
    if owner_id is None:
        bound = int(conf.get("MAX_TENANT_SERVERS"))
        if McpServer.objects.filter(tenant_id=tenant_id, owner__isnull=True).count() >= bound:
            raise LimitReached("tenant_servers", str(_(
                "This tenant has %(max)s servers, the most this deployment allows; remove one before adding "
                "another.") % {"max": bound}))
        return
    bound = int(conf.get("MAX_PERSONAL_SERVERS"))
    if McpServer.objects.filter(tenant_id=tenant_id, owner_id=owner_id).count() >= bound:
        raise LimitReached("personal_servers", str(_(
            "You have %(max)s servers of your own here, the most this deployment allows; remove one before "
            "adding another.") % {"max": bound}))
