"""OAuth per person in a real browser (issue 13, "Tests"): Chromium against the live product, a
real authorization server (``tests/oauth_as``: django-oauth-toolkit with a login and a consent
page, in a subprocess) and the demo MCP server verifying tokens by introspection at it
(``tests/oauth_as/mcp_server.py``; its tools say whom the token belongs to).

* alice opens the server page, presses Connect, sees the authorization server's origin, signs in
  there and consents, comes back connected, calls a tool that asks ``input_required``, answers,
  and the result says alice; only her tokens reached the server;
* carol (same tenant, same server) and bob (another tenant) must connect on their own; bob's
  result says bob;
* the access token expires: the next call refreshes it without the person (no page of the
  authorization server), one refresh;
* Disconnect revokes at the authorization server (introspection says inactive) and deletes the
  connection; the next call asks to connect (nothing sent with a token); connecting again works;
* step-up: a tool that needs another scope stops on ``insufficient_scope``; "Connect and run
  again" asks the AS for the new scope (consent) and runs the call again, same arguments;
* refused with nothing stored: a victim opening the callback of a flow an attacker started
  (callback CSRF; the state is then spent for the attacker too), a state used twice, a wrong ``iss``, and discovery that points at another
  resource, a private, cloud-metadata or ``0.0.0.0`` address, ``file:``, or redirects to another host.

The authorization server and the MCP servers run once per module; the product's database is
fresh per test (tokens at the authorization server outlive a test, which these tests allow for).
"""

from __future__ import annotations

import hashlib
import re
import time
import urllib.parse

import pytest

from tests.oauth_as import USERS
from tests.oauth_as.hostile_discovery import CASES, DETERMINED_CODES, SAME_ORIGIN_FALLBACK
from tests.browser import OP_URL, App, screenshot, expect, playwright_sync

pytestmark = [pytest.mark.browser]

SERVER = "Protected server"
from tests.oauth_as.fixtures import auth_server, hostile, protected  # noqa: F401 - pytest fixtures


# ------------------------------------------------------------------------------------------------
# Fixtures
# ------------------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def oauth_client(auth_server, live):
    """The product's client at the AS, as its admin registered it for the tenant admin to enter."""
    return auth_server.create_client(redirect_uris=[f"{live.url}/mcp/oauth/callback/"], name="mrtrweb")


def add_oauth_server(tenant, name: str, url: str, client: tuple[str, str], issuer: str = ""):
    """A server in mode ``oauth_user`` with the pre-registered client, as a tenant admin sets it:
    with a secret, pinned to ``issuer`` (the authorization server that issued it); ``client[1]``
    empty: a public client (no secret)."""
    from mrtrweb.authz import crypto
    from mrtrweb.models import McpServer

    return McpServer.objects.create(
        tenant=tenant, name=name, url=url, auth_mode=McpServer.AuthMode.OAUTH_USER, oauth_client_id=client[0],
        oauth_issuer=issuer, auth_secret_sealed=crypto.seal({"client_secret": client[1]}) if client[1] else "",
        auth_secret_digest="sha256:" + hashlib.sha256(client[1].encode()).hexdigest() if client[1] else "")


