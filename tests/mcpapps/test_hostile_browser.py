"""Hostile MCP Apps in Chromium (issue 31, item 3): the apps of :mod:`tests.mcpapps.hostile_apps`
(our own server over Streamable HTTP on loopback) try each escape; each is refused and nothing of
the site leaks. Escaping the frame (reading or navigating the site, navigating the proxy, popups,
framing the site, fetching it); undeclared network (CSP: fetch and image to an undeclared domain, a
private address; the builder refusing ``*``, ``data:``, private and plain-http domains); forged
messages (to the site directly, through the proxy as the proxy or the host); sizes (size changes
out of bounds, a huge message, a huge HTML resource); display modes; ``tool-cancelled`` on Stop; and
no message the host posts to any frame carrying the session cookie, the CSRF token, a round's
``requestState`` or an answer value. Also approval by digest as the admin and the member see it."""

from __future__ import annotations

import json
import re

import pytest

from mrtrweb.mcpapps import csp as app_csp
from tests.browser import OP_URL, expect
from tests.mcpapps import hostile_apps
from tests.mcpapps.visits import DOC

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]

def test_escaping_the_frame_is_refused(visit, live):
    v = visit()
    v.call("escape")
    got = v.results()
    tries = got["tries"]
    # the site above cannot be read: another origin
    for name in ("readTopDocument", "readTopLocation", "readTopStorage"):
        assert tries[name].startswith("refused: SecurityError"), (name, tries[name])
    # the app runs in an opaque origin of its own (its frame's sandbox has no allow-same-origin): no
    # cookie at all, and its proxy's page is another origin to it
    assert tries["cookie"].startswith("refused: SecurityError")
    for name in ("popupFromProxy", "frameSiteInProxy", "listenInProxy", "evalInProxy", "fetchSiteFromProxy"):
        assert tries[name].startswith("refused: SecurityError"), (name, tries[name])
    # navigating the site or the proxy, popups: the frames' sandbox has no allow-top-navigation / allow-popups
    assert tries["popup"] == "null"
    assert tries["fetchSite"].startswith("refused: TypeError")
    assert OP_URL.search(v.page.url) and v.proxy().url.startswith(v.sandbox + "/mcp/apps/sandbox/?")
    assert v.pages == [] and v.escapes == []
    assert not [r for r in v.requests if r.url.startswith(hostile_apps.ESCAPE)]
    # framing and fetching the site: refused by the app's CSP
    # (a blocked frame is reported by its origin, a blocked fetch by its URL)
    blocked = {(x["directive"], x["blocked"], x.get("in", "app")) for x in got["violations"]}
    site = live.url
    assert ("frame-src", site, "app") in blocked
    assert ("connect-src", f"{site}/mcp/", "app") in blocked
    # nothing of the sandbox origin asked the site for anything
    from_sandbox = [r for r in v.requests if r.frame.url.startswith(v.sandbox) and r.url.startswith(site)]
    assert from_sandbox == []
    assert got["site"] == site  # what it tried to reach was the site


