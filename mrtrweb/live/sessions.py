"""A WebSocket lives only as long as the sign-in session that opened it.

Each WebSocket joins, besides its user's group, the group of its session:
``mrtrweb.session.<digest>`` (:func:`session_group`, a keyed digest of the session key: the key
itself is never put in a group name, an event or a log line). A session ends in several ways, and
its sockets are closed with code :data:`CLOSE_CODE` in each:

* sign-out (``user_logged_out``): the session's group is told ``session.ended`` at once, on every
  worker (the channel layer);
* the user's password changed (which invalidates their other sessions through the session auth
  hash): the user's group is told ``session.check``; each socket re-validates its own session a
  moment later (:data:`CHECK_DELAY_S`) and closes when it is no longer valid (the session that
  changed the password keeps a valid hash, and its socket);
* the session flushed, deleted or expired by any other path (another sign-in on the same browser,
  ``clearsessions``, an admin deleting it, the cache evicting it): every push re-validates the
  socket's session before anything is sent (:func:`session_denial`: the session still exists,
  holds this user and a valid auth hash, its backend is still configured and gives back an active
  user -- what ``django.contrib.auth.get_user`` checks on an HTTP request, without its side
  effects), and each socket re-validates at least every :data:`RECHECK_S` seconds even when
  nothing is pushed.
"""

from __future__ import annotations

import logging
from importlib import import_module
from typing import Any, Final

from django.conf import settings
from django.contrib.auth import BACKEND_SESSION_KEY, HASH_SESSION_KEY, SESSION_KEY, load_backend
from django.contrib.auth.signals import user_logged_out
from django.db.models.signals import post_save, pre_save
from django.utils.crypto import constant_time_compare, salted_hmac

from ..runtime import outage
from . import session_read

logger = logging.getLogger("mrtrweb.sessions")
#: one line a minute for sessions that cannot be read (every socket re-checks during an outage)
_limited = outage.LogLimiter(logger)

#: the WebSocket close code of a socket whose session ended (the page reloads: sign-in page)
CLOSE_CODE: Final = 4401
#: a socket re-validates its session at least this often (seconds), pushes or not
RECHECK_S: Final = 60
#: after a password change, each socket re-validates its session this much later (seconds): the
#: session that changed it gets its new auth hash just after the save (``update_session_auth_hash``)
CHECK_DELAY_S: Final = 1.0
SIGNED_OUT, SESSION_GONE, SESSION_INVALID = "signed_out", "session_gone", "session_invalid"
#: the session could not be read **now** (the database or the cache holding it is unreachable):
#: not a session that ended. Nothing is pushed on it; its socket closes as for any outage (1011),
#: the page keeps what it shows, says live updates are paused and reconnects by itself
SESSION_UNREADABLE: Final = "session_unreadable"
#: the session is fine but its backend gives back no user (inactive or deleted): access ended, as
#: :mod:`mrtrweb.tenancy.access` says (the socket is closed with its code, 4403)
USER_ENDED: Final = "user_inactive_or_removed"


def session_group(session_key: str) -> str:
    """The Channels group of one session's sockets: a keyed digest of its key, never the key."""
    digest = salted_hmac("mrtrweb.sessions.group", session_key, algorithm="sha256").hexdigest()[:40]
    return f"mrtrweb.session.{digest}"