class OAuthApp(App):
    """:class:`tests.browser.App` with the authorization server, the protected server and a
    "Protected server" per tenant (``servers["acme"]``, ``servers["globex"]``)."""

    def __init__(self, browser, live, seeded, auth_server, protected, servers) -> None:
        super().__init__(browser, live, protected.handle, None, seeded)
        self.auth_server = auth_server
        self.protected = protected
        self.servers = servers
        self.console: list[str] = []

    def new_context(self):
        """A context whose pages' console messages are kept (``self.console``: CSP refusals show there)."""
        context = super().new_context()
        context.on("console", lambda message: self.console.append(message.text))
        return context

    def open_server(self, page, name: str = SERVER) -> None:
        page.goto("/mcp/")
        page.get_by_role("link", name=name, exact=True).click()
        expect(page.get_by_role("heading", name=name, exact=True)).to_be_visible()

    def connect_button(self, page, name: str = SERVER, origin: str | None = None):
        origin = origin or self.protected.handle.url.rsplit("/mcp", 1)[0]
        return page.get_by_role("button", name=f"Connect to {name} ({origin})")

    def sign_in_at_as(self, page, username: str) -> None:
        """On the AS's login page: sign in as ``username`` (its own password)."""
        expect(page).to_have_url(re.compile("^" + re.escape(f"{self.auth_server.issuer}/accounts/login/")))
        expect(page.get_by_role("heading", name="Sign in to the Test Authorization Server")).to_be_visible()
        page.get_by_label("Username").fill(username)
        page.get_by_label("Password").fill(USERS[username])
        page.get_by_role("button", name="Sign in").click()

    def consent(self, page) -> None:
        """On the AS's consent page: Authorize (the browser then goes back to the product)."""
        expect(page).to_have_url(re.compile("^" + re.escape(f"{self.auth_server.issuer}/o/authorize/")))
        expect(page.get_by_role("heading", name="Authorize mrtrweb?")).to_be_visible()
        page.get_by_role("button", name="Authorize").click()

    def continue_to_as(self, page) -> None:
        """On the interstitial: the AS's origin is shown; Continue sends the browser there."""
        expect(page.get_by_role("heading", name=f"Connect to {SERVER}")).to_be_visible()
        expect(page.locator("p.connect-explainer code.authorization-origin")).to_have_text(self.auth_server.issuer)
        page.get_by_role("link", name="Continue to sign in").click()
        try:
            page.wait_for_url(re.compile("^" + re.escape(self.auth_server.issuer)))
        except playwright_sync.TimeoutError:
            raise AssertionError(f"Continue did not reach the AS; console: {self.console}") from None

    def connect(self, page, username: str, *, signed_in_at_as: bool = False) -> None:
        """From the server page: Connect, Continue, sign in and consent at the AS, back connected."""
        self.connect_button(page).click()
        self.continue_to_as(page)
        if not signed_in_at_as:
            self.sign_in_at_as(page, username)
        self.consent(page)
        expect(page).to_have_url(re.compile("^" + re.escape(self.live.url)))
        expect(page.locator("ul.messages li")).to_have_text(f"Connected to {SERVER}.")
        expect(page.locator("p.connected code.authorization-origin")).to_have_text(self.auth_server.issuer)

    def call(self, page, tool: str, fill: dict[str, str] | None = None) -> str:
        page.locator(f"a[data-tool='{tool}']").click()
        expect(page.get_by_role("heading", name=f"Call {tool}")).to_be_visible()
        for name, value in (fill or {}).items():
            page.locator(f"[name='arg-{name}']").fill(value)
        page.get_by_role("button", name="Call tool").click()
        expect(page).to_have_url(OP_URL)
        return OP_URL.search(page.url).group(1)

    def result(self, page):
        return page.locator(".result pre.block")

    def connection(self, username: str, tenant: str = "acme"):
        from mrtrweb.authz.models import OAuthConnection

        return OAuthConnection.objects.filter(user=self.seeded["users"][username],
                                              server=self.servers[tenant]).first()

    def stored_tokens(self, username: str, tenant: str = "acme") -> dict:
        from mrtrweb.authz import crypto

        return crypto.unseal(self.connection(username, tenant).tokens_sealed)


@pytest.fixture
def oauth(seeded, browser, live, auth_server, protected, oauth_client, settings):
    from mrtrweb.models import Tenant

    settings.MRTRWEB = {**(getattr(settings, "MRTRWEB", {}) or {}), "OUTBOUND_ALLOW_HTTP_LOOPBACK": True}
    servers = {slug: add_oauth_server(Tenant.objects.get(slug=slug), SERVER, protected.url, oauth_client,
                                      issuer=auth_server.issuer)
               for slug in ("acme", "globex")}
    auth_server.set_access_ttl(3600)
    auth_server.clear_events()
    protected.verifier.clear()
    app = OAuthApp(browser, live, seeded, auth_server, protected, servers)
    try:
        yield app
    finally:
        app.close()
        auth_server.set_access_ttl(3600)


def _refused(page, code: str) -> None:
    expect(page.get_by_role("heading", name="Authorization not completed")).to_be_visible()
    expect(page.locator("code.refusal-code")).to_have_text(code)


# ------------------------------------------------------------------------------------------------
# Tests
# ------------------------------------------------------------------------------------------------


