"""A real fault of the database binding store while the rest of the database answers.

With ``BINDING_STORE = "database"`` the binding store is the project's database: when all of it
is down, every request fails first on the session (tests/runtime/test_topology.py's PostgreSQL outage:
503 "database is unreachable ... Nothing was sent"). What remains is a failure at the moment of
the store's own statement -- a connection dropped or a statement refused between the request's
other queries and the gate's. :func:`binding_tables_away` produces it for real, on SQLite and
PostgreSQL alike: it renames the store's tables, so each of the store's statements fails in the
database (``no such table`` / ``relation does not exist``), and renames them back.
"""

from __future__ import annotations

import contextlib

from asgiref.sync import sync_to_async
from django.db import connection

#: the database binding store's tables and the legacy hand-over's
TABLES = ("mrtrweb_livebinding", "mrtrweb_bindingindexentry", "mrtrweb_bindingclaim", "mrtrweb_legacyanswer")


def _rename(suffix_from: str, suffix_to: str) -> None:
    q = connection.ops.quote_name
    with connection.cursor() as cursor:
        for table in TABLES:
            cursor.execute(f"ALTER TABLE {q(table + suffix_from)} RENAME TO {q(table + suffix_to)}")


def take_away() -> None:
    """Rename the tables away (sync)."""
    _rename("", "_away")


def bring_back() -> None:
    """Rename them back (sync)."""
    _rename("_away", "")


@contextlib.asynccontextmanager
async def binding_tables_away():
    """While inside: every statement of the database binding store fails (async tests)."""
    await sync_to_async(take_away)()
    try:
        yield
    finally:
        await sync_to_async(bring_back)()
