"""Sign-in attempts in flight count against the lockout (an authentication backend, after
django-axes' ``AxesStandaloneBackend`` and before the one that checks passwords).

django-axes judges an attempt before its password is checked and counts the failure after: a
burst of guesses sent at the same moment all pass the judgement, and the right password among
them is accepted (20 parallel guesses on PostgreSQL: 12 checked, the right one let in). Here
each attempt first takes a slot for its (user name, address) pair in the shared cache; an attempt
whose recorded failures plus the attempts in flight (itself included) exceed
``AXES_FAILURE_LIMIT`` is refused before any password is checked (it counts as a failure). So at
most ``AXES_FAILURE_LIMIT`` passwords are ever checked per pair and cool-off, however they are sent.

The slot is given back when the attempt ends (``user_login_failed`` / ``user_logged_in``, after
axes has recorded it); the pair's counter expires :data:`SLOT_TTL_S` after its latest attempt
whatever happens. A cache that cannot be reached refuses the sign-in (fails closed: no password is
checked, nothing is counted against the person): the sign-in page answers 503 "signing in is not
possible right now" (:class:`mrtrweb.runtime.outage.ServiceUnavailable`), logged in one line.
"""

from __future__ import annotations

import hashlib
import logging

from django.contrib.auth.signals import user_logged_in, user_login_failed
from django.core.cache import caches
from django.core.exceptions import PermissionDenied
from django.utils.translation import gettext_noop

from ..runtime.outage import ServiceUnavailable

logger = logging.getLogger("mrtrweb.signin")

#: cache alias holding the slots (shared by every worker: Redis in production)
CACHE_ALIAS = "default"
#: a slot's lifetime if its attempt never reports back (seconds): longer than a password check
SLOT_TTL_S = 30
_ATTR = "_mrtrweb_signin_slot"
#: the 503 page of a sign-in refused because its attempts cannot be counted
SIGN_IN_UNAVAILABLE = (gettext_noop("Signing in is not possible right now: the service that counts sign-in attempts is "
                       "unreachable. Your password was not checked and nothing was counted against you; please try "
                       "again in a moment."))


def _slot_key(username: str | None, ip_address: str | None) -> str:
    pair = f"{username or ''}\0{ip_address or ''}".encode("utf-8", "surrogatepass")
    return "mrtrweb-signin:" + hashlib.sha256(pair).hexdigest()


class SignInsInFlight:
    """Authentication backend that checks no password: it refuses an attempt beyond the limit
    (:class:`~django.core.exceptions.PermissionDenied`), refuses any attempt while the cache is
    unreachable (:class:`~mrtrweb.runtime.outage.ServiceUnavailable`: a 503 through
    :class:`~mrtrweb.middleware.FailClosedMiddleware`) or lets the next backend decide
    (returns ``None``). Needs the request (``authenticate(request, ...)``); without one, or with
    ``AXES_ENABLED = False``, it stands aside (django-axes refuses request-less calls itself).
    Requires django-axes installed and configured."""

    def authenticate(self, request, username=None, password=None, **kwargs):
        from django.conf import settings

        if request is None or not getattr(settings, "AXES_ENABLED", True):
            return None  # as axes: no request, or throttling switched off (AXES_ENABLED = False)
        from axes.handlers.proxy import AxesProxyHandler
        from axes.helpers import get_client_username, get_credentials, get_failure_limit

        credentials = get_credentials(username=username, **kwargs)
        AxesProxyHandler.update_request(request)
        key = _slot_key(get_client_username(request, credentials), request.axes_ip_address)
        cache = caches[CACHE_ALIAS]
        try:
            cache.add(key, 0, timeout=SLOT_TTL_S)
            in_flight = cache.incr(key)
            # the counter lives SLOT_TTL_S after the latest attempt (not after the first: a burst
            # must not find it expired halfway, its attempts in flight forgotten)
            cache.touch(key, SLOT_TTL_S)
        except Exception as exc:  # noqa: BLE001 -- any cache failure: refuse, never guess unthrottled
            logger.error("sign-in refused: the attempt counter is unavailable (%s)", exc.__class__.__name__)
            # not PermissionDenied: that would count as a wrong password (and lock the person out)
            raise ServiceUnavailable("cache", SIGN_IN_UNAVAILABLE) from exc
        setattr(request, _ATTR, key)
        failures = AxesProxyHandler.get_failures(request, credentials)
        if failures + in_flight > get_failure_limit(request, credentials):
            _give_back(request)
            logger.warning("sign-in refused before its password was checked: %d failures and %d attempts in "
                           "flight for one user name and address", failures, in_flight - 1)
            raise PermissionDenied("too many sign-in attempts at once")
        return None

    # No get_user(): Django's test client's force_login() (and login() without a backend) pick
    # the first backend that has one, and no session must ever name this one.


def _give_back(request) -> None:
    key = getattr(request, _ATTR, None) if request is not None else None
    if key is None:
        return
    delattr(request, _ATTR)
    try:
        caches[CACHE_ALIAS].decr(key)
    except ValueError:
        pass  # expired meanwhile
    except Exception as exc:  # noqa: BLE001 -- the slot expires by itself
        logger.warning("a sign-in slot could not be given back (%s); it expires in %ss", exc.__class__.__name__,
                       SLOT_TTL_S)


def _attempt_failed(sender, credentials=None, request=None, **kwargs) -> None:
    _give_back(request)


def _attempt_succeeded(sender, request=None, user=None, **kwargs) -> None:
    _give_back(request)


# Connected when Django loads the authentication backends (the first sign-in), so after axes'
# own receivers: a failure is recorded before its slot is given back.
user_login_failed.connect(_attempt_failed, dispatch_uid="mrtrweb.site.throttle.failed")
user_logged_in.connect(_attempt_succeeded, dispatch_uid="mrtrweb.site.throttle.succeeded")
