"""An app's requests to the host, attacked (session 18's attack lane): ``ui/download-file`` and
``ui/open-link`` count toward the app's ``APPS_CALLS_PER_SECOND`` like its calls -- a download
holds up to ``APPS_MAX_DOWNLOAD_BYTES`` in the binding cache (where the live rounds' bindings are)
for ``APPS_CALL_TIMEOUT_S``, and each offer is a card on the person's page, so an app looping on
them would fill both. Django's client against our app server, the app rendered by the product."""

from __future__ import annotations

import pytest

from tests.mcpapps.app_requests import ask as _ask, rendered as _rendered

pytestmark = [pytest.mark.django_db(transaction=True)]


@pytest.mark.parametrize("body", [
    {"method": "ui/download-file", "contents": [{"type": "resource", "resource": {"uri": "a.txt", "text": "x" * 1000}}]},
    {"method": "ui/open-link", "url": "https://docs.example/page"},
], ids=["download", "link"])
async def test_offers_count_toward_the_apps_requests_per_second(seeded, own, sandbox, settings, monkeypatch,
                                                                 body):  # noqa: F811
    from mrtrweb.appcalls import rights

    settings.MRTRWEB = {**settings.MRTRWEB, "APPS_CALLS_PER_SECOND": 3}
    host, client = await _rendered(seeded, own)
    import types

    now = rights.time.time()
    monkeypatch.setattr(rights, "time", types.SimpleNamespace(time=lambda: now))  # twelve within one second
    answers = [await _ask(client, host, body) for _ in range(12)]
    assert [status for status, _ in answers] == [200] * 3 + [429] * 9
    assert all(answer["error"] == "rate_limited" for _, answer in answers[3:])


async def test_the_files_an_app_offers_and_nobody_took_are_bounded_together(seeded, own, sandbox, settings):  # noqa: F811
    """``APPS_MAX_DOWNLOAD_BYTES`` bounds the files one app holds in the binding cache at once, not
    only one offer's: offers nobody took count until taken or expired."""
    settings.MRTRWEB = {**settings.MRTRWEB, "APPS_MAX_DOWNLOAD_BYTES": 10}
    host, client = await _rendered(seeded, own)

    def six(name):
        return {"method": "ui/download-file", "contents": [{"type": "resource", "resource": {"uri": name,
                                                                                            "text": "abcdef"}}]}

    status, first = await _ask(client, host, six("one.txt"))
    assert status == 200
    status, refused = await _ask(client, host, six("two.txt"))  # 12 bytes held at once: over the bound
    assert (status, refused["error"]) == (400, "bad_download")
    url = first["card"].split('class="app-download" href="')[1].split('"')[0]
    assert (await client.get(url)).content == b"abcdef"  # taken: no longer held
    status, _ = await _ask(client, host, six("three.txt"))
    assert status == 200


async def test_an_apps_call_is_not_run_again_as_the_persons(seeded, own, sandbox):  # noqa: F811
    """``lookup`` is for its app alone (``visibility: ["app"]``): the app's call of it completed,
    and its page's "Run again" would make it a person's call of an app-only tool (which the call
    form refuses), recorded as the person's. An app's call is the app's to make again."""
    from mrtrweb import operations
    from mrtrweb.models import Operation

    host, client = await _rendered(seeded, own)
    status, body = await _ask(client, host, {"method": "tools/call", "name": "lookup", "arguments": {"q": "x"}})
    assert status == 200 and body["status"] == "started"
    await operations.wait_idle()
    app_call = await Operation.objects.aget(pk=body["operation"])
    assert app_call.status == "completed" and app_call.initiator == "app"
    page = (await client.get(f"/mcp/operations/{app_call.pk}/")).content.decode()
    assert f"/mcp/operations/{app_call.pk}/rerun/" not in page  # not offered
    again = await client.post(f"/mcp/operations/{app_call.pk}/rerun/")
    assert again.status_code == 409
    await operations.wait_idle()
    assert len(own.log.tool_calls("lookup")) == 1
    assert not await Operation.objects.filter(name="lookup", initiator="person").aexists()
