"""A tenant admin's (and the Django admin's) authorization settings of one MCP server (issue 13, item 1).

:class:`ServerAuthForm` (a ``ModelForm`` of :class:`~mrtrweb.models.McpServer`): the auth mode,
the OAuth client id and scope, and the **write-only** secrets: a tenant bearer token, or named
tenant headers (``Name: value`` lines; names against :data:`HEADER_NAME`, protocol headers
refused), or a pre-registered OAuth client secret. A stored secret is never put back into the
page (not even the value just posted with an error): an empty field keeps it, "Remove the stored
secret" removes it, a secret that does not fit the chosen mode is removed. ``save()`` seals the
secret (:func:`mrtrweb.authz.crypto.seal`; shapes: tenant ``{"bearer": str}`` or
``{"headers": {name: value}}``, OAuth ``{"client_secret": str}``) into ``auth_secret_sealed`` and
sets ``auth_secret_digest`` (:func:`secret_digest`), so the server's ``config_digest()`` changes
when a secret does.

The **issuer** (``oauth_issuer``: the issuer identifier of the authorization server that issued
the client id and secret) is required for client credentials, and for OAuth per user whenever a
client secret is stored or entered: the secret is only ever sent to that authorization server,
never to one the MCP server names. It is an ``https`` URL (``http`` only to loopback when
``MRTRWEB["OUTBOUND_ALLOW_HTTP_LOOPBACK"]`` is on) without user info, query or fragment (RFC 8414
section 2). A missing one may be looked up (``issuer_lookup``: a callable returning the issuer the
server's metadata names, or ``None``): the error then suggests it, for the admin to confirm.

Errors: form errors with stable codes (``secret_needed``, ``secret_not_for_mode``,
``bearer_or_headers``, ``header_name``, ``header_value``, ``too_many_headers``, ``bad_token``,
``client_id_needed``, ``bad_scope``, ``issuer_needed``, ``bad_issuer``); never a 500.
"""

from __future__ import annotations

import json
import logging
import re
import urllib.parse
from collections.abc import Callable
from typing import Any, Final

from django import forms
from django.utils.crypto import salted_hmac
from django.utils.translation import gettext_lazy as _

from .. import conf
from ..models import McpServer
from . import crypto

logger = logging.getLogger("mrtrweb.authz.forms")

__all__ = ["HEADER_NAME", "ServerAuthForm", "check_issuer", "secret_digest"]

#: a tenant header's name: an HTTP token of letters, digits and ``-`` (at most 64)
HEADER_NAME: Final = re.compile(r"^[A-Za-z0-9][A-Za-z0-9-]{0,63}\Z")
#: headers the MCP transport itself sets, or that would change what a request means on the wire
PROTOCOL_HEADERS: Final = frozenset({
    "accept", "accept-encoding", "connection", "content-encoding", "content-length", "content-type", "expect",
    "host", "keep-alive", "last-event-id", "mcp-protocol-version", "mcp-session-id", "proxy-authorization",
    "proxy-connection", "te", "trailer", "transfer-encoding", "upgrade"})
MAX_HEADERS: Final = 20
MAX_SECRET_CHARS: Final = 4096
#: visible ASCII and spaces inside (a header value); no control character, no line break
_HEADER_VALUE = re.compile(r"^[\x21-\x7e](?:[\x20-\x7e]*[\x21-\x7e])?\Z")
#: a bearer token or client secret: visible ASCII, no space
_TOKEN = re.compile(r"^[\x21-\x7e]+\Z")
#: one scope token (RFC 6749, section 3.3)
_SCOPE_TOKEN = re.compile(r"^[\x21\x23-\x5b\x5d-\x7e]+\Z")
DIGEST_SALT: Final = "mrtrweb.authz.secret"

