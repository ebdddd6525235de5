"""The web edge's read of an operation (:func:`mrtrweb.tenancy.reads.operation_row`, SQL built once)
gives what ``Operation.objects.select_related("server", "tenant").get(...)`` gives: the same
values (JSON, times, UUIDs converted alike), the server and tenant loaded without another query,
and nothing for another user's operation, a value that is no UUID, or no user at all."""

from __future__ import annotations

import uuid

import pytest
from django.contrib.auth import get_user_model
from django.db import connection
from django.test.utils import CaptureQueriesContext
from django.utils import timezone

from mrtrweb.models import McpServer, Operation, Tenant
from mrtrweb.tenancy.reads import ANY_USER, operation_row

pytestmark = [pytest.mark.django_db]


@pytest.fixture
def op():
    User = get_user_model()
    tenant = Tenant.objects.create(slug="t-reads", name="T reads")
    owner = User.objects.create(username="reads-owner")
    server = McpServer.objects.create(tenant=tenant, name="S <b>reads</b>", url="https://mcp.example/mcp")
    return Operation.objects.create(
        tenant=tenant, user=owner, server=server, method="tools/call", name="deploy",
        params={"name": "deploy", "arguments": {"env": "staging", "n": [1, 2]}}, status="awaiting_input",
        request_id="r1", latest_request_id="r1", rounds=1, round_expires_at=timezone.now(),
        result={"content": [{"type": "text", "text": "ok"}]}, server_log=[["info", "x", "y"]],
        initiator_detail={"tool": "t"})


def _values(instance):
    return {f.attname: getattr(instance, f.attname) for f in type(instance)._meta.concrete_fields}


def test_the_row_is_the_orms_with_server_and_tenant_loaded(op):
    expected = Operation.objects.select_related("server", "tenant").get(pk=op.pk, user_id=op.user_id)
    for user_id in (op.user_id, str(op.user_id), ANY_USER):
        got = operation_row(str(op.pk), user_id)
        assert _values(got) == _values(expected)
        assert got._state.adding is False and got._state.db == expected._state.db
        with CaptureQueriesContext(connection) as queries:
            assert _values(got.server) == _values(expected.server)
            assert _values(got.tenant) == _values(expected.tenant)
        assert len(queries) == 0  # cached as select_related caches them


def test_nothing_for_another_user_a_bad_id_or_no_user(op):
    other = get_user_model().objects.create(username="reads-other")
    assert operation_row(op.pk, other.pk) is None
    assert operation_row(op.pk, None) is None  # nobody's (the ORM's filter on NULL matches nothing)
    assert operation_row(uuid.uuid4(), op.user_id) is None
    for bad in ("not-a-uuid", "", None, 12.5, "1; DROP TABLE x"):
        assert operation_row(bad, op.user_id) is None
        assert operation_row(bad, ANY_USER) is None
    assert operation_row(op.pk, "not-a-number") is None


def test_per_user_sql_gives_the_orms_rows_and_is_compiled_once(op):
    from mrtrweb.consent import pending
    from mrtrweb.models import Membership
    from mrtrweb.tenancy.reads import PerUser

    Membership.objects.create(tenant=op.tenant, user=op.user, role=Membership.Role.ADMIN)
    Operation.objects.filter(pk=op.pk).update(round_expires_at=None)
    for query, build in ((pending._NAV, pending._nav), (pending._WAITING, pending._waiting)):
        fresh = PerUser(build, query.model)
        assert fresh.rows(op.user_id) == list(build(op.user_id)) != []
        assert fresh._compile(connection.alias) is not None  # the SQL is kept
        assert fresh.rows(op.user_id + 1000) == list(build(op.user_id + 1000)) == []
        assert fresh.rows(None) == list(build(None)) == []
    assert pending.nav_summary(op.user_id) == {"count": 1, "admin_tenants": [("t-reads", "T reads")]}
    assert pending.waiting_rounds(op.user_id)[0] == 1


def test_a_query_with_a_value_taken_in_python_keeps_the_orms_path(op):
    import itertools

    from mrtrweb.tenancy.reads import PerUser

    ticks = itertools.count()  # stands for a time taken in Python: a new value at every build

    def build(user_id):
        return Operation.objects.filter(user_id=user_id, rounds__gte=-next(ticks)).values("id")

    query = PerUser(build, Operation)
    assert query.rows(op.user_id) == [{"id": op.pk}]
    assert query._compile(connection.alias) is None  # not frozen: every call builds the query


