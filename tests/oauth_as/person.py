"""A person at the test authorization server, without a browser (plain ``httpx2``).

:func:`approve` takes an authorization URL (as a client built it: ``response_type=code``,
``client_id``, ``redirect_uri``, PKCE ``code_challenge``, ``state``, ``resource``, ``scope``), signs
in at the AS's login page as ``username`` and presses "Authorize" on the consent page, and returns
the redirect the AS sent back (the client's callback URL with ``code``, ``state`` and ``iss``),
without following it. Used by the AS's own checks and by the headless tests.
"""

from __future__ import annotations

import re
import urllib.parse

import httpx2

from tests.oauth_as import USERS

_CSRF = re.compile(r'name="csrfmiddlewaretoken" value="([^"]+)"')
_HIDDEN = re.compile(r'<input type="hidden" name="([^"]+)" value="([^"]*)"')


class ApprovalFailed(AssertionError):
    """The AS did not redirect back with a code (its page or status is in the message)."""


def _form_fields(html: str) -> dict[str, str]:
    import html as html_mod

    return {name: html_mod.unescape(value) for name, value in _HIDDEN.findall(html)}


def approve(authorization_url: str, username: str, *, allow: bool = True, password: str | None = None) -> str:
    """Sign in as ``username`` and answer the consent page (``allow``: Authorize, else Cancel).

    Returns the ``Location`` the AS redirected to (the client's redirect URI with the response).

    Raises:
        ApprovalFailed: the login was refused or the AS answered without a redirect (e.g. an
            invalid request shown as an error page).
    """
    parts = urllib.parse.urlsplit(authorization_url)
    base = f"{parts.scheme}://{parts.netloc}"
    with httpx2.Client(base_url=base, timeout=10, follow_redirects=False) as http:
        login = http.get("/accounts/login/")
        token = _CSRF.search(login.text)
        if login.status_code != 200 or token is None:
            raise ApprovalFailed(f"no login page: {login.status_code}")
        next_path = f"{parts.path}?{parts.query}"
        done = http.post("/accounts/login/", data={
            "csrfmiddlewaretoken": token.group(1), "username": username,
            "password": password if password is not None else USERS[username], "next": next_path},
            headers={"Referer": f"{base}/accounts/login/"})
        if done.status_code != 302:
            raise ApprovalFailed(f"login as {username} refused: {done.status_code}")
        consent = http.get(next_path)
        if consent.status_code == 302:
            return consent.headers["location"]  # e.g. an error redirected to the client
        fields = _form_fields(consent.text)
        token = _CSRF.search(consent.text)
        if consent.status_code != 200 or token is None or "redirect_uri" not in fields:
            raise ApprovalFailed(f"no consent form ({consent.status_code}): {consent.text[:500]}")
        data = {**fields, "csrfmiddlewaretoken": token.group(1)}
        if allow:
            data["allow"] = "Authorize"
        answer = http.post(next_path, data=data, headers={"Referer": f"{base}{next_path}"})
        if answer.status_code != 302:
            raise ApprovalFailed(f"consent answered {answer.status_code}: {answer.text[:500]}")
        return answer.headers["location"]