OAUTH_MODES: Final = frozenset({"oauth_user", "oauth_client"})
#: the authorization modes each field of :class:`ServerAuthForm` is read for (a field not named here
#: is read whatever the mode); a stored secret's "Remove" shows whatever the mode
FIELD_MODES: Final = {
    "oauth_client_id": ("oauth_user", "oauth_client"), "oauth_issuer": ("oauth_user", "oauth_client"),
    "oauth_scope": ("oauth_user", "oauth_client"), "oauth_client_secret": ("oauth_user", "oauth_client"),
    "bearer_token": ("tenant",), "headers": ("tenant",),
    "clear_secret": ("tenant", "oauth_user", "oauth_client"),
}


def _loopback(host: str) -> bool:
    return host == "localhost" or host == "::1" or bool(re.fullmatch(r"127(?:\.\d{1,3}){3}", host))


def check_issuer(value: str) -> str:
    """``value`` if it is an issuer identifier this product sends a secret to: an ``https`` URL
    (``http`` only to a loopback host with ``OUTBOUND_ALLOW_HTTP_LOOPBACK``), with a host, no user
    info, query or fragment (RFC 8414 section 2), at most 500 characters of visible ASCII.

    Raises:
        forms.ValidationError: ``bad_issuer``.
    """
    bad = forms.ValidationError(
        _("The issuer is the authorization server's https URL (e.g. https://auth.example.com), without query or "
          "fragment."), code="bad_issuer")
    if len(value) > 500 or not _TOKEN.match(value):
        raise bad
    try:
        parts = urllib.parse.urlsplit(value)
        host = (parts.hostname or "").lower()
        parts.port  # noqa: B018 - raises on a bad port
    except ValueError:
        raise bad from None
    if not host or parts.username is not None or parts.password is not None or parts.query or parts.fragment \
            or "?" in value or "#" in value:
        raise bad
    if parts.scheme == "https":
        return value
    if parts.scheme == "http" and _loopback(host) and conf.get("OUTBOUND_ALLOW_HTTP_LOOPBACK"):
        return value
    raise bad


def secret_digest(value: Any) -> str:
    """``hmac-sha256:<hex>`` of a secret's JSON (sorted keys; keyed by ``SECRET_KEY``); ``""`` for
    no secret. Changes when the secret does; never reveals it (not even its length)."""
    if not value:
        return ""
    text = json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    return "hmac-sha256:" + salted_hmac(DIGEST_SALT, text, algorithm="sha256").hexdigest()


class WriteOnlyTextarea(forms.Textarea):
    """A textarea that never renders a value (neither a stored secret nor the one just posted)."""

    def format_value(self, value: Any) -> None:
        return None


def _secret_field(label: str, help_text: str) -> forms.CharField:
    return forms.CharField(label=label, required=False, strip=True, max_length=MAX_SECRET_CHARS,
                           widget=forms.PasswordInput(render_value=False, attrs={"autocomplete": "off"}),
                           help_text=help_text)