def test_alice_connects_answers_a_round_and_the_server_sees_alice(oauth):
    page = oauth.sign_in("alice")
    oauth.open_server(page)
    expect(page.get_by_text("Connect to see this server's tools.")).to_be_visible()
    assert oauth.protected.verifier.usernames() == []  # nothing was sent with a token
    screenshot(page, "oauth-connect.png")
    oauth.connect_button(page).click()
    expect(page.locator("p.connect-explainer code.server-origin")).to_have_text(
        oauth.protected.handle.url.rsplit("/mcp", 1)[0])
    screenshot(page, "oauth-interstitial.png")
    oauth.continue_to_as(page)
    oauth.sign_in_at_as(page, "alice")
    oauth.consent(page)
    expect(page).to_have_url(re.compile(re.escape(f"{oauth.live.url}/mcp/servers/{oauth.servers['acme'].pk}/") + "$"))
    expect(page.locator("ul.messages li")).to_have_text(f"Connected to {SERVER}.")
    expect(page.locator("p.connected code.authorization-origin")).to_have_text(oauth.auth_server.issuer)

    op_id = oauth.call(page, "confirm_as_me", {"note": "release-7"})
    card = oauth.card(page)
    expect(card).to_be_visible()
    expect(card.locator(".server-message")).to_have_text("Confirm the note 'release-7'?")
    card.get_by_label("Confirm").check()
    oauth.accept(page)
    expect(oauth.result(page)).to_have_text("Confirmed release-7 for alice.")
    assert op_id in page.url
    screenshot(page, "oauth-result.png")

    # Only alice's token reached the MCP server; the AS saw one PKCE (S256) flow with `resource`.
    assert set(oauth.protected.verifier.usernames()) == {"alice"}
    events = oauth.auth_server.events()
    authorize = [e for e in events if e["kind"] == "authorize"]
    assert {tuple(e["query"].get("code_challenge_method", [])) for e in authorize} == {("S256",)}
    assert all(e["query"]["resource"] == [oauth.protected.url] for e in authorize)
    assert authorize[-1]["location"]["origin"] == oauth.live.url
    assert authorize[-1]["location"]["names"] == ["code", "iss", "state"]
    (token,) = [e for e in events if e["kind"] == "token"]
    assert (token["grant_type"], token["username"], token["status"]) == ("authorization_code", "alice", 200)
    assert token["has_code_verifier"] and token["resource"] == [oauth.protected.url]
    assert token["client_id"] == oauth.servers["acme"].oauth_client_id

    # Stored sealed, for alice, server and tenant only.
    conn = oauth.connection("alice")
    tokens = oauth.stored_tokens("alice")
    assert tokens["access_token"] not in conn.tokens_sealed
    assert oauth.auth_server.introspect(tokens["access_token"])["username"] == "alice"
    assert conn.issuer == oauth.auth_server.issuer
    from mrtrweb.authz.models import OAuthConnection

    assert OAuthConnection.objects.count() == 1


def test_carol_and_bob_connect_on_their_own(oauth):
    alice = oauth.sign_in("alice")
    oauth.open_server(alice)
    oauth.connect(alice, "alice")

    carol = oauth.sign_in("carol")  # same tenant, same server: alice's connection is not hers
    oauth.open_server(carol)
    expect(oauth.connect_button(carol)).to_be_visible()
    expect(carol.get_by_text("Connect to see this server's tools.")).to_be_visible()
    expect(carol.locator("p.connected")).to_have_count(0)

    oauth.protected.verifier.clear()
    bob = oauth.sign_in("bob")
    oauth.open_server(bob)
    expect(oauth.connect_button(bob)).to_be_visible()
    oauth.connect(bob, "bob")
    oauth.call(bob, "confirm_as_me", {"note": "n2"})
    expect(oauth.card(bob)).to_be_visible()
    oauth.card(bob).get_by_label("Confirm").check()
    oauth.accept(bob)
    expect(oauth.result(bob)).to_have_text("Confirmed n2 for bob.")
    assert set(oauth.protected.verifier.usernames()) == {"bob"}
    assert oauth.stored_tokens("bob", "globex")["access_token"] != oauth.stored_tokens("alice")["access_token"]


def test_an_expired_access_token_is_refreshed_without_the_person(oauth, settings):
    settings.MRTRWEB = {**settings.MRTRWEB, "OAUTH_REFRESH_MARGIN_S": 1}
    oauth.auth_server.set_access_ttl(2)
    page = oauth.sign_in("alice")
    oauth.open_server(page)
    oauth.connect(page, "alice")
    oauth.auth_server.set_access_ttl(3600)
    before = oauth.stored_tokens("alice")
    family = oauth.connection("alice").family
    time.sleep(2.2)  # expired here, and at the AS:
    assert oauth.auth_server.introspect(before["access_token"])["active"] is False
    oauth.auth_server.clear_events()
    visited: list[str] = []
    page.on("framenavigated", lambda frame: visited.append(frame.url))

    oauth.open_server(page)
    oauth.call(page, "whoami")
    expect(oauth.result(page)).to_have_text("You are alice.")
    assert not [u for u in visited if u.startswith(oauth.auth_server.issuer)]  # no page of the AS
    token_events = oauth.auth_server.events("token")
    assert [(e["grant_type"], e["username"], e["status"]) for e in token_events] == [("refresh_token", "alice", 200)]
    after = oauth.stored_tokens("alice")
    assert after["access_token"] != before["access_token"]
    conn = oauth.connection("alice")
    assert conn.family == family and conn.refreshed_at is not None


