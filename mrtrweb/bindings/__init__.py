"""Binding stores of the Django app (:class:`mrtrweb.gate.BindingStore` implementations).

``MRTRWEB["BINDING_STORE"]`` picks one (:func:`configured_store`):

* ``"database"`` (default) -- :class:`~mrtrweb.bindings.database.DatabaseBindingStore`: records,
  index and claims in the project's database (PostgreSQL in production). A live round survives a
  restart of Redis (with or without persistence), of every worker, or both; single use holds
  across workers through unique constraints. Records are sealed per tenant (Fernet under
  ``SECRET_KEYS``, re-sealed by ``mrtr_rotate_secrets``).
* ``"cache"`` -- :class:`~mrtrweb.bindings.cache.DjangoCacheBindingStore`: records signed per
  tenant in ``MRTRWEB["BINDING_CACHE"]`` (Redis ``SET NX`` claims; a round's claim and its
  record's writes go as one Lua script, so a failure between them strands nothing). Faster, but a
  cache restart without persistence loses every live round (system check ``mrtrweb.W017``).

:mod:`.statements` holds the database store's SQL, each statement built once per database.
"""

from __future__ import annotations

from .. import conf
from .cache import DjangoCacheBindingStore

__all__ = ["DjangoCacheBindingStore", "DatabaseBindingStore", "configured_store"]


def __getattr__(name: str):
    if name == "DatabaseBindingStore":  # imports models: only once Django is set up
        from .database import DatabaseBindingStore

        return DatabaseBindingStore
    raise AttributeError(name)


def configured_store():
    """A new store of the kind ``MRTRWEB["BINDING_STORE"]`` names.

    Raises:
        ImproperlyConfigured: an unknown ``BINDING_STORE``.
    """
    if conf.get("BINDING_STORE") == "cache":
        return DjangoCacheBindingStore()
    from .database import DatabaseBindingStore

    return DatabaseBindingStore()
