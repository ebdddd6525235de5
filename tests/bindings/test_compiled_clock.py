"""The database clock's SQL (``Now()``, :func:`mrtrweb.bindings.statements.lifetime`) is compiled
by the ORM once per database and lifetime, not on every statement of a round (issue 30)."""

from __future__ import annotations

import pytest
from django.db import connection
from django.db.models.functions import Now
from django.db.models.sql.query import Query

from mrtrweb.bindings import statements
from mrtrweb.models import LiveBinding


@pytest.mark.django_db
def test_the_clock_is_compiled_once_per_database_and_lifetime(monkeypatch):
    statements._COMPILED.clear()
    first_now = statements._sql(LiveBinding, connection, Now())
    first_life = statements._sql(LiveBinding, connection, statements.lifetime(600))
    other_life = statements._sql(LiveBinding, connection, statements.lifetime(30))
    compiled = []
    original = Query.get_compiler
    monkeypatch.setattr(Query, "get_compiler", lambda self, *a, **k: compiled.append(1) or original(self, *a, **k))
    for _ in range(5):
        assert statements._sql(LiveBinding, connection, Now()) == first_now
        assert statements._sql(LiveBinding, connection, statements.lifetime(600)) == first_life
        assert statements._sql(LiveBinding, connection, statements.lifetime(30)) == other_life
    assert compiled == []
    assert first_life != other_life  # each lifetime its own parameters
    # a lifetime below one second is one second, as before
    assert statements._sql(LiveBinding, connection, statements.lifetime(0.1)) == \
        statements._sql(LiveBinding, connection, statements.lifetime(1))


@pytest.mark.django_db
def test_a_returned_parameter_list_is_the_callers_own():
    statements._COMPILED.clear()
    sql, params = statements._sql(LiveBinding, connection, statements.lifetime(600))
    params.append("spoilt")
    assert statements._sql(LiveBinding, connection, statements.lifetime(600))[1] == params[:-1]
