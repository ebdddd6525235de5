"""The consent history (in-process, against the real demo MCP server): a person's own rounds, a
tenant admin's filtered and exported view of the tenant's events, an operation's timeline; who may
see what (everyone else gets 404); bad filters give form errors, never a 500; exports hold audit
fields only (no answer value, no ``requestState``)."""

from __future__ import annotations

import csv
import datetime as dt
import io
import json
import re
import types

import pytest
from asgiref.sync import sync_to_async
from django.test import AsyncClient
from django.utils import timezone

from mrtrweb.audit import events as audit
from mrtrweb import operations
from mrtrweb.audit.history import EXPORT_FIELDS, PER_PAGE
from mrtrweb.models import AuditEvent, Operation
from tests.answering import post_answer

pytestmark = [pytest.mark.django_db(transaction=True)]

DEPLOY_OK = {
    "in-confirm_deploy-confirm": "on",
    "in-confirm_deploy-ticket": "CHG-1042",
    "in-confirm_deploy-email": "ops@example.test",
    "in-confirm_deploy-window": "3",
    "in-confirm_deploy-region": "us-east-1",
    "in-confirm_deploy-notify": ["email", "slack"],
}
#: values typed into answers: never in a page or an export
ANSWER_VALUES = ("CHG-1042", "CHG-2077", "CHG-3000", "ops@example.test", "us-east-1")

OLD_DAYS = 3  # the backdated event (a foreign answer attempt) is this many days old


async def _client(user) -> AsyncClient:
    client = AsyncClient()
    await client.aforce_login(user)
    return client


async def _start(client: AsyncClient, server, tool: str, args: dict[str, str]) -> Operation:
    resp = await client.post(f"/mcp/servers/{server.pk}/tools/{tool}/", {f"arg-{k}": v for k, v in args.items()})
    assert resp.status_code == 302, resp.content.decode()[:2000]
    op_id = resp["Location"].rstrip("/").split("/")[-1]
    await operations.wait_idle()
    return await Operation.objects.select_related("server").aget(pk=op_id)


async def _answer(client: AsyncClient, op: Operation, action: str, fields: dict[str, object] | None = None) -> None:
    await client.get(f"/mcp/operations/{op.id}/")  # the card is looked at, then answered
    data: dict[str, object] = {"action": action, "round": str(op.rounds)}
    data.update(fields or {})
    resp = await post_answer(client, f"/mcp/operations/{op.id}/answer/", data)
    assert resp.status_code == 302, resp.content.decode()[:2000]
    await operations.wait_idle()


async def _status(op: Operation) -> str:
    return (await Operation.objects.aget(pk=op.pk)).status


def _record_backdated(op: Operation, user_id: int, when: dt.datetime) -> AuditEvent:
    """An answer attempt by ``user_id`` on ``op`` (someone else's), recorded as if at ``when``."""
    real = audit.timezone
    audit.timezone = types.SimpleNamespace(now=lambda: when)
    try:
        op = Operation.objects.select_related("server").get(pk=op.pk)
        return audit.record(op, "rejected", code="mrtr_identity_or_argument_mismatch",
                            reason="answer attempt by another user", round_number=op.rounds,
                            request_id=op.latest_request_id, user_id=user_id)
    finally:
        audit.timezone = real


@pytest.fixture
async def world(seeded, settings):
    """Operations through the real flow: alice (acme admin) deploys and accepts, deploys and
    declines, connects an account, runs an endless tool stopped by the round limit; carol (acme
    member) deploys and accepts; bob (globex admin) deploys and accepts, and once tried to answer
    alice's round (recorded three days ago)."""
    settings.MRTRWEB = {"MAX_ROUNDS": 2, "STATE_ONLY_BACKOFF_S": 0.01, "STATE_ONLY_BACKOFF_CAP_S": 0.02}
    operations.reset_gate()
    users, servers = seeded["users"], seeded["servers"]
    alice, carol, bob = [await _client(users[n]) for n in ("alice", "carol", "bob")]
    ops: dict[str, Operation] = {}

    ops["alice_deploy"] = await _start(alice, servers["acme"], "deploy", {"env": "production", "replicas": "3"})
    await _answer(alice, ops["alice_deploy"], "accept", DEPLOY_OK)
    ops["alice_decline"] = await _start(alice, servers["acme"], "deploy", {"env": "staging", "replicas": "1"})
    await _answer(alice, ops["alice_decline"], "decline")
    ops["alice_connect"] = await _start(alice, servers["acme"], "connect_account", {"provider": "github"})
    await _answer(alice, ops["alice_connect"], "accept")
    ops["alice_endless"] = await _start(alice, servers["acme"], "endless", {})
    ops["carol_deploy"] = await _start(carol, servers["acme"], "deploy", {"env": "staging", "replicas": "2"})
    await _answer(carol, ops["carol_deploy"], "accept", dict(DEPLOY_OK, **{"in-confirm_deploy-ticket": "CHG-2077"}))
    ops["bob_deploy"] = await _start(bob, servers["globex"], "deploy", {"env": "staging", "replicas": "1"})
    await _answer(bob, ops["bob_deploy"], "accept", dict(DEPLOY_OK, **{"in-confirm_deploy-ticket": "CHG-3000"}))

    for key in ("alice_deploy", "alice_decline", "alice_connect", "carol_deploy", "bob_deploy"):
        assert await _status(ops[key]) == Operation.Status.COMPLETED, key
    assert await _status(ops["alice_endless"]) == Operation.Status.FAILED

    old = timezone.now() - dt.timedelta(days=OLD_DAYS)
    foreign = await sync_to_async(_record_backdated)(ops["alice_deploy"], users["bob"].pk, old)
    return {"users": users, "servers": servers, "ops": ops, "foreign": foreign, "old": old,
            "clients": {"alice": alice, "carol": carol, "bob": bob}}


