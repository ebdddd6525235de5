"""The shipped German translation in a real browser, chosen by ``LocaleMiddleware`` from the
browser's language (Playwright ``locale="de-DE"``: ``Accept-Language: de-DE``): a person signs in,
calls the demo's ``deploy`` tool, answers its consent card (pushed over the WebSocket: rendered in
the connection's language, :mod:`mrtrweb.live.languages`), reviews and sends, and reads the result:
navigation, card, buttons, live-region text, review and result in German, ``<html lang="de">``.
The server's own text (its field labels, its message) stays as the server wrote it. A browser
in English still reads English. Fixtures from ``tests/browser.py``.
"""

from __future__ import annotations

import re

import pytest

from tests.browser import OP_URL, PASSWORDS, TEXT_DONE_SCRIPT, TIMEOUT_MS, screenshot, op_status, expect

pytestmark = [pytest.mark.browser]


def _context(app, locale: str):
    context = app.browser.new_context(base_url=app.live.url, viewport={"width": 1100, "height": 1400},
                                      locale=locale)
    context.set_default_timeout(TIMEOUT_MS)
    context.add_init_script(TEXT_DONE_SCRIPT)
    app.contexts.append(context)
    return context


def _sign_in_de(app, username: str):
    """Sign in through the German login page (Django's own form labels are in its German catalog)."""
    page = _context(app, "de-DE").new_page()
    page.goto("/accounts/login/?next=/mcp/")
    expect(page.locator("html")).to_have_attribute("lang", "de")
    expect(page.get_by_role("heading", name="Anmelden")).to_be_visible()
    page.get_by_label("Benutzername").fill(username)
    page.get_by_label("Passwort").fill(PASSWORDS[username])
    page.get_by_role("button", name="Anmelden").click()
    expect(page.locator("header .who")).to_have_text(f"Angemeldet als {username}")
    expect(page.get_by_role("heading", name="Ihre MCP-Server")).to_be_visible()
    return page


def _no_overflow(page) -> None:
    """Nothing wider than the viewport: the page does not scroll sideways, the card fits."""
    assert page.evaluate("() => document.documentElement.scrollWidth <= window.innerWidth")
    box = page.locator("#operation form.card").bounding_box()
    assert box is not None and box["x"] >= 0 and box["x"] + box["width"] <= page.viewport_size["width"] + 0.5


