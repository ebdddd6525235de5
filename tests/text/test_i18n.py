"""Translation at render time: the stored English outcome messages shown in the page's language
(:mod:`mrtrweb.text.stored_text`, the ``|translated`` filter), never changed where they are stored or
read by machines; the language of pushed panels (:mod:`mrtrweb.live.languages`); pages chosen by
``LocaleMiddleware`` from ``Accept-Language``."""

from __future__ import annotations

import pytest
from django.test import override_settings
from django.utils import translation

from mrtrweb.text import stored_text
from mrtrweb.live.languages import scope_language
from mrtrweb.mcp import McpCallError
from mrtrweb.operations import messages


def _jsonrpc_failure(said: str) -> str:
    exc = McpCallError("jsonrpc_error", "x")
    exc.rpc_code, exc.rpc_message = -32001, said
    return messages.failure_message(exc)


def test_stored_messages_stay_english_and_show_german():
    stored = messages.DENY_MESSAGES["cancelled"]
    assert stored == "You stopped this operation; nothing was sent for its open round."  # what is stored
    with translation.override("de"):
        assert messages.DENY_MESSAGES["cancelled"] == stored  # marked, not translated, where it is made
        assert stored_text.translated(stored) == "Sie haben diesen Vorgang gestoppt; für seine offene Runde wurde nichts gesendet."
    with translation.override("en"):
        assert stored_text.translated(stored) == stored


def test_composite_messages_translate_their_parts_and_keep_server_text():
    stored = _jsonrpc_failure("Datenbank kaputt. It said: nothing")
    assert stored == ("The MCP server answered with an error. It said (JSON-RPC error -32001): "
                      "Datenbank kaputt. It said: nothing")
    with translation.override("de"):
        assert stored_text.translated(stored) == (
            "Der MCP-Server hat mit einem Fehler geantwortet. Er antwortete (JSON-RPC-Fehler -32001): "
            "Datenbank kaputt. It said: nothing")
        reason = stored_text.WITH_REASON % {"message": messages.message_for("inactive_mrtr_round"),
                                            "reason": "state_mismatch"}
        assert stored_text.translated(reason).endswith("Grund: state_mismatch.")
        assert stored_text.translated(messages.message_for("no_such_code")) == (
            "Die Anfrage des Servers wurde vom Gate abgewiesen (no_such_code).")
        # text that only looks like a composite (a server's words) is shown as it is
        lookalike = "Some server said this. Reason: none."
        assert stored_text.translated(lookalike) == lookalike
        assert stored_text.translated("") == "" and stored_text.translated(None) is None


def test_every_stored_message_has_a_german_translation():
    tables = [messages.MESSAGES, messages.DENY_MESSAGES, messages.STOPPED_BY, messages.STOPPED_BY_AT_ROUND]
    english = {text for table in tables for text in table.values()} | {messages.STOP_UNDELIVERED}
    with translation.override("de"):
        untranslated = sorted(text for text in english if stored_text.translated(text) == text)
    assert not untranslated


def _scope(accept: str = "", cookie: str | None = None) -> dict:
    headers = [(b"host", b"x")] + ([(b"accept-language", accept.encode())] if accept else [])
    return {"headers": headers, "cookies": {"django_language": cookie} if cookie else {}}


def test_push_language_follows_the_handshake():
    assert scope_language(_scope("de-DE,de;q=0.9,en;q=0.8")) == "de"
    assert scope_language(_scope("fr-FR, en;q=0.5")) == "en"
    assert scope_language(_scope("fr-FR")) in ("en", "en-us")  # LANGUAGE_CODE's variant
    assert scope_language(_scope("en-US", cookie="de")) == "de"  # the language cookie first, as LocaleMiddleware
    assert scope_language(_scope("x" * 5000)) in ("en", "en-us")  # never fails


def test_push_language_without_locale_middleware_is_the_site_language(settings):
    settings.MIDDLEWARE = [m for m in settings.MIDDLEWARE if m != "django.middleware.locale.LocaleMiddleware"]
    assert scope_language(_scope("de")) == settings.LANGUAGE_CODE


@pytest.mark.django_db
def test_login_page_follows_accept_language(client):
    german = client.get("/accounts/login/", HTTP_ACCEPT_LANGUAGE="de-DE,de;q=0.9").content.decode()
    assert '<html lang="de">' in german and "<h1>Anmelden</h1>" in german and "Benutzername" in german
    english = client.get("/accounts/login/", HTTP_ACCEPT_LANGUAGE="en-US").content.decode()
    assert '<html lang="en">' in english and "<h1>Sign in</h1>" in english


def test_unavailable_page_in_german():
    from mrtrweb.middleware import unavailable_response

    with translation.override("de"):
        body = unavailable_response("database").content.decode()
        assert '<html lang="de">' in body and "Vorübergehend nicht verfügbar" in body
        assert "Die Datenbank ist gerade nicht erreichbar." in body
        body = unavailable_response("cache", messages.STOP_UNDELIVERED).content.decode()
        assert "Das Stoppen konnte nicht an den Worker weitergegeben werden" in body


@override_settings(LANGUAGE_CODE="en-us")
def test_panel_filter_translates_the_outcome():
    from django.template import Context, Template

    template = Template("{% load mrtrweb_display %}{{ text|translated|shown }}")
    stored = messages.message_for("timeout")
    with translation.override("de"):
        assert template.render(Context({"text": stored})) == "Der MCP-Server hat nicht rechtzeitig geantwortet."
        # escaped like any text (the filter is not "safe")
        assert template.render(Context({"text": "<b>x</b>"})) == "&lt;b&gt;x&lt;/b&gt;"


@pytest.mark.django_db
def test_a_portal_without_locale_middleware_or_locale_paths_shows_its_language(client, settings):
    """A portal that sets only LANGUAGE_CODE = "de" (no LocaleMiddleware, no LOCALE_PATHS): the
    catalog is found as the app's own (mrtrweb/locale, shipped in the wheel) and every page is German,
    whatever the browser asks for."""
    settings.MIDDLEWARE = [m for m in settings.MIDDLEWARE if m != "django.middleware.locale.LocaleMiddleware"]
    settings.LOCALE_PATHS = []
    settings.LANGUAGE_CODE = "de"
    page = client.get("/accounts/login/", HTTP_ACCEPT_LANGUAGE="en-US").content.decode()
    assert '<html lang="de">' in page and "<h1>Anmelden</h1>" in page
    assert scope_language(_scope("en-US")) == "de"
    with translation.override("de"):  # a msgid only mrtrweb's catalog has
        assert translation.gettext("Your MCP servers") == "Ihre MCP-Server"
