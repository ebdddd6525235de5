"""System checks of the authorization settings (``MRTRWEB[...]``, docs/deploy/authorization.md).

=================  ==========================================================================
id                 what is wrong
=================  ==========================================================================
``mrtrweb.E023``   ``OAUTH_REDIRECT_URI`` is not an absolute ``https`` URL (``http`` only to a
                   loopback host) without userinfo or fragment
``mrtrweb.E024``   ``OAUTH_CLIENT_METADATA_URL`` is not an ``https`` URL with a path (it is the
                   client id authorization servers fetch: the SDK's ``is_valid_client_metadata_url``)
``mrtrweb.E025``   ``OUTBOUND_ALLOW_HOSTS`` is not a list of host names (a string would allow its
                   letters), or ``OUTBOUND_ALLOW_HTTP_LOOPBACK`` is not a boolean
``mrtrweb.E026``   ``OAUTH_CLIENT_NAME`` is not a non-empty string
``mrtrweb.W016``   (deploy) ``OAUTH_CLIENT_METADATA_URL`` is set but ``OAUTH_REDIRECT_URI`` is not: the
                   published document's ``redirect_uris`` would follow each request's Host header
=================  ==========================================================================
"""

from __future__ import annotations

import ipaddress
import urllib.parse

from django.core.checks import Error, Tags, Warning, register

from .. import conf

_LOOPBACK_NAMES = {"localhost"}


def _loopback(host: str) -> bool:
    if host in _LOOPBACK_NAMES:
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


def _redirect_problem(value: object) -> str:
    if not isinstance(value, str) or not value:
        return "it must be a URL string"
    try:
        parts = urllib.parse.urlsplit(value)
        parts.port  # noqa: B018 - raises on a bad port
    except ValueError:
        return "it does not parse as a URL"
    host = (parts.hostname or "").lower()
    if not host:
        return "it has no host"
    if parts.username or parts.password:
        return "it must not carry credentials"
    if parts.fragment or value.endswith("#"):
        return "it must not have a fragment (RFC 6749 section 3.1.2)"
    if parts.scheme == "https" or (parts.scheme == "http" and _loopback(host)):
        return ""
    return "it must be https (plain http only to a loopback host, for development)"


@register(Tags.security)
def check_authorization_settings(app_configs=None, **kwargs) -> list:
    """The checks of the module doc; nothing of a value is echoed but its kind."""
    messages = []
    try:
        redirect = conf.get("OAUTH_REDIRECT_URI")
        cimd = conf.get("OAUTH_CLIENT_METADATA_URL")
        hosts = conf.get("OUTBOUND_ALLOW_HOSTS")
        loopback = conf.get("OUTBOUND_ALLOW_HTTP_LOOPBACK")
        name = conf.get("OAUTH_CLIENT_NAME")
    except Exception:  # noqa: BLE001 - mrtrweb.E001 reports a bad MRTRWEB
        return []
    if redirect is not None and (problem := _redirect_problem(redirect)):
        messages.append(Error(f'MRTRWEB["OAUTH_REDIRECT_URI"] is not usable: {problem}.',
                              hint="https://YOUR.HOST/mcp/oauth/callback/ (the view mrtrweb:oauth-callback)",
                              id="mrtrweb.E023"))
    if cimd is not None:
        from mcp.client.auth.utils import is_valid_client_metadata_url

        if not isinstance(cimd, str) or not is_valid_client_metadata_url(cimd):
            messages.append(Error('MRTRWEB["OAUTH_CLIENT_METADATA_URL"] must be an https URL with a path.',
                                  hint="https://YOUR.HOST/mcp/oauth/client-metadata.json", id="mrtrweb.E024"))
    if not isinstance(hosts, (list, tuple)) or not all(isinstance(h, str) and h.strip() for h in hosts):
        messages.append(Error('MRTRWEB["OUTBOUND_ALLOW_HOSTS"] must be a list of host names.',
                              hint='e.g. ["auth.internal.example"]', id="mrtrweb.E025"))
    if not isinstance(loopback, bool):
        messages.append(Error('MRTRWEB["OUTBOUND_ALLOW_HTTP_LOOPBACK"] must be True or False.', id="mrtrweb.E025"))
    if not isinstance(name, str) or not name.strip():
        messages.append(Error('MRTRWEB["OAUTH_CLIENT_NAME"] must be a non-empty string.', id="mrtrweb.E026"))
    return messages


@register(Tags.security, deploy=True)
def check_client_metadata_redirect(app_configs=None, **kwargs) -> list:
    """W016 (``check --deploy``): see the module doc."""
    try:
        cimd, redirect = conf.get("OAUTH_CLIENT_METADATA_URL"), conf.get("OAUTH_REDIRECT_URI")
    except Exception:  # noqa: BLE001 - mrtrweb.E001 reports a bad MRTRWEB
        return []
    if cimd and not redirect:
        return [Warning('MRTRWEB["OAUTH_CLIENT_METADATA_URL"] is set without MRTRWEB["OAUTH_REDIRECT_URI"]: the '
                        "Client ID Metadata Document would name a redirect URI built from each request's Host header.",
                        hint="Set OAUTH_REDIRECT_URI to https://YOUR.HOST/mcp/oauth/callback/", id="mrtrweb.W016")]
    return []
