"""Tenancy: who belongs to which tenant, and who may act on what.

* :mod:`.access` -- the one access check on an operation or a server (active user, member of the
  tenant, server enabled and the tenant's or the user's own personal one), and what happens when
  access ends.
* :mod:`.sync` -- tenants and memberships that follow the embedding portal's organisations
  (``MRTRWEB["TENANT_RESOLVER"]``, :class:`TenantSyncMiddleware`).

The documented names (``mrtrweb.tenancy.TenantGrant``, ``TenantSyncMiddleware``, ``sync_user``,
``forget``...) are re-exported here, lazily (importing this package loads no model).

May import: :mod:`mrtrweb.models`, :mod:`mrtrweb.conf`; nothing above them.
"""

from __future__ import annotations

import importlib
from typing import Any

#: re-exported from :mod:`.sync` (the documented ``mrtrweb.tenancy.<name>`` paths)
__all__ = [
    "TenantGrant",
    "TenantSyncMiddleware",
    "ResolverError",
    "sync_user",
    "sync_if_stale",
    "forget",
    "grants_of",
    "configured",
    "load",
]


def __getattr__(name: str) -> Any:
    if name in __all__:
        return getattr(importlib.import_module(".sync", __name__), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