def test_the_row_and_its_access_in_one_statement_agree_with_denial(op):
    """:func:`access.operation_and_access` (issue 30: every push and every operation page read the row and
    its owner's access) gives :func:`operation_row` and :func:`access.denial`'s cause in every
    state -- one statement on PostgreSQL (the check joined to the row), the two elsewhere."""
    from mrtrweb.models import Membership
    from mrtrweb.tenancy import access
    from mrtrweb.tenancy.access import operation_and_access

    User = get_user_model()
    owner = User.objects.get(pk=op.user_id)
    other = User.objects.create(username="reads-other-2")
    Membership.objects.create(tenant=op.tenant, user=owner, role="member")
    one = 1 if connection.vendor == "postgresql" else 2

    def both(op_id, user_id, *, statements: int | None = None):
        with CaptureQueriesContext(connection) as ctx:
            got, cause = operation_and_access(op_id, user_id)
        row = operation_row(op_id, user_id)
        assert (got is None) == (row is None)
        if row is None:
            assert cause == ""
            return None
        assert _values(got) == _values(row) and _values(got.server) == _values(row.server)
        assert _values(got.tenant) == _values(row.tenant)
        assert cause == access.denial(row.user_id, row.tenant_id, row.server_id)
        if statements is not None:
            assert len(ctx.captured_queries) == statements, [q["sql"][:90] for q in ctx.captured_queries]
        return cause

    assert both(op.pk, op.user_id, statements=one) == ""
    assert both(str(op.pk), str(op.user_id)) == ""
    assert both(op.pk, other.pk) is None  # another person's: nothing
    for bad in ("not-a-uuid", uuid.uuid4(), None):
        assert both(bad, op.user_id) is None
    assert both(op.pk, None) is None
    McpServer.objects.filter(pk=op.server_id).update(enabled=False)
    assert both(op.pk, op.user_id) == access.SERVER_DISABLED
    McpServer.objects.filter(pk=op.server_id).update(enabled=True, owner=other)  # another person's server
    assert both(op.pk, op.user_id) == access.SERVER_REMOVED
    McpServer.objects.filter(pk=op.server_id).update(owner=owner)  # her own personal server
    assert both(op.pk, op.user_id, statements=one) == ""
    Membership.objects.filter(user=owner)._raw_delete("default")
    assert both(op.pk, op.user_id) == access.MEMBERSHIP_REMOVED
    Membership.objects.create(tenant=op.tenant, user=owner, role="member")
    User.objects.filter(pk=owner.pk).update(is_active=False)
    assert both(op.pk, op.user_id) == access.USER_INACTIVE


def test_a_server_page_reads_the_server_and_its_access_in_one_statement(op):
    """:func:`access.server_for` (every server page: the tool, prompt and resource pages, their
    POSTs) lets through exactly the servers the ORM's filter and :func:`access.denial` let through
    -- one statement on PostgreSQL, one thread hop everywhere -- and nothing else."""
    from mrtrweb.models import Membership
    from mrtrweb.tenancy import access

    User = get_user_model()
    owner = User.objects.get(pk=op.user_id)
    other = User.objects.create(username="reads-other-3")
    Membership.objects.create(tenant=op.tenant, user=owner, role="member")
    elsewhere = McpServer.objects.create(tenant=Tenant.objects.create(slug="t-else", name="Else"), name="E",
                                         url="https://else.example/mcp")
    one = 1 if connection.vendor == "postgresql" else 2

    def orm(user_id, server_id):  # what server_for let through before (the ORM's filter, then the check)
        try:
            server = McpServer.objects.select_related("tenant").filter(access.mine(user_id)).get(
                pk=server_id, enabled=True, tenant__memberships__user_id=user_id)
        except (McpServer.DoesNotExist, ValueError, TypeError, OverflowError):
            return None
        return None if access.denial(user_id, server.tenant_id, server.pk) else server

    def check(user, server_id, *, statements=None):
        with CaptureQueriesContext(connection) as ctx:
            got = access.server_for_sync(user.pk, server_id)  # (server_for: this in one thread hop, or 404)
        expected = orm(user.pk, server_id)
        assert (got is None) == (expected is None), (server_id, got, expected)
        if got is not None:
            assert _values(got) == _values(expected) and _values(got.tenant) == _values(expected.tenant)
            if statements is not None:
                assert len(ctx.captured_queries) == statements, [q["sql"][:90] for q in ctx.captured_queries]
        return got

    server = McpServer.objects.get(pk=op.server_id)
    assert check(owner, server.pk, statements=one) is not None
    assert check(owner, str(server.pk)) is not None
    assert check(other, server.pk) is None  # not a member
    for bad in (elsewhere.pk, 10**9, "x", None, 2**70):
        assert check(owner, bad) is None
    McpServer.objects.filter(pk=server.pk).update(enabled=False)
    assert check(owner, server.pk) is None
    McpServer.objects.filter(pk=server.pk).update(enabled=True, owner=other)  # another person's personal server
    Membership.objects.create(tenant=op.tenant, user=other, role="member")
    assert check(owner, server.pk) is None and check(other, server.pk) is not None
    McpServer.objects.filter(pk=server.pk).update(owner=None)
    User.objects.filter(pk=owner.pk).update(is_active=False)
    assert check(User.objects.get(pk=owner.pk), server.pk) is None