def test_disconnect_revokes_and_the_next_call_asks_to_connect(oauth):
    page = oauth.sign_in("alice")
    oauth.open_server(page)
    oauth.connect(page, "alice")
    tokens = oauth.stored_tokens("alice")
    held_at_as = oauth.auth_server.tokens("alice")  # (earlier tests' tokens of alice live on at the AS)
    call_page = page.context.new_page()  # a call form opened while connected
    call_page.goto(page.url)
    call_page.locator("a[data-tool='whoami']").click()
    expect(call_page.get_by_role("heading", name="Call whoami")).to_be_visible()

    page.get_by_role("link", name="Connections").click()
    row = page.locator(f"table.connections tr[data-server='{oauth.servers['acme'].pk}']")
    expect(row).to_contain_text(oauth.auth_server.issuer)
    screenshot(page, "oauth-connections.png")
    row.get_by_role("button", name=f"Disconnect from {SERVER}").click()
    expect(page.locator("ul.messages li")).to_have_text(
        f"Disconnected from {SERVER}; the authorization server revoked the tokens.")
    expect(page.locator("p.no-connections")).to_have_text("You have not connected any server.")
    assert oauth.connection("alice") is None
    assert oauth.auth_server.introspect(tokens["access_token"])["active"] is False
    assert oauth.auth_server.tokens("alice") == {"access": held_at_as["access"] - 1,
                                                 "refresh": held_at_as["refresh"] - 1}
    assert oauth.auth_server.events("revoke")

    oauth.open_server(page)
    expect(oauth.connect_button(page)).to_be_visible()

    # The call form opened before: the next call asks to connect, and no token reached the server.
    oauth.protected.verifier.clear()
    call_page.get_by_role("button", name="Call tool").click()
    expect(call_page.get_by_role("alert")).to_contain_text(
        "The MCP server asks for authorization (HTTP 401): connect your account to it")
    assert oauth.protected.verifier.usernames() == []
    screenshot(call_page, "oauth-authorization-required.png")

    # Connecting again (still signed in at the AS in this browser: only the consent page) works.
    oauth.open_server(page)
    oauth.connect(page, "alice", signed_in_at_as=True)
    oauth.call(page, "whoami")
    expect(oauth.result(page)).to_have_text("You are alice.")
    assert oauth.stored_tokens("alice")["access_token"] != tokens["access_token"]


def _attacker_callback(oauth, attacker: str):
    """``attacker`` starts a flow in their browser (Connect, the interstitial), takes the
    authorization URL Continue would send them to, and approves it at the AS outside the browser
    (:func:`tests.oauth_as.person.approve`): returns ``(attacker's page, the callback URL with code,
    state and iss)``, not yet visited by anyone."""
    from tests.oauth_as.person import approve

    page = oauth.sign_in(attacker)
    tenant = "globex" if attacker == "bob" else "acme"
    page.goto(f"/mcp/servers/{oauth.servers[tenant].pk}/")
    oauth.connect_button(page).click()
    go = page.get_by_role("link", name="Continue to sign in").get_attribute("href")
    response = page.request.get(f"{oauth.live.url}{go}", max_redirects=0)  # the attacker's own session
    assert response.status == 302
    callback = approve(response.headers["location"], attacker)
    query = dict(urllib.parse.parse_qsl(urllib.parse.urlsplit(callback).query))
    assert callback.startswith(f"{oauth.live.url}/mcp/oauth/callback/?") and set(query) == {"code", "state", "iss"}
    return page, callback