def _op_ids(html: str) -> set[str]:
    return set(re.findall(r'data-operation="([0-9a-f-]{36})"', html))


def _timeline_links(html: str) -> set[str]:
    return set(re.findall(r'/mcp/history/operations/([0-9a-f-]{36})/', html))


def _sequences(html: str) -> list[int]:
    return [int(s) for s in re.findall(r'data-sequence="(\d+)"', html)]


async def _events(tenant_slug: str, **filters) -> list[AuditEvent]:
    return [e async for e in AuditEvent.objects.filter(tenant__slug=tenant_slug, **filters).order_by("-sequence")]


async def _get(client: AsyncClient, url: str, params: dict[str, str] | None = None):
    return await client.get(url, params or {})


async def _body(resp) -> str:
    if resp.streaming:
        return b"".join([chunk async for chunk in resp.streaming_content]).decode()
    return resp.content.decode()


# ------------------------------------------------------------------------------------------------
# A person's own rounds
# ------------------------------------------------------------------------------------------------


async def test_own_history_shows_only_own_operations(world):
    ops, clients = world["ops"], world["clients"]
    own = {"alice": {"alice_deploy", "alice_decline", "alice_connect", "alice_endless"},
           "carol": {"carol_deploy"}, "bob": {"bob_deploy"}}
    for name, keys in own.items():
        resp = await _get(clients[name], "/mcp/history/")
        assert resp.status_code == 200
        html = resp.content.decode()
        mine = {str(ops[k].id) for k in keys}
        others = {str(o.id) for k, o in ops.items() if k not in keys}
        assert mine <= _op_ids(html), name
        assert mine == _timeline_links(html), name  # each own operation links to its timeline
        if name != "bob":
            assert not (others & _op_ids(html)), name
        for value in ANSWER_VALUES:
            assert value not in html
        assert "requestState" not in html

    # newest first
    html = (await _get(clients["alice"], "/mcp/history/")).content.decode()
    order = [i for i in re.findall(r'data-operation="([0-9a-f-]{36})"', html)]
    assert order == [str(ops[k].id) for k in ("alice_endless", "alice_connect", "alice_decline", "alice_deploy")]
    # the declined round shows its action (keys and actions only); the endless one its code
    assert "decline" in html and "mrtr_round_limit_exceeded" in html
    # alice administers acme: her history links to the tenant history
    assert 'href="/mcp/tenants/acme/history/"' in html
    assert "/mcp/tenants/" not in (await _get(clients["carol"], "/mcp/history/")).content.decode()


async def test_own_history_hides_what_someone_elses_operation_is(world):
    """bob's own (rejected) answer attempt on alice's operation is his event: listed, but not what
    alice's operation is, and no way to her timeline."""
    ops, bob = world["ops"], world["clients"]["bob"]
    html = (await _get(bob, "/mcp/history/")).content.decode()
    alice_op = str(ops["alice_deploy"].id)
    assert alice_op in _op_ids(html)
    assert alice_op not in _timeline_links(html)
    assert "someone else's operation" in html
    section = html.split(f'data-operation="{alice_op}"', 1)[1].split("</section>", 1)[0]
    assert "mrtr_identity_or_argument_mismatch" in section
    assert "deploy" not in section and "Acme" not in section and "://" not in section
    assert "Acme Corp" not in html
    assert _sequences(section) == []  # nor its place in acme's chain (its progress and acme's volume)
    # and she does not see bob's attempt as hers (only her own digest's events)
    html = (await _get(world["clients"]["alice"], "/mcp/history/")).content.decode()
    own = html.split(f'data-operation="{alice_op}"', 1)[1].split("</section>", 1)[0]
    assert "mrtr_identity_or_argument_mismatch" not in own


