"""The two auth modes without a person: tenant credentials (:func:`static_headers_auth`) and OAuth
client credentials (:func:`client_credentials_auth`, the SDK's
``mcp.client.auth.extensions.client_credentials``; the conformance suite's
``auth/client-credentials-*`` extension scenarios)."""

from __future__ import annotations

import re
from collections.abc import Generator, Mapping
from typing import Literal

import httpx2
from mcp.client.auth.extensions.client_credentials import ClientCredentialsOAuthProvider

from ..errors import origin_of
from .storage import AuthStorage, MemoryStorage

__all__ = ["StaticHeadersAuth", "check_header", "client_credentials_auth", "private_key_jwt_auth", "static_headers_auth"]

_TOKEN = re.compile(r"^[!#$%&'*+.^_`|~0-9A-Za-z-]{1,100}$")
#: headers a tenant credential may not set (the transport's own)
_RESERVED = frozenset({"host", "content-length", "content-type", "accept", "transfer-encoding", "connection",
                       "mcp-session-id", "mcp-protocol-version", "cookie"})


def check_header(name: str, value: str) -> None:
    """Raise ``ValueError`` unless ``name: value`` is a header a tenant credential may send
    (an RFC 9110 token name, not one of the transport's own headers; a value of visible ASCII and
    spaces, at most 8,000 characters: no CR, LF or NUL)."""
    if not isinstance(name, str) or not _TOKEN.match(name):
        raise ValueError("a header name must be an HTTP token (letters, digits, - and a few signs)")
    if name.lower() in _RESERVED:
        raise ValueError(f"the header {name} is set by the MCP transport itself")
    if not isinstance(value, str) or not value or len(value) > 8000 or any(not (0x20 <= ord(c) < 0x7F) for c in value):
        raise ValueError("a header value must be 1 to 8,000 visible ASCII characters")


class StaticHeadersAuth(httpx2.Auth):
    """Adds fixed headers to requests whose origin is the MCP server's (never to another origin)."""

    def __init__(self, server_url: str, headers: Mapping[str, str]) -> None:
        for name, value in headers.items():
            check_header(name, value)
        self._origin = origin_of(server_url)
        self._headers = dict(headers)

    def auth_flow(self, request: httpx2.Request) -> Generator[httpx2.Request, httpx2.Response, None]:
        try:
            ours = origin_of(str(request.url)) == self._origin
        except ValueError:
            ours = False
        if ours:
            for name, value in self._headers.items():
                request.headers[name] = value
        yield request


def static_headers_auth(server_url: str, headers: Mapping[str, str]) -> StaticHeadersAuth:
    """The ``httpx2.Auth`` of tenant credentials: adds ``headers`` to requests to the MCP server's
    own origin only. A bearer token is ``{"Authorization": "Bearer TOKEN"}``.

    Raises:
        ValueError: a header name or value a credential may not hold (see :func:`check_header`).
    """
    return StaticHeadersAuth(server_url, headers)


def _required_issuer(issuer: str) -> str:
    if not isinstance(issuer, str) or not issuer:
        raise ValueError("client credentials need the issuer of the authorization server that issued them")
    return issuer


def client_credentials_auth(server_url: str, *, client_id: str, client_secret: str, scope: str | None,
                            issuer: str, storage: AuthStorage | None = None,
                            token_endpoint_auth_method: Literal["client_secret_basic", "client_secret_post"]
                            = "client_secret_basic") -> ClientCredentialsOAuthProvider:
    """The ``httpx2.Auth`` of OAuth client credentials (SDK ``ClientCredentialsOAuthProvider``).

    On a ``401`` it discovers (RFC 9728, RFC 8414) and requests a token with the client id and
    secret; those requests go through the connection's client, whose transport is the outbound
    guard for every origin but the MCP server's. ``issuer`` (required): the issuer identifier of
    the authorization server that issued the credentials; a token is only requested from metadata
    of that issuer (the SDK stops the flow with ``OAuthFlowError`` when the MCP server names
    another), so the secret never goes to an authorization server the MCP server chose.
    ``storage``: default a :class:`MemoryStorage` (the token lives as long as the connection).

    Raises:
        ValueError: no ``issuer``, or not an http(s) URL.
    """
    return ClientCredentialsOAuthProvider(server_url, storage or MemoryStorage(), client_id, client_secret,
                                          token_endpoint_auth_method=token_endpoint_auth_method, scope=scope,
                                          issuer=_required_issuer(issuer))


def private_key_jwt_auth(server_url: str, *, client_id: str, private_key_pem: str, issuer: str,
                         signing_algorithm: str = "RS256", scope: str | None = None,
                         storage: AuthStorage | None = None) -> ClientCredentialsOAuthProvider:
    """OAuth client credentials with ``private_key_jwt`` client authentication (RFC 7523 section 2.2;
    SDK ``PrivateKeyJWTOAuthProvider``): the assertion's ``iss`` and ``sub`` are ``client_id``, its
    ``aud`` the authorization server's issuer, signed with ``private_key_pem`` (``signing_algorithm``:
    ``RS256``, ``ES256``...). ``issuer`` (required): as for :func:`client_credentials_auth`; the
    assertion is only minted for, and sent to, that authorization server.

    Raises:
        ValueError: an unknown signing algorithm; no ``issuer``, or not an http(s) URL.
    """
    from mcp.client.auth.extensions.client_credentials import PrivateKeyJWTOAuthProvider, SignedJWTParameters

    if signing_algorithm not in ("RS256", "RS384", "RS512", "ES256", "ES384", "ES512", "PS256", "PS384", "PS512",
                                 "EdDSA"):
        raise ValueError("unsupported signing algorithm")
    params = SignedJWTParameters(issuer=client_id, subject=client_id, signing_key=private_key_pem,
                                 signing_algorithm=signing_algorithm)
    return PrivateKeyJWTOAuthProvider(server_url, storage or MemoryStorage(), client_id,
                                      params.create_assertion_provider(), scope=scope,
                                      issuer=_required_issuer(issuer))
