"""Django's sync-style middleware batched into one thread hop per request phase (mrtrweb.runtime.onehop):
the same order and semantics as Django's own loading, CSRF still enforced, fewer hops."""

from __future__ import annotations

import functools

import pytest
from django.http import HttpResponse
from django.test import AsyncClient, override_settings
from django.test.client import AsyncClientHandler
from django.utils.deprecation import MiddlewareMixin

from mrtrweb.runtime import onehop

pytestmark = [pytest.mark.django_db(transaction=True)]

calls: list[str] = []


def _named(name: str, *, answer_in: bool = False, raise_in: bool = False, raise_out: bool = False):
    def process_request(self, request):
        calls.append(f"{name}.in")
        if raise_in:
            raise PermissionError(name)  # any exception: the handler turns it into a 500
        if answer_in:
            return HttpResponse(f"from {name}", status=418)
        return None

    def process_response(self, request, response):
        calls.append(f"{name}.out")
        if raise_out:
            raise PermissionError(name)
        response[f"X-{name}"] = "1"
        return response

    return type(name, (MiddlewareMixin,), {"process_request": process_request, "process_response": process_response})


A = _named("A")
B = _named("B")
C = _named("C")
AnswersB = _named("B", answer_in=True)
RaisesInB = _named("B", raise_in=True)
RaisesOutB = _named("B", raise_out=True)


class _Handler(onehop.OneHopMixin, AsyncClientHandler):
    pass


def _client(batched: bool) -> AsyncClient:
    client = AsyncClient(raise_request_exception=False)
    if batched:
        client.handler = _Handler(enforce_csrf_checks=False)
    return client


async def _outcome(middleware: list[str], batched: bool) -> tuple[list[str], int, dict[str, str]]:
    calls.clear()
    with override_settings(MIDDLEWARE=middleware):
        resp = await _client(batched).get("/healthz-not-a-page/")
    return list(calls), resp.status_code, {k: v for k, v in resp.headers.items() if k.startswith("X-")}


@pytest.mark.parametrize("inner", ["B", "AnswersB", "RaisesInB", "RaisesOutB"])
async def test_a_batch_behaves_as_django_loads_the_same_middleware(seeded, inner):
    middleware = [f"tests.runtime.test_onehop.{n}" for n in ("A", inner, "C")]
    assert onehop.batched(middleware) == [onehop._batches[tuple(middleware)]]  # one batch of three
    assert await _outcome(middleware, batched=True) == await _outcome(middleware, batched=False)
    assert calls  # the middleware ran


def test_only_sync_style_runs_are_batched(settings):
    listed = onehop.batched(list(settings.MIDDLEWARE))
    assert listed[0] == "mrtrweb.runtime.health.HealthMiddleware" and listed[-2:] == [
        "mrtrweb.middleware.FailClosedMiddleware", "axes.middleware.AxesMiddleware"]  # own hooks: kept
    batch = onehop.import_string(listed[1])
    assert batch.members == tuple(settings.MIDDLEWARE[1:-2]) and len(listed) == 4
    assert "django.middleware.csrf.CsrfViewMiddleware" in batch.members
    assert onehop.batched(["tests.runtime.test_onehop.A"]) == ["tests.runtime.test_onehop.A"]  # a run of one: as it is


def _hop_counter(monkeypatch) -> list[int]:
    from asgiref.sync import SyncToAsync

    hops = [0]
    real = SyncToAsync.__call__

    @functools.wraps(real)
    async def counted(self, *a, **k):
        hops[0] += 1
        return await real(self, *a, **k)

    monkeypatch.setattr(SyncToAsync, "__call__", counted)
    return hops


async def test_the_site_stack_costs_fewer_hops_and_still_checks_csrf(seeded, monkeypatch):
    hops = _hop_counter(monkeypatch)
    counts = {}
    for batched in (False, True):
        client = _client(batched)
        client.handler.enforce_csrf_checks = True
        await client.aforce_login(seeded["users"]["alice"])
        hops[0] = 0
        page = await client.get("/mcp/")
        counts[batched] = hops[0]
        assert page.status_code == 200 and "X-Frame-Options" in page.headers
        assert "Content-Security-Policy" in page.headers
        server = seeded["servers"]["acme"]
        forged = await client.post(f"/mcp/servers/{server.pk}/tools/deploy/", {"arg-env": "staging"})
        assert forged.status_code == 403  # no CSRF token: refused, batched or not
    assert counts[True] <= counts[False] - 12, counts  # 14 middleware hops become 2