# ------------------------------------------------------------------------------------------------
# Who may see what
# ------------------------------------------------------------------------------------------------


async def test_access_is_scoped_to_owner_and_tenant_admins(world):
    ops, clients = world["ops"], world["clients"]
    alice, carol, bob = clients["alice"], clients["carol"], clients["bob"]

    assert (await _get(alice, "/mcp/tenants/acme/history/")).status_code == 200
    assert (await _get(bob, "/mcp/tenants/globex/history/")).status_code == 200
    for client, slug in ((carol, "acme"), (bob, "acme"), (alice, "globex"), (carol, "globex"), (alice, "nope")):
        for params in ({}, {"format": "csv"}, {"format": "json"}, {"outcome": "completed"}):
            resp = await _get(client, f"/mcp/tenants/{slug}/history/", params)
            assert resp.status_code == 404, (slug, params)

    def timeline(key: str) -> str:
        return f"/mcp/history/operations/{ops[key].id}/"

    # owners see their own; alice (acme admin) sees carol's; carol (member) not alice's
    for client, key in ((alice, "alice_deploy"), (carol, "carol_deploy"), (bob, "bob_deploy"),
                        (alice, "carol_deploy")):
        assert (await _get(client, timeline(key))).status_code == 200, key
    for client, key in ((bob, "alice_deploy"), (bob, "carol_deploy"), (carol, "alice_deploy"),
                        (alice, "bob_deploy"), (carol, "bob_deploy")):
        assert (await _get(client, timeline(key))).status_code == 404, key
    assert (await _get(alice, "/mcp/history/operations/00000000-0000-4000-8000-000000000000/")).status_code == 404

    anon = AsyncClient()
    for url in ("/mcp/history/", "/mcp/tenants/acme/history/", timeline("alice_deploy")):
        resp = await anon.get(url)
        assert resp.status_code == 302 and "/accounts/login/" in resp["Location"]
    # read-only
    assert (await alice.post("/mcp/tenants/acme/history/", {})).status_code == 405


async def test_admin_history_never_mixes_tenants(world):
    ops, clients = world["ops"], world["clients"]
    html = (await _get(clients["alice"], "/mcp/tenants/acme/history/")).content.decode()
    acme = await _events("acme")
    assert _sequences(html) == [e.sequence for e in acme][:50]
    assert str(ops["bob_deploy"].id) not in html
    html = (await _get(clients["bob"], "/mcp/tenants/globex/history/")).content.decode()
    globex = await _events("globex")
    assert _sequences(html) == [e.sequence for e in globex]
    for key in ("alice_deploy", "carol_deploy"):
        assert str(ops[key].id) not in html
    # a server of another tenant is not a valid choice
    resp = await _get(clients["alice"], "/mcp/tenants/acme/history/", {"server": str(world["servers"]["globex"].pk)})
    assert resp.status_code == 200 and "Select a valid choice" in resp.content.decode()
    assert _sequences(resp.content.decode()) == []


# ------------------------------------------------------------------------------------------------
# The admin's filters
# ------------------------------------------------------------------------------------------------