class ServerAuthForm(forms.ModelForm):
    """See the module doc. Bound to an existing server (``instance``)."""

    bearer_token = _secret_field(_("Tenant bearer token"),
                                 _("Sent as “Authorization: Bearer …” to this server's origin only, for every "
                                   "member. Write-only: leave empty to keep the stored one."))
    headers = forms.CharField(
        label=_("Tenant headers"), required=False, max_length=MAX_HEADERS * (MAX_SECRET_CHARS + 70),
        widget=WriteOnlyTextarea(attrs={"rows": 3, "cols": 70, "autocomplete": "off", "spellcheck": "false"}),
        help_text=_("Instead of a bearer token: one “Name: value” per line (e.g. X-Api-Key: …), sent to this "
                    "server's origin only. Write-only: leave empty to keep the stored ones."))
    oauth_client_secret = _secret_field(_("OAuth client secret"),
                                        _("With a pre-registered client id (client credentials need one). "
                                          "Write-only: leave empty to keep the stored one."))
    clear_secret = forms.BooleanField(label=_("Remove the stored secret"), required=False)

    class Meta:
        model = McpServer
        fields = ["auth_mode", "oauth_client_id", "oauth_issuer", "oauth_scope"]

    def __init__(self, *args: Any, issuer_lookup: Callable[[], str | None] | None = None, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.issuer_lookup = issuer_lookup
        self.new_secret: dict[str, Any] | None = None  # None: keep; {}: remove; else: the new secret
        stored = self.stored_secret()
        if stored:
            what = (_("A bearer token is stored.") if "bearer" in stored
                    else _("Headers are stored: %(names)s.") % {"names": ", ".join(sorted(stored.get("headers", {})))}
                    if "headers" in stored else _("A client secret is stored.") if "client_secret" in stored
                    else _("A secret is stored."))
            self.fields["clear_secret"].help_text = what
        else:
            self.fields["clear_secret"].help_text = _("No secret is stored.")
        # which authorization each field belongs to: the settings page's script (settings.js) hides the
        # others while that one is chosen; without the script every field shows and the form works as it is
        for name, modes in FIELD_MODES.items():
            if name in self.fields and not (name == "clear_secret" and stored):
                self.fields[name].widget.attrs["data-auth-modes"] = " ".join(modes)

    def stored_secret(self) -> dict[str, Any]:
        """The server's stored secret (``{}`` when none, or when no configured key opens it)."""
        sealed = getattr(self.instance, "auth_secret_sealed", "")
        try:
            value = crypto.unseal(sealed) if sealed else None
        except crypto.SecretUnreadable:
            logger.warning("server %s: its stored secret cannot be opened with the configured keys",
                           getattr(self.instance, "pk", None))
            return {}
        return value if isinstance(value, dict) else {}

    def clean_bearer_token(self) -> str:
        value = self.cleaned_data.get("bearer_token") or ""
        if value and not _TOKEN.match(value):
            raise forms.ValidationError(_("A bearer token is visible ASCII characters without spaces."), code="bad_token")
        return value

    def clean_oauth_client_secret(self) -> str:
        value = self.cleaned_data.get("oauth_client_secret") or ""
        if value and not _TOKEN.match(value):
            raise forms.ValidationError(_("A client secret is visible ASCII characters without spaces."),
                                        code="bad_token")
        return value

    def clean_oauth_client_id(self) -> str:
        value = (self.cleaned_data.get("oauth_client_id") or "").strip()
        if value and not _TOKEN.match(value):
            raise forms.ValidationError(_("A client id is visible ASCII characters without spaces."), code="bad_token")
        return value

    def clean_oauth_issuer(self) -> str:
        value = (self.cleaned_data.get("oauth_issuer") or "").strip()
        return check_issuer(value) if value else ""

    def _issuer_needed(self, why: str) -> None:
        message = _("%(why)s need the issuer of the authorization server that issued the client id and secret: "
                    "the secret is only ever sent there.") % {"why": why}
        suggested = None
        if self.issuer_lookup is not None:
            try:
                suggested = self.issuer_lookup()
            except Exception:  # noqa: BLE001 - a suggestion only
                logger.info("server %s: issuer lookup failed", getattr(self.instance, "pk", None))
        if suggested:
            message += " " + _("This server names %(issuer)s: enter it if that is the authorization server that "
                               "issued them.") % {"issuer": suggested[:500]}
        self.add_error("oauth_issuer", forms.ValidationError(message, code="issuer_needed"))

    def clean_oauth_scope(self) -> str:
        tokens = (self.cleaned_data.get("oauth_scope") or "").split()
        if any(not _SCOPE_TOKEN.match(t) for t in tokens):
            raise forms.ValidationError(_("Scopes are space-separated tokens of visible ASCII characters (no “\"” or "
                                          "“\\”)."), code="bad_scope")
        return " ".join(dict.fromkeys(tokens))

    def clean_headers(self) -> dict[str, str]:
        text = self.cleaned_data.get("headers") or ""
        out: dict[str, str] = {}
        for number, line in enumerate(text.splitlines(), start=1):
            if not line.strip():
                continue
            name, sep, value = line.partition(":")
            name, value = name.strip(), value.strip()
            if not sep or not HEADER_NAME.match(name) or name.lower() in PROTOCOL_HEADERS:
                raise forms.ValidationError(
                    _("Line %(n)s: a header is “Name: value”, its name letters, digits and “-” (not a protocol "
                      "header such as Host or Content-Type)."), code="header_name", params={"n": number})
            if not _HEADER_VALUE.match(value) or len(value) > MAX_SECRET_CHARS:
                raise forms.ValidationError(_("Line %(n)s: a header value is visible ASCII characters (spaces inside)."),
                                            code="header_value", params={"n": number})
            if name.lower() in {k.lower() for k in out}:
                raise forms.ValidationError(_("Line %(n)s: this header is named twice."), code="header_name",
                                            params={"n": number})
            out[name] = value
        if len(out) > MAX_HEADERS:
            raise forms.ValidationError(_("At most %(max)s headers."), code="too_many_headers",
                                        params={"max": MAX_HEADERS})
        return out

    def clean(self) -> dict[str, Any]:
        cleaned = super().clean()
        if self.errors:
            return cleaned
        mode = cleaned.get("auth_mode")
        bearer, headers = cleaned.get("bearer_token"), cleaned.get("headers")
        client_secret, clear = cleaned.get("oauth_client_secret"), cleaned.get("clear_secret")
        stored = {} if clear else self.stored_secret()
        if mode != "tenant" and (bearer or headers):
            self.add_error("bearer_token" if bearer else "headers", forms.ValidationError(
                _("Tenant credentials are for the mode “Tenant credentials”."), code="secret_not_for_mode"))
        if mode not in OAUTH_MODES and client_secret:
            self.add_error("oauth_client_secret", forms.ValidationError(
                _("A client secret is for the OAuth modes."), code="secret_not_for_mode"))
        if self.errors:
            return cleaned
        new: dict[str, Any] | None = None
        if mode == "tenant":
            if bearer and headers:
                self.add_error("headers", forms.ValidationError(_("Enter a bearer token or headers, not both."),
                                                                code="bearer_or_headers"))
            elif bearer or headers:
                new = {"bearer": bearer} if bearer else {"headers": headers}
            elif not ("bearer" in stored or "headers" in stored):
                self.add_error("bearer_token", forms.ValidationError(
                    _("Tenant credentials need a bearer token or headers."), code="secret_needed"))
        elif mode in OAUTH_MODES:
            client_id = cleaned.get("oauth_client_id")
            if client_secret:
                new = {"client_secret": client_secret}
            if (client_secret or (mode == "oauth_client" and "client_secret" in stored)) and not client_id:
                self.add_error("oauth_client_id", forms.ValidationError(
                    _("A client secret needs the client id it was issued with."), code="client_id_needed"))
            elif mode == "oauth_client" and not client_id:
                self.add_error("oauth_client_id", forms.ValidationError(
                    _("Client credentials need a client id and its secret."), code="client_id_needed"))
            elif mode == "oauth_client" and not client_secret and "client_secret" not in stored:
                self.add_error("oauth_client_secret", forms.ValidationError(
                    _("Client credentials need a client id and its secret."), code="secret_needed"))
            if not cleaned.get("oauth_issuer") and "oauth_issuer" not in self.errors:
                if mode == "oauth_client":
                    self._issuer_needed(_("Client credentials"))
                elif client_secret or "client_secret" in stored:
                    self._issuer_needed(_("A pre-registered client secret and its client id"))
        fits = (mode == "tenant" and ("bearer" in stored or "headers" in stored)) or (
            mode in OAUTH_MODES and "client_secret" in stored)
        if new is None and (clear or not fits) and self.stored_secret():
            new = {}  # removed, or no longer fitting the mode
        self.new_secret = new
        return cleaned

    def save(self, commit: bool = True) -> Any:
        server = super().save(commit=False)
        if self.new_secret is not None:
            server.auth_secret_sealed = crypto.seal(self.new_secret) if self.new_secret else ""
            server.auth_secret_digest = secret_digest(self.new_secret)
        if commit:
            server.save()
        logger.info("server %s: authorization settings saved (mode %s; secret %s)", server.pk, server.auth_mode,
                    "kept" if self.new_secret is None else "replaced" if self.new_secret else "removed")
        return server