def test_undeclared_network_is_blocked_and_bad_declarations_refused(visit, live):
    v = visit()
    documents = []
    v.page.context.on("response", lambda r: documents.append(r) if DOC in r.url else None)
    v.page.context.route(f"{hostile_apps.ALLOWED}/**", lambda route: route.fulfill(
        status=200, body="declared-ok", headers={"Access-Control-Allow-Origin": "*"}))
    v.call("network")
    box = v.page.locator("#mcp-app")
    # before it loads, the person sees the outside domains it may reach: the accepted ones only
    expect(box.locator(".app-domains")).to_have_text(
        f"This app may reach: {hostile_apps.ALLOWED}, {hostile_apps.CDN}")
    expect(box.locator(".app-status")).to_have_text(
        "The app is loaded once you have read which outside domains it may reach.")
    v.page.wait_for_timeout(300)
    assert not [r for r in v.requests if DOC in r.url]  # not loaded before the person chose to
    box.get_by_role("button", name="Load the app").click()
    got = v.results()
    policy = app_csp.build(hostile_apps.NETWORK_CSP)
    assert policy.domains["connectDomains"] == (hostile_apps.ALLOWED,)
    assert sorted(value for _, value, _ in policy.refused) == sorted(
        ["*", "data:", "https://10.0.0.1", "https://localhost:8443", "http://plain.example", "javascript:alert(1)"])
    [document] = documents
    header = document.all_headers()["content-security-policy"]
    assert header == policy.header + f"; frame-ancestors {v.sandbox} {live.url}"
    assert f"connect-src {hostile_apps.ALLOWED};" in header and "10.0.0.1" not in header and "*" not in header
    tries = got["tries"]
    assert tries["fetchDeclared"] == "declared-ok"  # what it declared works
    assert tries["fetchUndeclared"].startswith("refused: TypeError")
    assert tries["imgUndeclared"] == "error"
    assert tries["fetchPrivate"].startswith("refused: TypeError")
    assert v.escapes == []  # nothing undeclared reached the network
    blocked = {(x["directive"], x["blocked"]) for x in got["violations"]}
    assert ("connect-src", f"{hostile_apps.UNDECLARED}/data") in blocked
    assert ("img-src", f"{hostile_apps.UNDECLARED}/pixel.png") in blocked
    assert ("connect-src", "https://10.0.0.1/") in blocked


def test_forged_messages_change_nothing(visit):
    v = visit()
    v.call("forge")
    got = v.results()
    box = v.page.locator("#mcp-app")
    expect(box.locator(".app-status")).to_have_text("The app shows this result.")
    # one app per proxy: the forged sandbox-resource-ready (through the proxy) loaded nothing; the
    # app cannot count (or touch) its proxy's frames itself: another origin to it
    assert v.proxy().evaluate("() => document.querySelectorAll('iframe').length") == 1
    assert got["tries"]["proxyFrames"].startswith("refused: SecurityError")
    assert len([r for r in v.requests if DOC in r.url]) == 1
    methods = [json.loads(t).get("method") for t in v.host_to_proxy() if t.startswith("{")]
    # the host answered the first proxy-ready only: not the one sent straight to the site (not from
    # the proxy's frame), nor the one the app sent through the proxy
    assert methods.count("ui/notifications/sandbox-resource-ready") == 1
    # what the app sent straight to the site arrived there from "another window", and was ignored
    site_got = [(who, t) for url, who, t in v.messages if OP_URL.search(url)]
    assert ("other", '{"jsonrpc":"2.0","method":"ui/notifications/sandbox-proxy-ready","params":{}}') in site_got
    # a second "initialized" does not make the host start over: one tool-input, one tool-result
    assert got["notes"].count("ui/notifications/tool-input") == 1
    assert got["notes"].count("ui/notifications/tool-result") == 1
    # the page still works: the host answers the app and closes it cleanly, teardown first
    app = v.app()
    v.page.get_by_role("button", name="Close the app").click()
    expect(box.locator(".app-status")).to_have_text("The app was closed.")
    assert "ui/resource-teardown" in [json.loads(t).get("method") for t in v.host_to_proxy() if t.startswith("{")]
    assert v.page.evaluate("() => document.querySelectorAll('#mcp-app iframe').length") == 0  # removed from the page
    for _ in range(50):  # Playwright learns of the removed frame's detachment a moment later (a loaded machine)
        if app.is_detached():
            break
        v.page.wait_for_timeout(100)
    assert app.is_detached()