async def test_admin_filters(world):
    ops, users, alice = world["ops"], world["users"], world["clients"]["alice"]
    url = "/mcp/tenants/acme/history/"

    async def seqs(**params) -> list[int]:
        resp = await _get(alice, url, params)
        assert resp.status_code == 200
        html = resp.content.decode()
        assert 'class="field-error"' not in html, html
        return _sequences(html)

    everything = await _events("acme")
    assert await seqs() == [e.sequence for e in everything]
    assert 0 < len(everything) <= PER_PAGE

    digest = {n: audit.keyed_digest(f"user:{users[n].pk}") for n in ("alice", "carol", "bob")}
    carols = [e.sequence for e in everything if e.user_digest == digest["carol"]]
    assert carols and await seqs(user="carol") == carols
    assert {e.operation_id for e in everything if e.sequence in carols} == {ops["carol_deploy"].id}
    alices = [e.sequence for e in everything if e.user_digest == digest["alice"]]
    assert await seqs(user="alice") == alices and set(alices).isdisjoint(carols)

    server = world["servers"]["acme"]
    assert await seqs(server=str(server.pk)) == [e.sequence for e in everything]  # one server in acme

    connect = [e.sequence for e in everything if e.name == "connect_account"]
    assert connect and await seqs(tool="connect_account") == connect
    assert await seqs(tool="connect") == []  # exact
    assert await seqs(tool="deploy", user="carol") == carols

    completed = [e.sequence for e in everything if e.event == "completed"]
    assert len(completed) == 4  # alice: deploy, decline, connect; carol: deploy
    assert await seqs(outcome="completed") == completed
    failed = await seqs(outcome="failed")
    assert [e.operation_id for e in everything if e.sequence in failed] == [ops["alice_endless"].id]
    assert await seqs(outcome="completed", user="carol") == [e.sequence for e in everything
                                                           if e.event == "completed" and e.sequence in carols]

    limit = [e.sequence for e in everything if e.code == "mrtr_round_limit_exceeded"]
    assert limit and await seqs(code="mrtr_round_limit_exceeded") == limit
    assert await seqs(code="mrtr_identity_or_argument_mismatch") == [world["foreign"].sequence]
    assert await seqs(code="no_such_code") == []

    def day(e: AuditEvent) -> dt.date:
        return timezone.localtime(e.created_at).date()

    def between(start: dt.date | None, end: dt.date | None) -> list[int]:
        return [e.sequence for e in everything if (start is None or start <= day(e)) and (end is None or day(e) <= end)]

    today = timezone.localdate()
    old_day = day(world["foreign"])
    assert [e.sequence for e in everything if day(e) == old_day] == [world["foreign"].sequence]
    cases = [(today, None), (None, today - dt.timedelta(days=1)), (old_day, old_day),
             (old_day + dt.timedelta(days=1), today - dt.timedelta(days=1)), (old_day, today),
             (today - dt.timedelta(days=1), today)]
    for start, end in cases:
        params = {k: v.isoformat() for k, v in (("from", start), ("to", end)) if v is not None}
        assert await seqs(**params) == between(start, end), params
    assert await seqs(**{"from": old_day.isoformat(), "to": old_day.isoformat()}) == [world["foreign"].sequence]
    assert await seqs(**{"to": (old_day - dt.timedelta(days=1)).isoformat()}) == []

    # the page shows what a timeline link needs and who acted (members by name)
    html = (await _get(alice, url, {"user": "carol", "outcome": "completed"})).content.decode()
    assert f"/mcp/history/operations/{ops['carol_deploy'].id}/" in html
    assert ">carol<" in html
    # and the form keeps the filters
    assert re.search(r'<option value="carol" selected>', html)
    assert re.search(r'<option value="completed" selected>', html)


async def test_pagination(world):
    alice = world["clients"]["alice"]
    acme_op = world["ops"]["alice_deploy"]
    await sync_to_async(_bulk_events)(acme_op, 2 * PER_PAGE)
    everything = [e.sequence for e in await _events("acme")]
    assert len(everything) > 2 * PER_PAGE
    pages = []
    for number in ("1", "2", "3"):
        resp = await _get(alice, "/mcp/tenants/acme/history/", {"page": number})
        assert resp.status_code == 200
        pages.append(_sequences(resp.content.decode()))
    assert [len(p) for p in pages[:2]] == [PER_PAGE, PER_PAGE]
    assert sum(pages, []) == everything
    html = (await _get(alice, "/mcp/tenants/acme/history/", {"page": "2", "outcome": "rejected"})).content.decode()
    # page links keep the filters
    assert 'href="?page=1&amp;outcome=rejected"' in html or 'href="?outcome=rejected&amp;page=1"' in html


