"""Accessibility (axe-core) and XSS checks in a real browser (Playwright + Debian Chromium against
the live ASGI app, fixtures from ``tests/browser.py``).

* axe-core 4 is run on every kind of page a person sees (login, index, server, tool form, a pending
  deploy card, the review of its answer, a URL-mode card, a completed and a failed operation, the consent histories); no
  violation of impact "serious" or "critical" is allowed. axe is injected into a browser context
  created with ``bypass_csp=True`` (the app's CSP refuses injected scripts, rightly). It is installed
  once with npm into ``var/node`` (git-ignored), or taken from ``$AXE_CORE_JS`` if set.
* The hostile MCP server (``tests/hostile.py``) is added for tenant acme and its payloads are
  followed through the product in a normal context (CSP enforced): no script runs, the payload is
  visible as text, and no ``<img src="x">`` element exists.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.browser import OP_URL, expect
from tests.views.axe import serious_violations, sign_in_page

from .. import hostile

pytestmark = [pytest.mark.browser]

REPO = Path(__file__).resolve().parents[2]
PAYLOAD_TEXT = "<script>window.__xss=1</script>"


# ------------------------------------------------------------------------------------------------
# Fixtures and helpers
# ------------------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def hostile_mcp():
    handle = hostile.serve()
    yield handle
    handle.stop()


@pytest.fixture
def hostile_server(app, hostile_mcp):
    from mrtrweb.models import McpServer

    acme = app.seeded["servers"]["acme"].tenant
    server = McpServer.objects.create(tenant=acme, name="Hostile", url=hostile_mcp.url)
    hostile_mcp.log.clear()
    return server


class AxeAudit:
    def __init__(self, axe_js: Path) -> None:
        self.axe_js = axe_js
        self.checked: list[str] = []
        self.found: dict[str, list[dict]] = {}

    def check(self, page, label: str) -> None:
        self.checked.append(label)
        violations = serious_violations(page, self.axe_js)
        if violations:
            self.found[f"{label} ({page.url})"] = violations

    def assert_clean(self) -> None:
        assert not self.found, "axe serious/critical violations:\n" + "\n".join(
            f"- {where}: " + "; ".join(f"{v['id']} [{v['impact']}] {v['help']} at {v['nodes'][:3]}" for v in vs)
            for where, vs in self.found.items())


def _call(page, server_name: str, tool: str, fill=None, select=None, arguments: str | None = None) -> str:
    page.goto("/mcp/")
    page.get_by_role("link", name=server_name).click()
    expect(page.get_by_role("heading", name=server_name)).to_be_visible()
    page.locator(f"a[data-tool='{tool}']").click()
    expect(page.get_by_role("heading", name=f"Call {tool}")).to_be_visible()
    for name, value in (fill or {}).items():
        page.locator(f"[name='arg-{name}']").fill(value)
    for name, value in (select or {}).items():
        page.locator(f"[name='arg-{name}']").select_option(value)
    if arguments is not None and page.locator("textarea[name='arguments']").count():
        page.locator("textarea[name='arguments']").fill(arguments)
    page.get_by_role("button", name="Call tool").click()
    expect(page).to_have_url(OP_URL)
    return OP_URL.search(page.url).group(1)


# ------------------------------------------------------------------------------------------------
# Accessibility
# ------------------------------------------------------------------------------------------------


def test_axe_finds_no_serious_or_critical_violations(app, hostile_server, axe_js):
    audit = AxeAudit(axe_js)

    # The login page, anonymous.
    context = app.browser.new_context(base_url=app.live.url, bypass_csp=True)
    app.contexts.append(context)
    login = context.new_page()
    login.goto("/accounts/login/?next=/mcp/")
    expect(login.get_by_role("button", name="Sign in")).to_be_visible()
    audit.check(login, "login")

    page = sign_in_page(app, "alice", bypass_csp=True)
    expect(page.get_by_role("heading", name="Your MCP servers")).to_be_visible()
    audit.check(page, "index")

    page.get_by_role("link", name="Demo server").click()
    expect(page.get_by_role("heading", name="Demo server")).to_be_visible()
    audit.check(page, "server page")
    page.locator("a[data-tool='deploy']").click()
    expect(page.get_by_role("heading", name="Call deploy")).to_be_visible()
    audit.check(page, "tool form")

    # A pending deploy card, then the completed result.
    _call(page, "Demo server", "deploy", fill={"replicas": "2"}, select={"env": "staging"})
    card = app.card(page)
    expect(card.locator(".server-message")).to_have_text("Deploy 2 replica(s) to staging?")
    audit.check(page, "deploy consent card")
    card.get_by_label("Confirm deployment").check()
    card.get_by_label("Change ticket").fill("CHG-11")
    card.get_by_label("Contact email").fill("ops@example.test")
    app.submit(page, "Accept")
    app.expect_review(page)
    audit.check(page, "review of the answer")
    app.submit(page, "Send")
    expect(page.locator(".result pre.block")).to_contain_text("Deployed 2 replica(s) to staging")
    expect(page.locator(".status")).to_contain_text("Completed")
    audit.check(page, "completed result")

    # A URL-mode card.
    _call(page, "Demo server", "connect_account", fill={"provider": "github"})
    expect(card.locator(".url-full")).to_be_visible()
    audit.check(page, "URL-mode card")

    # A failed operation (the hostile server answers with a malformed resultType).
    _call(page, "Hostile", "wrong_case", arguments="{}")
    expect(page.locator(".panel")).to_have_attribute("data-status", "failed")
    audit.check(page, "failed operation")

    # The consent histories.
    page.goto("/mcp/history/")
    audit.check(page, "own history")
    page.goto("/mcp/tenants/acme/history/")
    audit.check(page, "tenant history")

    assert len(audit.checked) == 11
    audit.assert_clean()

    # Positive control: axe does report a critical violation (a button without a name).
    page.evaluate("() => document.body.appendChild(document.createElement('button'))")
    assert "button-name" in [v["id"] for v in serious_violations(page, axe_js)]


# ------------------------------------------------------------------------------------------------
# XSS
# ------------------------------------------------------------------------------------------------


def _assert_inert(page, where: str) -> None:
    assert page.evaluate("() => window.__xss") is None, f"a payload ran on {where}"
    assert PAYLOAD_TEXT in page.inner_text("body"), f"the payload is not shown as text on {where}"
    assert page.locator("img[src='x']").count() == 0, f"an <img src=x> exists on {where}"
    assert not page.evaluate("() => [...document.scripts].some((s) => s.textContent.includes('__xss'))"), where


def test_hostile_payloads_stay_text_in_the_browser(app, hostile_server):
    page = sign_in_page(app, "alice")  # CSP enforced
    errors: list[str] = []
    page.on("pageerror", lambda e: errors.append(str(e)))

    page.goto(f"/mcp/servers/{hostile_server.pk}/")
    expect(page.get_by_role("heading", name="Hostile")).to_be_visible()
    _assert_inert(page, "server page")  # tool descriptions

    page.locator("a[data-tool='xss_round']").click()
    expect(page.get_by_role("heading", name="Call xss_round")).to_be_visible()
    _assert_inert(page, "tool form")

    # The round: payloads in message, titles, descriptions, default, oneOf/enumNames labels.
    _call(page, "Hostile", "xss_round", arguments="{}")
    card = app.card(page)
    expect(card).to_be_visible()
    expect(card.locator(".server-message")).to_contain_text(PAYLOAD_TEXT)
    _assert_inert(page, "xss_round card")
    assert card.locator("a").count() == 0  # URLs in the message are not links
    assert card.locator("option", has_text=PAYLOAD_TEXT).count() + card.locator(
        "label", has_text=PAYLOAD_TEXT).count() >= 2  # oneOf and enumNames labels, as text
    assert PAYLOAD_TEXT in card.locator("[name$='-name']").first.input_value()  # the default, as a value
    assert page.locator("a[href^='javascript:' i]").count() == 0

    # URL mode with a punycode host: the warning is visible, the message is text.
    _call(page, "Hostile", "xss_url", arguments="{}")
    expect(card).to_be_visible()
    expect(card.locator(".warning", has_text="punycode/IDN")).to_be_visible()
    _assert_inert(page, "xss_url card")
    expect(card.locator("a.open-url")).to_have_attribute(
        "href", "https://xn--80ak6aa92e.com/login?next=%3Cscript%3E")

    # A completed result whose text is the payload.
    _call(page, "Hostile", "xss_final", arguments="{}")
    expect(page.locator(".status")).to_contain_text("Completed")
    expect(page.locator(".result pre.block")).to_have_text(hostile.XSS)
    _assert_inert(page, "xss_final result")

    # A JSON-RPC error whose message is the payload.
    _call(page, "Hostile", "jsonrpc_error", arguments="{}")
    expect(page.locator(".panel")).to_have_attribute("data-status", "failed")
    assert page.evaluate("() => window.__xss") is None
    assert page.locator("img[src='x']").count() == 0

    assert not [e for e in errors if "__xss" in e], errors