def test_sizes_are_bounded_and_a_huge_message_is_dropped(visit):
    v = visit()
    v.call("sizes")
    v.page.wait_for_selector("#mcp-app iframe.app-frame", state="attached")
    v.page.evaluate("""() => {
      window.__heights = [];
      const f = document.querySelector('#mcp-app iframe.app-frame');
      new MutationObserver(() => window.__heights.push(f.style.height)).observe(f, {attributes: true});
    }""")
    v.results(key="init")
    v.app().evaluate("window.__go = true")  # the app starts once the heights are watched
    v.results()
    v.page.wait_for_timeout(300)
    heights = v.page.evaluate("window.__heights")
    assert "1600px" in heights and "80px" in heights, heights  # 1e9 and -50, bounded
    assert heights[-1] == "321px"  # the host still listens after the huge message
    assert all(80 <= int(h[:-2]) <= 1600 for h in heights if h), heights
    # the huge message reached the proxy and went no further
    assert any(t.startswith("HUGE:") for url, _, t in v.messages if url.startswith(v.sandbox + "/mcp/apps/sandbox/?"))
    site_received = [t for url, _, t in v.messages if OP_URL.search(url)]
    assert site_received and not any(t.startswith("HUGE:") for t in site_received)


def test_a_huge_html_resource_is_not_shown(visit):
    from mrtrweb.models import Operation

    v = visit()
    v.call("huge")
    box = v.page.locator("#mcp-app")
    expect(box.locator(".app-status")).to_have_text(re.compile(
        r"^This app is too large to show here \(3\.\d MB of HTML; this site shows apps of at most 1 MB\)\. "
        r"The result above is what the server answered\.$"), timeout=30_000)
    assert not [r for r in v.requests if DOC in r.url]
    assert Operation.objects.get(method="resources/read", name="ui://hostile/huge.html").status == "completed"


def test_display_modes_fullscreen_within_the_page_and_back(visit):
    v = visit()
    v.call("modes")
    got = v.results()
    assert got["init"]["hostContext"]["displayMode"] == "inline"
    assert got["init"]["hostContext"]["availableDisplayModes"] == ["inline", "fullscreen"]
    # full screen granted; pip is not offered: the answer is the mode actually applied
    assert got["modeAnswers"] == [{"mode": "fullscreen"}, {"mode": "fullscreen"}]
    holder = v.page.locator("#mcp-app .app-holder")
    expect(holder).to_have_class(re.compile(r"\bfullscreen\b"))
    leave = v.page.get_by_role("button", name="Leave full screen")
    expect(leave).to_be_visible()
    frame_box = v.page.locator("#mcp-app iframe.app-frame").bounding_box()
    assert frame_box["height"] > 1200  # the window is 1600 high
    got = v.results(key="contextChanges")
    assert {"displayMode": "fullscreen"} in got["contextChanges"]
    leave.click()
    expect(holder).not_to_have_class(re.compile(r"\bfullscreen\b"))
    for _ in range(100):
        got = v.app().evaluate("window.__results")
        if got["contextChanges"][-1] == {"displayMode": "inline"}:
            break
        v.page.wait_for_timeout(50)
    assert got["contextChanges"][-1] == {"displayMode": "inline"}
    # the person's theme changes: host-context-changed with the theme alone
    v.page.emulate_media(color_scheme="dark")
    for _ in range(100):
        got = v.app().evaluate("window.__results")
        if got["contextChanges"][-1] != {"displayMode": "inline"}:
            break
        v.page.wait_for_timeout(50)
    assert got["contextChanges"][-1] == {"theme": "dark"}


def test_stopped_call_sends_tool_cancelled(visit):
    v = visit()
    op_id = v.call("slow")
    box = v.page.locator("#mcp-app")
    expect(box.locator(".app-status")).to_have_text(
        "The app shows this call; its result follows when the call ends.", timeout=30_000)
    got = v.results(key="input")
    assert got["input"] == {"arguments": {}} and "cancelled" not in got
    # while the call runs the page asks nothing about it: it waits for the product's push
    outcome_reads = lambda: len([r for r in v.requests if "/app/outcome/" in r.url])  # noqa: E731
    before = outcome_reads()
    v.page.wait_for_timeout(2500)
    assert outcome_reads() == before and v.page.locator("#operation").get_attribute("data-ws-state") == "open"
    app = v.app()
    # the person stops the call (here from a second tab of the same call: Stop reloads its own page)
    other = v.page.context.new_page()
    other.goto(f"/mcp/operations/{op_id}/")
    with other.expect_navigation():
        other.locator("form.stop-form button").click()
    got = v.results(app, key="cancelled")
    assert got["cancelled"] == {"reason": "stopped"}
    assert "result" not in got
    expect(v.page.locator("#mcp-app .app-status")).to_have_text("The call ended without a result; the app was told.")


