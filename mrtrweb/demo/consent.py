"""The demo authorization server's sign-in and consent page (see :mod:`mrtrweb.demo.oauth`).

``GET /consent?request=ID`` shows, for the waiting :class:`~mrtrweb.demo.oauth.ConsentRequest`:
"Sign in to the demo authorization server as [account]", which client asks (its DCR
``client_name`` and id), for which scopes and resource, and where the browser goes afterwards (the
redirect URI's origin), with **Approve** and **Deny**. Everything the client chose is HTML-escaped
here, on the server (a registered ``client_name`` is anyone's text).

``POST /consent`` (form: ``request``, ``csrf``, ``account``, ``decision`` = ``approve`` |
``deny``) spends the request (single use) and answers ``303`` to the client's redirect URI (with
``code`` or ``error=access_denied``, ``state``, ``iss``). The ``csrf`` field must equal both the
request's token and the cookie set with the page (``SameSite=Strict``): another site cannot
approve in a person's name. Errors are pages, never a 500: ``400`` unknown, used or expired
request, or an account the server does not have; ``403`` a missing or wrong CSRF token.
"""

from __future__ import annotations

import hmac
import html
from typing import TYPE_CHECKING, Any
from urllib.parse import urlsplit

from starlette.requests import Request
from starlette.responses import HTMLResponse, RedirectResponse, Response
from starlette.routing import Route

if TYPE_CHECKING:
    from .oauth import ConsentRequest, DemoProvider

MAX_FORM_BYTES = 4096
HEADERS = {"Content-Security-Policy": "default-src 'none'; style-src 'unsafe-inline'; frame-ancestors 'none'",
           "X-Frame-Options": "DENY", "Cache-Control": "no-store", "Referrer-Policy": "no-referrer",
           "X-Content-Type-Options": "nosniff"}
STYLE = ("body{font-family:system-ui,sans-serif;max-width:34rem;margin:3rem auto;padding:0 1rem;color:#222}"
         "h1{font-size:1.3rem}dt{font-weight:600;margin-top:.6rem}dd{margin:0;overflow-wrap:anywhere}"
         "button{font-size:1rem;padding:.4rem 1.2rem;margin-right:.6rem}.note{color:#555;font-size:.9rem}")


def _cookie_name(request_id: str) -> str:
    return "mrtrweb_demo_as_csrf_" + "".join(c for c in request_id[:16] if c.isalnum())


def _page(title: str, body: str, status: int = 200) -> HTMLResponse:
    doc = (f"<!doctype html><html lang=\"en\"><head><meta charset=\"utf-8\"><title>{html.escape(title)}</title>"
           f"<style>{STYLE}</style></head><body>{body}</body></html>")
    return HTMLResponse(doc, status_code=status, headers=HEADERS)


def _problem(message: str, status: int) -> HTMLResponse:
    return _page("Demo authorization server", f"<h1>Demo authorization server</h1><p role=\"alert\">"
                                              f"{html.escape(message)}</p>", status)


def _origin(url: str) -> str:
    parts = urlsplit(url)
    return f"{parts.scheme}://{parts.netloc}"


def render_consent(provider: DemoProvider, request_id: str, consent: ConsentRequest) -> str:
    """The consent page's body (every client-chosen text escaped)."""
    e = html.escape
    client = consent.client
    name = client.client_name or "(no name)"
    scopes = " ".join(consent.params.scopes or []) or "(none)"
    accounts = "".join(f'<option value="{e(a)}">{e(a)}</option>' for a in provider.accounts)
    return (
        "<h1>Sign in to the demo authorization server</h1>"
        f"<p class=\"note\">This is the demo's own authorization server at {e(provider.issuer)} "
        "(in memory, development only). Its accounts have no password.</p>"
        "<form method=\"post\" action=\"/consent\">"
        f"<input type=\"hidden\" name=\"request\" value=\"{e(request_id)}\">"
        f"<input type=\"hidden\" name=\"csrf\" value=\"{e(consent.csrf)}\">"
        "<p><label for=\"account\">Sign in as</label> "
        f"<select id=\"account\" name=\"account\">{accounts}</select></p>"
        "<dl>"
        f"<dt>Application</dt><dd>{e(name)} <span class=\"note\">(client id {e(client.client_id or '')})</span></dd>"
        f"<dt>Asks for the scopes</dt><dd>{e(scopes)}</dd>"
        f"<dt>For the MCP server</dt><dd>{e(consent.params.resource or '(not named)')}</dd>"
        f"<dt>Then your browser goes back to</dt><dd>{e(_origin(str(consent.params.redirect_uri)))}</dd>"
        "</dl><p>"
        "<button type=\"submit\" name=\"decision\" value=\"approve\">Approve</button>"
        "<button type=\"submit\" name=\"decision\" value=\"deny\">Deny</button>"
        "</p></form>")


def consent_routes(provider: DemoProvider) -> list[Route]:
    """The ``/consent`` route (GET shows, POST answers) for ``provider``."""

    async def show(request: Request) -> Response:
        request_id = request.query_params.get("request", "")
        consent = provider.peek_consent(request_id) if 0 < len(request_id) <= 100 else None
        if consent is None:
            return _problem("This sign-in request is unknown, used or expired. Start again from the application.",
                            400)
        response = _page("Sign in to the demo authorization server", render_consent(provider, request_id, consent))
        response.set_cookie(_cookie_name(request_id), consent.csrf, max_age=300, path="/consent", httponly=True,
                            samesite="strict")
        return response

    async def answer(request: Request) -> Response:
        length = request.headers.get("content-length") or ""
        if not length.isdigit() or int(length) > MAX_FORM_BYTES:
            return _problem("The form is too large or its length is not given.", 400)
        try:
            form: Any = await request.form(max_files=0, max_fields=8)
        except Exception:  # a malformed body: the form parser's own errors
            return _problem("The form could not be read.", 400)
        request_id = str(form.get("request") or "")
        consent = provider.peek_consent(request_id) if 0 < len(request_id) <= 100 else None
        if consent is None:
            return _problem("This sign-in request is unknown, used or expired. Start again from the application.",
                            400)
        sent, cookie = str(form.get("csrf") or ""), request.cookies.get(_cookie_name(request_id), "")
        if not (hmac.compare_digest(sent, consent.csrf) and hmac.compare_digest(cookie, consent.csrf)):
            return _problem("This form did not come from the sign-in page (CSRF check failed).", 403)
        decision, account = form.get("decision"), form.get("account")
        if decision not in ("approve", "deny") or (decision == "approve" and account not in provider.accounts):
            return _problem("Choose an account of this server, then Approve or Deny.", 400)
        if provider.take_consent(request_id) is None:  # spent by a concurrent answer
            return _problem("This sign-in request was already answered.", 400)
        if decision == "deny":
            target = provider.deny_redirect(consent.params)
        else:
            target = provider.approve_redirect(consent.client, consent.params, str(account))
        response = RedirectResponse(target, status_code=303, headers=HEADERS)
        response.delete_cookie(_cookie_name(request_id), path="/consent")
        return response

    return [Route("/consent", show, methods=["GET"]), Route("/consent", answer, methods=["POST"])]
