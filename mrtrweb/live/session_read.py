"""A socket's session and its user read in one statement (issue 30): what every push re-validates
(:func:`mrtrweb.live.sessions.session_denial`) without compiling two ORM queries per push.

``SessionStore(key).load()`` of ``django.contrib.sessions.backends.db`` and
``ModelBackend.get_user(user_id)`` are each one ORM query, built and compiled again at every push
(about 1.5 ms of a worker's CPU a push together; three pushes a round). :func:`read` gives what
those two calls give -- the session's data as the store decodes it (``{}`` when there is no such
unexpired session), and the user instance, or None where ``get_user`` says None -- from one
statement whose SQL is built once per database, with the same columns, converters and model
instances (:func:`mrtrweb.tenancy.reads.instance_from`). It serves only where that is exactly what
the two calls do:

* ``SESSION_ENGINE`` is ``django.contrib.sessions.backends.db`` (its model Django's ``Session``);
* the user model's default manager is a plain one (no ``get_queryset`` of its own, Django's
  ``QuerySet``), its fields all in its own table and read as stored (:func:`_plain_user_model`),
  the session and the user read from one database;
* the backend the session names is ``ModelBackend`` or a subclass keeping its ``get_user``
  (``user_can_authenticate`` is asked of the backend itself, as ``get_user`` does).

Anything else (a cache or signed-cookie session, a portal's own backend or manager, routers that
put them apart): :func:`read` returns None and the caller takes Django's own calls, as before.

May import: django, :mod:`mrtrweb.prepared`, :mod:`mrtrweb.tenancy.reads`.
"""

from __future__ import annotations

from importlib import import_module
from typing import Any

from django.conf import settings

from .. import prepared

__all__ = ["DB_ENGINE", "SessionRead", "read"]

#: the session engine this path reads for
DB_ENGINE = "django.contrib.sessions.backends.db"

_SQL: dict[str, Any] = {}


class SessionRead:
    """What one statement read: ``data`` (the decoded session; ``{}``: no unexpired session of that
    key), ``user`` (the user row as an instance, None: no such user) -- not yet judged by a backend."""

    __slots__ = ("data", "user")

    def __init__(self, data: dict[str, Any], user: Any) -> None:
        self.data, self.user = data, user


def _plain_user_model(model: Any) -> bool:
    """Whether one ``SELECT`` of the model's own table gives what its default manager's ``get``
    gives: a plain manager (no ``get_queryset`` of its own, Django's ``QuerySet``), every concrete
    field in that one table (not a child of another concrete model: its parent's fields live in
    the parent's table) and read as stored (no field with a ``select_format`` of its own, as a
    geometry's)."""
    from django.db.models import Field, Manager, QuerySet

    manager, meta = model._default_manager, model._meta
    return (type(manager).get_queryset is Manager.get_queryset and manager._queryset_class is QuerySet
            and all(f.model._meta.db_table == meta.db_table and type(f).select_format is Field.select_format
                    for f in meta.concrete_fields))


def _built(alias: str, conn: Any, session_model: Any, user_model: Any) -> Any:
    if alias not in _SQL:
        from ..tenancy.reads import field_converters

        qn = conn.ops.quote_name
        smeta, umeta = session_model._meta, user_model._meta
        fields = field_converters(user_model, conn)
        sql = (f"SELECT s.{qn(smeta.get_field('session_data').column)}, "
               + ", ".join(f"u.{qn(f.column)}" for f, _, _ in fields)
               + f" FROM {qn(smeta.db_table)} s LEFT JOIN {qn(umeta.db_table)} u ON u.{qn(umeta.pk.column)} = %s"
               f" WHERE s.{qn(smeta.pk.column)} = %s AND s.{qn(smeta.get_field('expire_date').column)} > %s")
        _SQL[alias] = (sql, fields)
    return _SQL[alias]


def read(session_key: str, user_id: Any) -> SessionRead | None:
    """The session ``session_key`` and user ``user_id`` in one statement, or None when this path
    does not serve (see the module doc: the caller reads them as Django does). Sync.

    Raises:
        django.db.DatabaseError: the database failed (as the store's own read would)."""
    if settings.SESSION_ENGINE != DB_ENGINE:
        return None
    from django.contrib.auth import get_user_model
    from django.db import connections, router
    from django.utils import timezone

    store = import_module(DB_ENGINE).SessionStore(session_key)
    session_model = store.model
    user_model = get_user_model()
    from django.contrib.sessions.models import Session

    if session_model is not Session or not _plain_user_model(user_model):
        return None
    alias = router.db_for_read(session_model)
    if router.db_for_read(user_model) != alias:
        return None
    if store.session_key is None:  # a key the store refuses (too short): no session, as load() finds
        return SessionRead({}, None)
    conn = connections[alias]
    user_pk = user_model._meta.pk
    try:
        uid = user_pk.get_db_prep_value(user_pk.to_python(user_id), conn)
    except Exception:  # noqa: BLE001 -- an id the model cannot take: Django's own calls judge it
        return None
    expire = session_model._meta.get_field("expire_date").get_db_prep_value(timezone.now(), conn)
    sql, fields = _built(alias, conn, session_model, user_model)
    with prepared.cursor(conn) as cur:
        cur.execute(sql, [uid, store.session_key, expire])
        found = cur.fetchone()
    if found is None:
        return SessionRead({}, None)
    from ..tenancy.reads import instance_from

    data = store.decode(found[0])
    user = None if found[1 + _pk_index(fields)] is None else instance_from(user_model, alias, conn, fields,
                                                                            found[1:])
    return SessionRead(data, user)


def _pk_index(fields: list) -> int:
    for i, (field, _, _) in enumerate(fields):
        if field.primary_key:
            return i
    raise LookupError("the user model has no primary key column")  # pragma: no cover


def model_backend_user(backend: Any, user: Any) -> tuple[bool, Any]:
    """``(True, what backend.get_user(...) gives for the user row read)`` when ``backend``'s
    ``get_user`` is ``ModelBackend``'s; ``(False, None)`` when it is not (the caller asks it)."""
    from django.contrib.auth.backends import ModelBackend

    if not isinstance(backend, ModelBackend) or type(backend).get_user is not ModelBackend.get_user:
        return False, None
    if user is None:
        return True, None
    return True, (user if backend.user_can_authenticate(user) else None)
