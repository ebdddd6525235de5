"""Following an authorization URL without a person (``mrtr_client --conformance``: the suite's
authorization server approves at once), so the suite runs the browser's code path.

:func:`follow_authorization_url` GETs the authorization URL through the outbound guard, follows at
most 5 redirects on the authorization server's own origin, and stops at the first redirect to the
flow's ``redirect_uri`` (scheme, host, port and path compared exactly): its query is the callback.
"""

from __future__ import annotations

import urllib.parse

from ..errors import origin_of
from ..outbound import OutboundPolicy, OutboundRefused, guarded_client
from .errors import OUTBOUND_REFUSED, AuthorizationFailed

__all__ = ["follow_authorization_url"]


def _same_endpoint(a: str, b: str) -> bool:
    pa, pb = urllib.parse.urlsplit(a), urllib.parse.urlsplit(b)
    try:
        return origin_of(a) == origin_of(b) and (pa.path or "/") == (pb.path or "/")
    except ValueError:
        return False


async def follow_authorization_url(url: str, *, redirect_uri: str, policy: OutboundPolicy) -> dict[str, str]:
    """The callback query (``code``, ``state``, ``iss``, ``error``...) the authorization server
    redirects to, as a flat dict (first value of each key).

    Raises:
        AuthorizationFailed: no redirect to ``redirect_uri`` (a login page, an error page, a redirect
            to another host), or the guard refused a URL (``code`` ``outbound_refused``).
    """
    current = url
    try:
        async with guarded_client(policy) as client:
            for _ in range(6):
                response = await client.get(current)
                location = response.headers.get("location")
                if response.status_code not in (301, 302, 303, 307, 308) or not location:
                    raise AuthorizationFailed(
                        f"the authorization server did not redirect back (HTTP {response.status_code})")
                target = urllib.parse.urljoin(current, location)
                if _same_endpoint(target, redirect_uri):
                    query = urllib.parse.parse_qs(urllib.parse.urlsplit(target).query, keep_blank_values=True)
                    return {key: values[0] for key, values in query.items()}
                if origin_of(target) != origin_of(url):
                    raise AuthorizationFailed("the authorization server redirected to another host")
                current = target
    except OutboundRefused as exc:
        raise AuthorizationFailed(f"an authorization request was refused: {exc.reason}", code=OUTBOUND_REFUSED) from None
    except ValueError:
        raise AuthorizationFailed("the authorization server redirected to an unusable URL") from None
    raise AuthorizationFailed("the authorization server redirected too often")
