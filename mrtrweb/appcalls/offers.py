"""What an app may only *offer* the person (issue 31 item 4): a link to open, a file to download.
Nothing is opened or saved by itself.

* :func:`checked_link` -- ``ui/open-link``: the URL-mode interstitial's checks
  (:func:`mrtrweb.gate.check_url`: ``https`` only, no user info, IDN and bidi warnings); the host
  page shows the same interstitial and the person clicks (a new tab, ``noopener noreferrer``);
* :func:`offer_download` / :func:`take_download` -- ``ui/download-file``: the app's embedded
  resources only (``text`` or base64 ``blob``; a ``resource_link`` would make the product fetch a URL:
  refused), at most ``APPS_MAX_DOWNLOAD_BYTES`` in all -- and in all of the files one app holds
  at once, offers nobody took yet counted (:func:`_hold`) -- held in the binding cache for
  ``APPS_CALL_TIMEOUT_S`` under a random token of this person; downloaded on their click as an
  attachment (``application/octet-stream``, ``nosniff``), once.
"""

from __future__ import annotations

import base64
import re
import secrets
from typing import Any

from django.utils.translation import gettext_noop

from .. import conf
from ..gate import UnsafeUrl, UrlView, check_url
from .errors import AppCallRefused
from .host import AppHost, cache

UNSAFE_URL = gettext_noop("The app asked to open an address this site does not offer to open (https only, no user "
                          "name or password in it).")
BAD_DOWNLOAD = gettext_noop("The app offered a file this site does not download (only embedded text or data, "
                            "within the size limit).")
_DOWNLOAD = "mrtrweb-app-download:"
_HELD = "mrtrweb-app-download-held:"
_UNSAFE_NAME = re.compile(r"[^A-Za-z0-9._-]+")


def checked_link(url: Any) -> UrlView:
    """The interstitial's view of ``url``.

    Raises:
        AppCallRefused: ``unsafe_url`` (400).
    """
    try:
        return check_url(url)
    except UnsafeUrl:
        raise AppCallRefused("unsafe_url", UNSAFE_URL) from None


def _filename(uri: Any, index: int) -> str:
    tail = str(uri).rstrip("/").rsplit("/", 1)[-1] if isinstance(uri, str) else ""
    name = _UNSAFE_NAME.sub("_", tail).strip("._")[:80]
    return name or f"download-{index + 1}"


def offer_download(user: Any, host: AppHost, contents: Any) -> list[dict[str, Any]]:
    """Sync: hold the files of a ``ui/download-file`` request (``contents``: its list of
    ``{"type": "resource", "resource": {"uri", "mimeType"?, "text" | "blob"}}``); returns what the
    person is asked about: ``[{"token", "filename", "size", "mime"}]`` (the mime type as the app wrote
    it, shown, never served).

    Raises:
        AppCallRefused: ``bad_download`` (400): not a list of embedded resources, a ``resource_link``,
            bad base64, more than 10 files or ``APPS_MAX_DOWNLOAD_BYTES`` in all.
    """
    if not isinstance(contents, list) or not 0 < len(contents) <= 10:
        raise AppCallRefused("bad_download", BAD_DOWNLOAD)
    limit, total, files = int(conf.get("APPS_MAX_DOWNLOAD_BYTES")), 0, []
    for i, item in enumerate(contents):
        resource = item.get("resource") if isinstance(item, dict) and item.get("type") == "resource" else None
        if not isinstance(resource, dict):
            raise AppCallRefused("bad_download", BAD_DOWNLOAD)
        if isinstance(resource.get("text"), str):
            body = resource["text"].encode("utf-8", "surrogatepass")
        elif isinstance(resource.get("blob"), str):
            try:
                body = base64.b64decode(resource["blob"], validate=True)
            except ValueError:
                raise AppCallRefused("bad_download", BAD_DOWNLOAD) from None
        else:
            raise AppCallRefused("bad_download", BAD_DOWNLOAD)
        total += len(body)
        if total > limit:
            raise AppCallRefused("bad_download", BAD_DOWNLOAD)
        mime = resource.get("mimeType") if isinstance(resource.get("mimeType"), str) else ""
        files.append((body, _filename(resource.get("uri"), i), mime[:100]))
    if not _hold(host, total, limit):
        raise AppCallRefused("bad_download", BAD_DOWNLOAD)
    offered = []
    for body, filename, mime in files:
        token = secrets.token_urlsafe(24)
        cache().set(_DOWNLOAD + token, {"user": user.pk, "host": str(host.op.pk), "body": body, "filename": filename},
                    int(conf.get("APPS_CALL_TIMEOUT_S")))
        offered.append({"token": token, "filename": filename, "size": len(body), "mime": mime})
    return offered


def _hold(host: AppHost, size: int, limit: int) -> bool:
    """Count ``size`` more bytes held for ``host``'s app; False (nothing counted) when that would
    pass ``limit``. The count lives ``APPS_CALL_TIMEOUT_S`` from the first file of its window (as
    long as the files), so at most about twice ``limit`` is ever held for one app."""
    store, key = cache(), _HELD + str(host.op.pk)
    store.add(key, 0, int(conf.get("APPS_CALL_TIMEOUT_S")))
    try:
        now = store.incr(key, size)
    except ValueError:  # expired between add and incr
        store.add(key, size, int(conf.get("APPS_CALL_TIMEOUT_S")))
        now = size
    if now > limit:
        try:
            store.decr(key, size)
        except ValueError:
            pass
        return False
    return True


def take_download(user: Any, token: str) -> tuple[bytes, str] | None:
    """Sync: ``(body, filename)`` of a file offered to ``user``, once; None when unknown, used,
    expired or another person's. Its bytes no longer count as held for its app."""
    store = cache()
    key = _DOWNLOAD + str(token)[:100]
    held = store.get(key)
    if not isinstance(held, dict) or held.get("user") != user.pk or not store.delete(key):
        return None
    try:
        store.decr(_HELD + str(held.get("host")), len(held["body"]))
    except ValueError:  # the count's window ended meanwhile
        pass
    return held["body"], held["filename"]
