"""MCP Apps in Chromium, attacked (session 18's attack lane): two servers' apps on the one sandbox
origin. Each app runs in an opaque origin of its own (the inner frame's sandbox without
``allow-same-origin``): it cannot reach into its proxy's page, and what one server's app keeps in
the browser (local storage, IndexedDB) is never another server's app's to read. (This Chromium
refuses a third-party frame's storage by itself, so here the storage checks hold either way; a
browser that partitions it by top-level site only, Chrome's default, would give every app of the
sandbox origin under this site the same storage.) An app that
navigates its own frame elsewhere goes nowhere (the proxy's ``frame-src 'self'``) and its frame is
removed (nothing more is relayed to what it shows)."""

from __future__ import annotations

import pytest

from tests.mcpapps import hostile_apps

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]


def test_an_app_finds_nothing_another_servers_app_left_and_cannot_reach_its_proxy(visit, hostile):  # noqa: F811
    from mrtrweb.models import McpServer

    v = visit()
    v.call("store")
    first = v.results()["tries"]
    # another server of the tenant (another vendor's app), the same person, the same browser
    v.server = McpServer.objects.create(tenant=v.server.tenant, name="Another vendor", url=hostile.url,
                                        apps_enabled=True)
    v.call("store")
    second = v.results()["tries"]
    for tries in (first, second):
        assert tries["readProxy"].startswith("refused: SecurityError"), tries  # not the proxy's origin
        assert "data of" not in tries["readStorage"], tries
        assert "secrets-of" not in tries["readIndexedDb"], tries


def test_an_app_that_navigates_its_frame_away_goes_nowhere_and_is_removed(visit):  # noqa: F811
    v = visit()
    v.call("wander")
    v.results(key="input")  # the app was handed its input: it navigates next
    proxy = v.proxy()
    for _ in range(200):
        if proxy.evaluate("() => document.querySelectorAll('iframe').length") == 0:
            break
        v.page.wait_for_timeout(50)
    # the proxy's CSP (frame-src 'self') stops its frame's navigation elsewhere: nothing was asked of
    # the outside (no way out with what the app read), and the frame, no longer the app handed over, is gone
    assert proxy.evaluate("() => document.querySelectorAll('iframe').length") == 0
    assert v.escapes == [] and not [r for r in v.requests if r.url.startswith(hostile_apps.ESCAPE)]
    assert any("frame-src 'self'" in line and hostile_apps.ESCAPE in line for line in v.console)
    assert not [f for f in v.page.frames if f.url.startswith(hostile_apps.ESCAPE)]