def test_german_card_review_and_result(app):
    page = _sign_in_de(app, "alice")
    nav = page.locator("header nav")
    expect(nav.get_by_role("link", name="Verbindungen")).to_be_visible()
    expect(nav.get_by_role("button", name="Abmelden")).to_be_visible()

    page.get_by_role("link", name="Demo server").click()
    expect(page.get_by_role("heading", name="Tools")).to_be_visible()
    page.locator("a[data-tool='deploy']").click()
    expect(page.get_by_role("heading", name="Aufruf deploy")).to_be_visible()
    first = app.valve.hold("deploy")
    page.locator("[name='arg-replicas']").fill("2")
    page.locator("[name='arg-env']").select_option("staging")
    page.get_by_role("button", name="Tool aufrufen").click()
    expect(page).to_have_url(OP_URL)
    op_id = OP_URL.search(page.url).group(1)
    expect(page.get_by_text("Warten auf den Server …")).to_be_visible()
    expect(page.locator(".panel .status")).to_contain_text("Status: Läuft")
    app.wait_live(page)
    first.wait_arrived()
    first.release()

    # the card, pushed over the WebSocket, in German; the server's own words as it wrote them
    card = app.card(page)
    expect(card).to_be_visible()
    expect(card.get_by_role("heading", name="Ein Server bittet um Ihre Eingabe")).to_be_visible()
    expect(card.locator(".who-asks dt")).to_have_text(["Server", "Vorgang"])
    expect(card.locator(".who-asks")).to_contain_text("Runde 1")
    expect(card.locator(".badge")).to_have_text("verifiziert")
    expect(card.locator(".input-request > legend")).to_have_text("Angeforderte Informationen")
    expect(card.locator(".server-message")).to_have_text("Deploy 2 replica(s) to staging?")
    expect(card.locator(".effect")).to_have_text(
        "Ihre Antwort geht an Demo server als Wiederholung von tools/call deploy.")
    expect(card.locator(".actions button")).to_have_text(["Annehmen", "Ablehnen", "Abbrechen"])
    expect(page.get_by_role("button", name="Diesen Vorgang ohne Antwort stoppen")).to_be_visible()
    expect(page.locator("#live")).to_have_text("Ein Server bittet um Ihre Eingabe.")
    expect(page.locator("html")).to_have_attribute("lang", "de")
    screenshot(page, "card-de.png")

    # a required field left empty: Django's own German error
    app.submit(page, "Annehmen")
    expect(card.locator(".field.invalid .field-error").first).to_contain_text("Dieses Feld ist zwingend erforderlich.")
    expect(page.locator(".panel > p.error")).to_have_text("Einige Antworten brauchen Ihre Aufmerksamkeit.")
    card.get_by_label("Confirm deployment").check()
    card.get_by_label("Change ticket").fill("CHG-7")
    card.get_by_label("Contact email").fill("ops@example.test")
    card.get_by_label("Region").select_option(label="US East (N. Virginia)")
    card.get_by_label("email", exact=True).check()

    page.set_viewport_size({"width": 390, "height": 844})
    _no_overflow(page)
    screenshot(page, "card-de-390.png")
    page.set_viewport_size({"width": 1100, "height": 1400})

    retry = app.valve.hold("deploy", retry=True)
    app.submit(page, "Annehmen")
    review = page.locator("#operation form.review")
    expect(review.get_by_role("heading", name="Prüfen Sie Ihre Antwort vor dem Senden")).to_be_visible()
    expect(review.locator(".review-title")).to_be_focused()
    expect(page.locator("#live")).to_have_text("Prüfen Sie Ihre Antwort vor dem Senden.")
    expect(review).to_contain_text("Es wurde noch nichts gesendet.")
    expect(review.locator(".effect")).to_have_text(
        "Senden gibt diese Antwort an Demo server als Wiederholung von tools/call deploy. Sie wird einmal "
        "gesendet und kann nicht zurückgenommen werden.")
    expect(review.get_by_role("button", name="Senden", exact=True)).to_be_visible()
    expect(review.get_by_role("button", name="Ändern", exact=True)).to_be_visible()
    screenshot(page, "review-de.png")

    with page.expect_navigation():
        review.get_by_role("button", name="Senden", exact=True).click()
    app.wait_live(page)
    retry.wait_arrived()
    retry.release()
    result = page.locator(".result")
    expect(result.get_by_role("heading", name="Ergebnis")).to_be_visible()
    expect(result.locator("pre.block")).to_contain_text("Deployed 2 replica(s) to staging")  # the server's words
    expect(result.get_by_role("link", name="Ergebnis herunterladen")).to_be_visible()
    expect(page.locator(".panel .status")).to_have_text(re.compile(r"Status: Abgeschlossen · 1 Runde"))
    expect(page.locator("#live")).to_have_text(re.compile(r"Status: Abgeschlossen"))
    screenshot(page, "result-de.png")
    assert op_status(op_id) == "completed"


def test_english_browser_still_reads_english(app):
    page = _context(app, "en-US").new_page()
    page.goto("/accounts/login/?next=/mcp/")
    expect(page.locator("html")).to_have_attribute("lang", "en")
    page.get_by_label("Username").fill("carol")
    page.get_by_label("Password").fill(PASSWORDS["carol"])
    page.get_by_role("button", name="Sign in").click()
    expect(page.locator("header .who")).to_have_text("Signed in as carol")
    expect(page.get_by_role("link", name="Connections")).to_be_visible()
    first = app.valve.hold("deploy")
    app.call_tool(page, "deploy", fill={"replicas": "1"}, select={"env": "staging"})
    app.wait_live(page)
    first.wait_arrived()
    first.release()
    card = app.card(page)
    expect(card.get_by_role("heading", name="A server asks for your input")).to_be_visible()
    expect(card.locator(".who-asks dt")).to_have_text(["Server", "Operation"])
    expect(card.locator(".actions button")).to_have_text(["Accept", "Decline", "Cancel"])
    expect(page.locator("#live")).to_have_text("A server asks for your input.")
    expect(page.locator("html")).to_have_attribute("lang", "en")