async def test_page_size_page_numbers_and_the_count(world):
    alice = world["clients"]["alice"]
    await sync_to_async(_bulk_events)(world["ops"]["alice_deploy"], 2 * PER_PAGE)
    rejected = [e.sequence for e in await _events("acme", event="rejected")]
    total = len(rejected)
    assert total > 4 * 25
    url = "/mcp/tenants/acme/history/"
    html = (await _get(alice, url, {"outcome": "rejected", "per_page": "25", "page": "3"})).content.decode()
    assert _sequences(html) == rejected[50:75]
    assert f"{total} events" in html and f"51–75 of {total}" in html
    assert re.search(r'<option value="25" selected>25</option>', html)  # the form shows the chosen size
    pages = -(-total // 25)
    numbers = re.findall(r'<li><a href="\?([^"]*)"[^>]*>([^<]*)</a></li>', html)
    # the first, two either side of the current one, the last; each link keeps the filters and the size
    assert [label for _, label in numbers] == ["1", "2", f"Page 3 of {pages}", "4", "5"] + (
        [str(pages)] if pages > 5 else [])
    for query, _ in numbers:
        params = dict(p.split("=") for p in query.replace("&amp;", "&").split("&"))
        assert params["outcome"] == "rejected" and params["per_page"] == "25", query
    assert 'aria-current="page"' in html and 'rel="prev"' in html and 'rel="next"' in html
    # the default size is 50, and it is what the form shows; a size not offered is a form error
    html = (await _get(alice, url, {"outcome": "rejected"})).content.decode()
    assert len(_sequences(html)) == PER_PAGE and re.search(r'<option value="50" selected>50</option>', html)
    html = (await _get(alice, url, {"per_page": "100000"})).content.decode()
    assert "Select a valid choice" in html and _sequences(html) == []


async def test_filters_are_kept_per_tenant_until_cleared(world):
    alice = world["clients"]["alice"]
    url = "/mcp/tenants/acme/history/"
    # nothing kept yet: the bare page lists everything
    resp = await alice.get(url)
    assert resp.status_code == 200 and _sequences(resp.content.decode())
    # filters applied through the form (empty fields included) are kept ...
    resp = await alice.get(url, {"user": "carol", "server": "", "tool": "", "outcome": "completed", "code": "",
                                 "from": "", "to": "", "per_page": "25", "page": "2"})
    # (the form's link names only the chosen filters, from their first page)
    assert resp.status_code == 302 and resp["Location"] == f"{url}?user=carol&outcome=completed&per_page=25"
    carols = _sequences((await alice.get(resp["Location"])).content.decode())
    assert carols
    # ... so leaving and coming back to the tenant history restores them (no page, no format kept)
    resp = await alice.get(url)
    assert resp.status_code == 302 and resp["Location"] == f"{url}?user=carol&outcome=completed&per_page=25"
    html = (await alice.get(resp["Location"])).content.decode()
    assert _sequences(html) == carols and re.search(r'<option value="carol" selected>', html)
    # the export and page links of the page keep them too
    assert re.search(r'href="\?user=carol&amp;outcome=completed&amp;per_page=25&amp;format=csv"', html), html
    # a page link or an export does not change what is kept
    await _body(await alice.get(url, {"format": "csv"}))
    assert (await alice.get(url, {"page": "2"})).status_code == 200
    assert (await alice.get(url))["Location"].endswith("?user=carol&outcome=completed&per_page=25")
    # invalid filters are not kept
    assert (await alice.get(url, {"outcome": "exploded"})).status_code == 200
    assert (await alice.get(url))["Location"].endswith("?user=carol&outcome=completed&per_page=25")
    # new filters replace them
    assert (await alice.get(url, {"outcome": "submitted"})).status_code == 200
    assert (await alice.get(url))["Location"].endswith("?outcome=submitted")
    # they are this session's and this tenant's: another session of alice starts clear
    other = await _client(world["users"]["alice"])
    assert (await other.get(url)).status_code == 200
    # "Clear" forgets them and shows everything
    page = (await alice.get(f"{url}?outcome=submitted")).content.decode()
    assert f'href="{url}?clear=1"' in page
    resp = await alice.get(url, {"clear": "1"})
    assert resp.status_code == 302 and resp["Location"] == url
    resp = await alice.get(url)
    assert resp.status_code == 200 and _sequences(resp.content.decode()) == [e.sequence for e in await _events("acme")]
    # submitting the form with every field empty forgets them as well
    assert (await alice.get(url, {"outcome": "completed"})).status_code == 200
    resp = await alice.get(url, {"user": "", "outcome": ""})
    assert resp.status_code == 302 and resp["Location"] == url
    assert (await alice.get(url)).status_code == 200
    # someone who is no admin of the tenant gets 404 before anything is kept or restored
    carol = world["clients"]["carol"]
    assert (await carol.get(url, {"outcome": "completed"})).status_code == 404
    assert (await carol.get(url, {"clear": "1"})).status_code == 404
    assert (await carol.get(url)).status_code == 404


async def test_ids_are_short_and_times_name_their_zone(world):
    alice = world["clients"]["alice"]
    html = (await _get(alice, "/mcp/tenants/acme/history/", {"outcome": "submitted", "user": "carol"})).content.decode()
    event = (await _events("acme", event="submitted", operation_id=world["ops"]["carol_deploy"].id))[0]
    for full in (event.request_id, event.retry_id, event.hash, event.state_digest):
        assert full and f">{full}<" not in html, full  # never a whole id as text ...
        assert f'title="{full}">' in html and f'data-copy="{full}"' in html, full  # ... but on hover and copy
    assert f'<code class="id" title="{event.retry_id}">mrtr-{event.retry_id[5:13]}…</code>' in html
    assert f'<code class="id" title="{event.hash}">{event.hash[:8]}…</code>' in html
    utc = event.created_at.astimezone(dt.timezone.utc)
    stamp = utc.strftime("%Y-%m-%d %H:%M:%S")
    assert (f'<time class="when" datetime="{utc.strftime("%Y-%m-%dT%H:%M:%SZ")}" title="{stamp} UTC" '
            f'data-when="datetime">{stamp} UTC</time>') in html
    # the operation's timeline is one click away from the row's time
    link = f'<a class="timeline-link" href="/mcp/history/operations/{event.operation_id}/">Timeline</a>'
    assert link in html
    # the timeline shows its ids short as well, and the index its start times with the zone
    op = world["ops"]["carol_deploy"]
    timeline = (await _get(alice, f"/mcp/history/operations/{op.id}/")).content.decode()
    assert f">{op.id}<" not in timeline and f'data-copy="{op.id}"' in timeline
    assert f'data-copy="{op.request_id}"' in timeline and f">{op.request_id}<" not in timeline
    index = (await _get(alice, "/mcp/")).content.decode()
    started = (await Operation.objects.aget(pk=world["ops"]["alice_deploy"].pk)).created_at
    assert f'title="{started.astimezone(dt.timezone.utc).strftime("%Y-%m-%d %H:%M:%S")} UTC"' in index
    assert "/static/mrtrweb/times.js" in index


def _bulk_events(op: Operation, n: int) -> None:
    op = Operation.objects.select_related("server").get(pk=op.pk)
    for i in range(n):
        audit.record(op, "rejected", code="inactive_mrtr_round", round_number=i)


# ------------------------------------------------------------------------------------------------
# Bad input
# ------------------------------------------------------------------------------------------------


BAD_FILTERS = [
    ({"user": "mallory"}, "Select a valid choice"),
    ({"user": "bob"}, "Select a valid choice"),  # a user of another tenant
    ({"from": "2026-13-45"}, "Enter a valid date"),
    ({"to": "yesterday"}, "Enter a valid date"),
    ({"from": "2026-02-02", "to": "2026-02-01"}, "The end date is before the start date"),
    ({"server": "999999"}, "Select a valid choice"),
    ({"server": "abc"}, "Select a valid choice"),
    ({"server": "99999999999999999999999999"}, "Select a valid choice"),
    ({"server": "-1"}, "Select a valid choice"),
    ({"outcome": "exploded"}, "Select a valid choice"),
    ({"code": "x" * 65}, "at most 64 characters"),
    ({"tool": "dep\x00loy"}, "Null characters are not allowed"),
]


async def test_bad_filters_are_form_errors(world):
    alice = world["clients"]["alice"]
    for params, error in BAD_FILTERS:
        resp = await _get(alice, "/mcp/tenants/acme/history/", params)
        assert resp.status_code == 200, params
        html = resp.content.decode()
        assert 'class="field-error"' in html and error in html, params
        assert _sequences(html) == [], params  # nothing listed while a filter is wrong
        for fmt in ("csv", "json"):  # an export with a wrong filter exports nothing
            resp = await _get(alice, "/mcp/tenants/acme/history/", dict(params, format=fmt))
            assert resp.status_code == 400 and not resp.streaming, params
            assert "Content-Disposition" not in resp and error in resp.content.decode(), params
    # repeated parameters: the last one counts, like any QueryDict
    resp = await alice.get("/mcp/tenants/acme/history/?outcome=completed&outcome=bogus")
    assert resp.status_code == 200 and "Select a valid choice" in resp.content.decode()


async def test_bad_page_numbers_and_formats(world):
    alice = world["clients"]["alice"]
    for page in ("abc", "0", "-1", "999999", "1e9", "", "99999999999999999999999"):
        for url in ("/mcp/tenants/acme/history/", "/mcp/history/"):
            resp = await _get(alice, url, {"page": page})
            assert resp.status_code == 200, (url, page)
            assert _sequences(resp.content.decode()), (url, page)  # a real page (first or last)
    resp = await _get(alice, "/mcp/tenants/acme/history/", {"format": "xml"})  # not an export: the page
    assert resp.status_code == 200 and resp["Content-Type"].startswith("text/html")


# ------------------------------------------------------------------------------------------------
# Exports
# ------------------------------------------------------------------------------------------------


async def _export(client: AsyncClient, fmt: str, **params):
    resp = await _get(client, "/mcp/tenants/acme/history/", dict(params, format=fmt))
    assert resp.status_code == 200
    disposition = resp["Content-Disposition"]
    assert re.fullmatch(rf'attachment; filename="mrtr-audit-acme-\d{{8}}T\d{{6}}Z\.{fmt}"', disposition), disposition
    assert resp["Cache-Control"] == "no-store"
    return resp, await _body(resp)


def _csv_rows(text: str) -> list[dict[str, str]]:
    reader = csv.reader(io.StringIO(text))
    header = next(reader)
    assert tuple(header) == EXPORT_FIELDS
    return [dict(zip(header, row, strict=True)) for row in reader]


async def test_exports_csv_and_json(world):
    ops, alice = world["ops"], world["clients"]["alice"]
    everything = sorted(await _events("acme"), key=lambda e: e.sequence)  # exports are in chain order

    resp, text = await _export(alice, "csv")
    assert resp["Content-Type"].startswith("text/csv")
    rows = _csv_rows(text)
    assert [int(r["sequence"]) for r in rows] == [e.sequence for e in everything]
    assert [r["hash"] for r in rows] == [e.hash for e in everything]
    assert all(r["tenant_id"] == str(everything[0].tenant_id) for r in rows)
    submitted = [r for r in rows if r["event"] == "submitted" and r["operation_id"] == str(ops["alice_decline"].id)]
    assert len(submitted) == 1 and json.loads(submitted[0]["actions"]) == {"confirm_deploy": "decline"}

    resp, text = await _export(alice, "json")
    assert resp["Content-Type"] == "application/json"
    data = json.loads(text)
    assert isinstance(data, list) and all(set(d) == set(EXPORT_FIELDS) for d in data)
    assert [d["sequence"] for d in data] == [e.sequence for e in everything]
    by_seq = {e.sequence: e for e in everything}
    for d in data:
        e = by_seq[d["sequence"]]
        assert d["created_at"] == e.created_at.isoformat() and d["operation_id"] == str(e.operation_id)
        assert d["user_digest"] == e.user_digest and d["actions"] == e.actions and d["prev_hash"] == e.prev_hash
    # the chain links up in the export
    assert all(b["prev_hash"] == a["hash"] for a, b in zip(data, data[1:], strict=False))

    # the same filters as the page
    _, text = await _export(alice, "csv", user="carol", outcome="completed")
    rows = _csv_rows(text)
    assert [r["operation_id"] for r in rows] == [str(ops["carol_deploy"].id)]
    _, text = await _export(alice, "json", code="mrtr_round_limit_exceeded")
    assert {d["operation_id"] for d in json.loads(text)} == {str(ops["alice_endless"].id)}
    old_day = timezone.localtime(world["old"]).date().isoformat()
    _, text = await _export(alice, "json", **{"from": old_day, "to": old_day})
    assert [d["sequence"] for d in json.loads(text)] == [world["foreign"].sequence]
    _, text = await _export(alice, "csv", tool="no-such-tool")
    assert _csv_rows(text) == []
    _, text = await _export(alice, "json", tool="no-such-tool")
    assert json.loads(text) == []
    # a filter on page 2 does not limit an export
    _, text = await _export(alice, "json", page="2")
    assert len(json.loads(text)) == len(everything)


async def test_exports_hold_no_answer_value_and_no_request_state(world):
    alice = world["clients"]["alice"]
    blobs = [(await _export(alice, fmt))[1] for fmt in ("csv", "json")]
    blobs.append((await _get(alice, "/mcp/tenants/acme/history/")).content.decode())
    for key in ("alice_deploy", "alice_endless"):
        blobs.append((await _get(alice, f"/mcp/history/operations/{world['ops'][key].id}/")).content.decode())
    for blob in blobs:
        for value in ANSWER_VALUES + ("requestState", "inputResponses", "production", "replicas", "github"):
            assert value not in blob, value
        assert "alice-demo-pw" not in blob


async def test_csv_cells_are_not_spreadsheet_formulas(world):
    """A name that a spreadsheet would run (server- or user-chosen text) is exported as text."""
    alice = world["clients"]["alice"]
    op = world["ops"]["alice_deploy"]

    def hostile() -> None:
        o = Operation.objects.select_related("server").get(pk=op.pk)
        o.name = '=HYPERLINK("http://evil.test","x")'
        audit.record(o, "rejected", code="invalid_result", reason="+cmd|' /C calc'!A0")

    await sync_to_async(hostile)()
    _, text = await _export(alice, "csv", code="invalid_result")
    [row] = _csv_rows(text)
    assert row["name"] == "'" + '=HYPERLINK("http://evil.test","x")'
    assert row["reason"] == "'+cmd|' /C calc'!A0"
    _, text = await _export(alice, "json", code="invalid_result")
    [item] = json.loads(text)
    assert item["name"] == '=HYPERLINK("http://evil.test","x")'  # JSON is exact
    html = (await _get(alice, "/mcp/tenants/acme/history/", {"code": "invalid_result"})).content.decode()
    assert "=HYPERLINK(&quot;http://evil.test&quot;,&quot;x&quot;)" in html  # escaped on the page


# ------------------------------------------------------------------------------------------------
# Timelines
# ------------------------------------------------------------------------------------------------


async def test_timeline_shows_the_rounds_in_chain_order(world):
    ops, alice, carol = world["ops"], world["clients"]["alice"], world["clients"]["carol"]
    op = ops["alice_deploy"]
    events = [e async for e in AuditEvent.objects.filter(operation_id=op.id).order_by("sequence")]
    html = (await _get(alice, f"/mcp/history/operations/{op.id}/")).content.decode()
    assert _sequences(html) == [e.sequence for e in events]
    kinds = [e.event for e in events]
    assert kinds[0] == "received" and "submitted" in kinds and "completed" in kinds
    submitted = next(e for e in events if e.event == "submitted")
    assert submitted.retry_id and submitted.retry_id in html and op.request_id in html
    assert "<code>confirm_deploy</code>: accept" in html
    received = events[0]
    algo = received.state_digest.rpartition(":")[0] + ":"
    short = received.state_digest[:len(algo) + 8] + "…"
    assert f'<code class="id" title="{received.state_digest}">{short}</code>' in html  # shortened ...
    assert f">{received.state_digest}<" not in html  # ... the full digest only in a title and the copy button
    assert f'data-copy="{received.state_digest}" aria-label="Copy full value"' in html
    assert "Demo server" in html and "Completed" in html
    # bob's attempt is in the chain of alice's operation: she sees it, as a digest
    assert world["foreign"].sequence in _sequences(html)
    bob_digest = audit.keyed_digest(f"user:{world['users']['bob'].pk}")
    assert f'title="{bob_digest}">{bob_digest[:len("hmac-sha256:") + 8]}…</code>' in html
    assert ">bob<" not in html  # not in her tenant: a digest only

    # the admin sees a member's timeline, with the member's name; the member sees "you"
    html = (await _get(alice, f"/mcp/history/operations/{ops['carol_deploy'].id}/")).content.decode()
    assert ">carol<" in html and f"/mcp/operations/{ops['carol_deploy'].id}/" not in html
    html = (await _get(carol, f"/mcp/history/operations/{ops['carol_deploy'].id}/")).content.decode()
    assert ">you<" in html and f"/mcp/operations/{ops['carol_deploy'].id}/" in html
    assert "/mcp/tenants/acme/history/" not in html  # carol is no admin


async def test_timeline_survives_the_operation_row(world):
    """A removed server takes its operations with it; the audit events remain, and so does the
    timeline (for the tenant's admins and the owner by digest)."""
    ops, clients = world["ops"], world["clients"]
    op_id = ops["carol_deploy"].id
    await Operation.objects.filter(pk=op_id).adelete()
    url = f"/mcp/history/operations/{op_id}/"
    for name, status in (("alice", 200), ("carol", 200), ("bob", 404)):
        assert (await _get(clients[name], url)).status_code == status, name
    html = (await _get(clients["carol"], "/mcp/history/")).content.decode()
    assert str(op_id) in _timeline_links(html)


@pytest.mark.django_db(transaction=True)
async def test_an_answer_attempted_on_anothers_operation_shows_nothing_of_that_operation(seeded):
    """bob posts an answer to alice's operation (its id known): 404, and his own history lists his
    refused attempt -- when and why -- but not her round, its request id, or acme's chain sequence
    (he could otherwise follow her operation's progress and acme's audit volume)."""
    import re as _re

    from django.test import AsyncClient

    from mrtrweb.models import Operation
    from tests.answering import waiting_round

    _client, op = await waiting_round(seeded, "gitlab", shown=True)
    op = await Operation.objects.aget(pk=op.pk)
    bob = AsyncClient()
    await bob.aforce_login(seeded["users"]["bob"])
    answer = await bob.post(f"/mcp/operations/{op.id}/answer/", {"action": "decline", "round": "1"})
    assert answer.status_code == 404
    page = (await bob.get("/mcp/history/")).content.decode()
    section = page.split(f'data-operation="{op.id}"', 1)[1].split("</section>", 1)[0]
    assert "answer attempt by another user" in section  # his own refused attempt is listed
    assert f"round {op.rounds}" not in section
    assert op.latest_request_id[:12] not in section and op.latest_request_id not in section
    assert not _re.search(r'data-sequence="\d+"', section)