def session_denial(session_key: str | None, user_id: Any) -> str:
    """Why the session ``session_key`` no longer authenticates ``user_id`` (a cause constant), or
    ``""`` while it does (sync: one statement reading both where :mod:`.session_read` serves, else
    one session read and one user read, Django's own). Nothing is written."""
    if not session_key:
        return SESSION_GONE
    try:
        # the session and the user in one statement where that is what Django's calls read (.session_read)
        both = session_read.read(session_key, user_id)
        data = both.data if both is not None else import_module(settings.SESSION_ENGINE).SessionStore(session_key).load()
    except Exception as exc:  # noqa: BLE001 -- a session that cannot be read authenticates nothing
        if outage.kind(exc) is not None:  # down now, not gone: the socket pauses (fail closed: no push)
            _limited.warning("session unreadable", "a session could not be read (%s); its sockets pause until it "
                             "can be", type(exc).__name__)
            return SESSION_UNREADABLE
        logger.warning("a session could not be read (%s); its sockets are closed", type(exc).__name__)
        return SESSION_GONE
    if not data or SESSION_KEY not in data:
        return SESSION_GONE
    backend_path = data.get(BACKEND_SESSION_KEY)
    if str(data.get(SESSION_KEY)) != str(user_id) or backend_path not in settings.AUTHENTICATION_BACKENDS:
        return SESSION_INVALID
    try:
        backend = load_backend(backend_path)
        served, user = session_read.model_backend_user(backend, both.user) if both is not None else (False, None)
        if not served:
            user = backend.get_user(user_id)
    except Exception as exc:
        if outage.kind(exc) is None:
            raise
        _limited.warning("session unreadable", "a session's user could not be read (%s); its sockets pause until "
                         "it can be", type(exc).__name__)
        return SESSION_UNREADABLE
    if user is None:
        return USER_ENDED
    if hasattr(user, "get_session_auth_hash"):
        stored = data.get(HASH_SESSION_KEY) or ""
        hashes = [user.get_session_auth_hash(), *getattr(user, "get_session_auth_fallback_hash", lambda: [])()]
        if not stored or not any(constant_time_compare(stored, h) for h in hashes):
            return SESSION_INVALID
    return ""


async def tell(group: str, message: dict[str, Any]) -> None:
    """Send ``message`` to ``group`` on the channel layer (a failure is logged, never raised:
    each push re-validates the session anyway; :mod:`mrtrweb.runtime.push`)."""
    from ..runtime import push

    await push.group_send(group, message, what="session")


def _signed_out(sender: Any, request: Any = None, user: Any = None, **kwargs: Any) -> None:
    from ..runtime.syncbridge import run_async as _run_async

    session = getattr(request, "session", None)
    key = getattr(session, "session_key", None)
    if key:
        # Django's logout flushes the session only after this signal: end it first, or a page that
        # reloads on the close below (another tab of the same browser) may be served by the old
        # session still, show its card again and keep it (its new socket is refused). The flush
        # after deletes nothing more.
        session.delete()
        logger.info("user %s signed out: the sockets of that session are closed", getattr(user, "pk", None))
        _run_async(tell, session_group(key), {"type": "session.ended", "cause": SIGNED_OUT})


def _user_saving(sender: Any, instance: Any, raw: bool = False, update_fields: Any = None, **kwargs: Any) -> None:
    instance._mrtr_password_was = None
    if raw or not instance.pk or (update_fields is not None and "password" not in update_fields):
        return
    if hasattr(instance, "password"):
        instance._mrtr_password_was = sender._default_manager.filter(pk=instance.pk).values_list(
            "password", flat=True).first()


def _user_saved(sender: Any, instance: Any, created: bool, raw: bool = False, **kwargs: Any) -> None:
    was = getattr(instance, "_mrtr_password_was", None)
    if created or raw or was is None or was == getattr(instance, "password", None):
        return
    from django.db import transaction

    from ..runtime.syncbridge import run_async as _run_async
    from ..runtime.push import user_group

    logger.info("user %s's password changed: their sockets re-check their sessions", instance.pk)
    group = user_group(instance.pk)
    transaction.on_commit(lambda: _run_async(tell, group, {"type": "session.check", "cause": "password_changed"}))


def connect_signals() -> None:
    """Wire the handlers above (called from ``MrtrwebConfig.ready``)."""
    from django.contrib.auth import get_user_model

    User = get_user_model()
    uid = "mrtrweb.sessions."  # as before the move
    user_logged_out.connect(_signed_out, dispatch_uid=uid + "signed-out")
    pre_save.connect(_user_saving, sender=User, dispatch_uid=uid + "user-saving")
    post_save.connect(_user_saved, sender=User, dispatch_uid=uid + "user-saved")
