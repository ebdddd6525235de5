"""Following an authorization URL without a person (``mrtr_client --conformance``: the suite's
authorization server approves at once), so the suite runs the browser's code path.

:func:`follow_authorization_url` GETs the authorization URL through the outbound guard, follows at
most :data:`MAX_HOPS` redirects on the authorization server's own origin, and stops at the first
redirect to the flow's ``redirect_uri`` (scheme, host, port and path compared exactly, OAuth 2.1
section 4.1.1): its query is the callback; the redirect URI itself is never fetched.
"""

from __future__ import annotations

import urllib.parse
from typing import Final

from ..errors import origin_of
from ..outbound import OutboundPolicy, OutboundRefused, guarded_client
from .errors import OUTBOUND_REFUSED, AuthorizationFailed

__all__ = ["AUTHORIZATION_NEEDS_PERSON", "MAX_HOPS", "follow_authorization_url"]

#: the code of an authorization server that shows a page (sign in, consent) instead of redirecting back
AUTHORIZATION_NEEDS_PERSON: Final = "authorization_needs_person"
#: redirects followed inside the authorization server's origin before the one to the redirect URI
MAX_HOPS: Final = 5
_REDIRECTS = (301, 302, 303, 307, 308)


def _is_redirect_uri(location: str, redirect_uri: str) -> bool:
    got, want = urllib.parse.urlsplit(location), urllib.parse.urlsplit(redirect_uri)
    return (got.scheme, got.netloc, got.path) == (want.scheme, want.netloc, want.path)


async def follow_authorization_url(url: str, *, redirect_uri: str, policy: OutboundPolicy) -> dict[str, str]:
    """The callback query (``code``, ``state``, ``iss``, ``error``...) the authorization server
    redirects to, as a dict (str -> str).

    Raises:
        AuthorizationFailed: ``authorization_needs_person`` (an answer that is not a redirect: a
            login or consent page, an error page); ``authorization_failed`` (a redirect to another
            host, too many redirects, a redirect URI with a fragment, a parameter given twice --
            RFC 6749 section 3.1 -- or an unusable URL); ``outbound_refused`` (the guard refused a URL).
    """
    current = url
    try:
        async with guarded_client(policy) as client:
            for _ in range(MAX_HOPS + 1):
                response = await client.get(current)
                location = response.headers.get("location")
                if response.status_code not in _REDIRECTS or not location:
                    raise AuthorizationFailed(
                        f"the authorization server answered HTTP {response.status_code} instead of redirecting "
                        "back: a person has to sign in; connect to this server in the browser",
                        code=AUTHORIZATION_NEEDS_PERSON)
                target = urllib.parse.urljoin(current, location)
                if _is_redirect_uri(target, redirect_uri):
                    parts = urllib.parse.urlsplit(target)
                    pairs = urllib.parse.parse_qsl(parts.query, keep_blank_values=True)
                    query = dict(pairs)
                    if parts.fragment or len(query) != len(pairs):
                        raise AuthorizationFailed("the authorization response is malformed (a fragment, or a "
                                                  "parameter given twice)")
                    return query
                if origin_of(target) != origin_of(url):
                    raise AuthorizationFailed("the authorization server redirected to another host")
                current = target
    except OutboundRefused as exc:
        raise AuthorizationFailed(f"an authorization request was refused: {exc.reason}", code=OUTBOUND_REFUSED) from None
    except ValueError:
        raise AuthorizationFailed("the authorization server redirected to an unusable URL") from None
    raise AuthorizationFailed("the authorization server redirected too often")