def test_callback_csrf_state_reuse_and_wrong_iss_are_refused_with_nothing_stored(oauth):
    from mrtrweb.authz.models import OAuthConnection

    bob_page, url = _attacker_callback(oauth, "bob")
    # a wrong `iss` in bob's own browser: refused (RFC 9207), nothing stored
    bad_iss = re.sub(r"iss=[^&]*", "iss=" + urllib.parse.quote("http://127.0.0.1:1", safe=""), url)
    response = bob_page.goto(bad_iss)
    assert response is not None and response.status == 502
    _refused(bob_page, "authorization_failed")
    assert OAuthConnection.objects.count() == 0

    # the victim (alice, signed in to the product) is sent to bob's callback: refused, nothing stored,
    # and the state is spent: bob cannot use it afterwards either
    bob_page2, url2 = _attacker_callback(oauth, "bob")
    alice = oauth.sign_in("alice")
    response = alice.goto(url2)
    assert response is not None and response.status == 400
    _refused(alice, "state_invalid")
    screenshot(alice, "oauth-refused.png")
    response = bob_page2.goto(url2)
    assert response is not None and response.status == 400
    _refused(bob_page2, "state_invalid")
    assert OAuthConnection.objects.count() == 0
    token_grants = [e for e in oauth.auth_server.events("token") if e["grant_type"] == "authorization_code"]
    assert token_grants == []  # no code was exchanged for anyone

    # bob completes a flow of his own once; the same callback again is refused and changes nothing
    bob_page3, url3 = _attacker_callback(oauth, "bob")
    bob_page3.goto(url3)
    expect(bob_page3.locator("ul.messages li")).to_have_text(f"Connected to {SERVER}.")
    sealed = oauth.connection("bob", "globex").tokens_sealed
    response = bob_page3.goto(url3)
    assert response is not None and response.status == 400
    _refused(bob_page3, "state_invalid")
    assert OAuthConnection.objects.count() == 1
    assert oauth.connection("bob", "globex").tokens_sealed == sealed
    assert len([e for e in oauth.auth_server.events("token") if e["grant_type"] == "authorization_code"]) == 1


def test_hostile_discovery_is_refused_before_anything_is_stored(oauth, hostile):
    from mrtrweb.authz.models import OAuthClientRegistration, OAuthConnection, PendingAuthorization
    from mrtrweb.models import Tenant

    acme = Tenant.objects.get(slug="acme")
    for case in CASES:
        # a public client (no secret): what refuses each case is the outbound guard and the discovery
        # checks (a pinned secret is refused earlier still: tests/mcp/test_oauth_as_flow.py, test_issuer_pin.py)
        add_oauth_server(acme, f"Hostile {case}", hostile.url(case), ("pre-registered", ""))
    hostile.requests.clear()
    page = oauth.sign_in("alice")
    codes = {}
    for case in CASES:
        name = f"Hostile {case}"
        oauth.open_server(page, name)
        oauth.connect_button(page, name, origin=hostile.base).click()
        if case in SAME_ORIGIN_FALLBACK:  # sign-in offered at the MCP server's own origin, nowhere else
            expect(page.get_by_role("heading", name=f"Connect to {name}")).to_be_visible()
            expect(page.locator("p.connect-explainer code.authorization-origin")).to_have_text(hostile.base)
            continue
        expect(page.get_by_role("heading", name="Authorization not completed")).to_be_visible()
        codes[case] = page.locator("code.refusal-code").inner_text()
    assert codes == DETERMINED_CODES
    fallback = [f"Hostile {c}" for c in SAME_ORIGIN_FALLBACK]
    assert PendingAuthorization.objects.filter(server__name__startswith="Hostile").exclude(
        server__name__in=fallback).count() == 0
    assert OAuthConnection.objects.count() == 0
    assert OAuthClientRegistration.objects.filter(server__name__startswith="Hostile").exclude(
        server__name__in=fallback).count() == 0
    assert hostile.requests and all(host == hostile.base.removeprefix("http://") for host, _ in hostile.requests)
    assert oauth.auth_server.events("authorize") == []


def test_step_up_insufficient_scope_then_connect_and_run_again(oauth):
    page = oauth.sign_in("alice")
    oauth.open_server(page)
    oauth.connect(page, "alice")
    assert "mcp:admin" not in oauth.stored_tokens("alice")["scope"].split()
    oauth.protected.verifier.clear()
    first_op = oauth.call(page, "admin_report")
    failure = page.locator("div.auth-failure[data-code='insufficient_scope']")
    expect(failure).to_be_visible()
    failure.get_by_role("button", name="Connect and run again").click()
    expect(page.locator("p.rerun-notice")).to_be_visible()
    oauth.continue_to_as(page)
    expect(page.locator("li", has_text="Read the demo server's admin report")).to_be_visible()  # the new scope
    oauth.consent(page)  # still signed in at the AS in this browser
    expect(page).to_have_url(OP_URL)
    assert OP_URL.search(page.url).group(1) != first_op  # run again: a new operation, same arguments
    expect(oauth.result(page)).to_have_text("Admin report for alice.")
    assert "mcp:admin" in oauth.stored_tokens("alice")["scope"].split()
    assert set(oauth.protected.verifier.usernames()) == {"alice"}