def test_arguments_that_do_not_fit_the_tools_schema_are_refused(visit):
    """The ``args`` app's calls of its tool ``strict``: each bad one answered -32602 with the reason
    ``bad_arguments`` before anything is sent; only the one that fits reaches the server."""
    hostile_apps.STRICT_CALLS.clear()
    v = visit()
    v.call("args")
    calls = v.results()["calls"]
    for key, where in (("wrongType", "at order/qty: type"), ("extra", "at order: additionalProperties"),
                       ("tooLong", "at order/note: maxLength"), ("oversized", "256 KB")):
        error = calls[key]["error"]
        assert error["code"] == -32602 and error["data"]["reason"] == "bad_arguments", (key, error)
        assert where in error["message"], (key, error["message"])
    assert calls["good"]["result"]["content"][0]["text"] == "ordered 2"
    assert hostile_apps.STRICT_CALLS == [{"order": {"qty": 2, "note": "fine"}}]
    from mrtrweb.models import Operation

    assert list(Operation.objects.filter(name="strict").values_list("initiator", "status")) == [("app", "completed")]


def test_nothing_of_the_round_or_the_session_reaches_the_frames(visit):
    from mrtrweb.models import Operation

    v = visit()
    op_id = v.call("ask")
    card = v.page.locator("#operation form.card")
    expect(card).to_be_visible()
    v.results(key="input")  # the app shows the call while its round waits
    card.get_by_label("pin").fill(hostile_apps.PIN_ANSWER)
    with v.page.expect_navigation():
        card.get_by_role("button", name="Accept", exact=True).click()
    with v.page.expect_navigation():
        v.page.locator("#operation form.review").get_by_role("button", name="Send", exact=True).click()
    got = v.results(key="result")
    assert got["result"]["content"][0]["text"] == "done"
    assert Operation.objects.get(pk=op_id).status == "completed"
    sent = v.sent_to_frames()
    methods = [json.loads(t).get("method") for t in sent if t.startswith("{")]
    assert "ui/notifications/tool-input" in methods and "ui/notifications/tool-result" in methods
    forbidden = [*v.secrets(), hostile_apps.PIN_ANSWER, hostile_apps.ROUND_STATE, "requestState",
                 "csrfmiddlewaretoken", "inputResponses"]
    for text in sent:
        for value in forbidden:
            assert value not in text, (value, text[:300])


def test_approval_as_the_admin_and_the_page_see_it(visit):
    v = visit(apps_require_approval=True)
    op_id = v.call("versioned")
    box = v.page.locator("#mcp-app")
    expect(box.locator(".app-status")).to_have_text(
        "This app waits for a tenant admin's approval of its HTML; until then the result above is what the server "
        "answered.", timeout=30_000)
    expect(box.locator(".app-domains")).to_have_text(f"This app may reach: {hostile_apps.ALLOWED}")
    assert not [r for r in v.requests if DOC in r.url]  # nothing handed over
    with v.page.expect_navigation():
        box.get_by_role("link", name="Review it for approval").click()
    row = v.page.locator("tr.app-approval")
    expect(row).to_have_count(1)
    expect(row.locator(".uri code").first).to_have_text("ui://hostile/versioned.html")
    expect(row.locator(".permissions")).to_have_text("camera")
    with v.page.expect_navigation():
        row.get_by_role("button", name="Approve").click()
    expect(v.page.locator(".notice[role=status]")).to_have_text("Approved.")
    expect(row.locator(".status")).to_contain_text("approved")
    v.page.goto(f"/mcp/operations/{op_id}/")
    box.get_by_role("button", name="Load the app").click(timeout=30_000)  # it declares an outside domain
    expect(box.locator(".app-status")).to_have_text("The app shows this result.", timeout=30_000)
    assert v.results()["notes"].count("ui/notifications/tool-result") == 1
