"""What an app may call (issue 31 item 4), decided on the server from the server's own listing.

* :func:`tool_for_app` -- the listed tool an app may call by ``name``, or :class:`AppCallRefused`:
  it must be a tool of the app's own server (the listing is that server's), its
  ``_meta.ui.visibility`` must include ``"app"`` (absent: ``["model", "app"]``, the specification's
  default), and it must be among the first ``APPS_MAX_TOOLS`` such tools in listing order;
* :func:`read_only` -- whether a tool says ``annotations.readOnlyHint: true`` (anything else: it
  waits for the person's confirmation);
* :func:`take_slot` -- one request of the app's ``APPS_CALLS_PER_SECOND`` (a counter per host
  operation and second in the binding cache).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Mapping
from typing import Any

from django.utils.translation import gettext_noop

from .. import conf
from ..mcpapps import meta as app_meta
from .errors import AppCallRefused
from .host import cache

logger = logging.getLogger("mrtrweb.appcalls")

NOT_LISTED = gettext_noop("The app asked for a tool its server does not offer.")
NOT_FOR_APPS = gettext_noop("The app asked for a tool that is not offered to apps.")
TOO_MANY_TOOLS = gettext_noop("The app asked for a tool beyond the number of tools an app may call.")
RATE_LIMITED = gettext_noop("The app made too many requests in one second.")
_RATE = "mrtrweb-app-rate:"


def app_tools(listed: list[Any]) -> list[dict[str, Any]]:
    """The tools of a listing an app may call: visibility includes ``"app"``, the first
    ``APPS_MAX_TOOLS`` in listing order."""
    limit = int(conf.get("APPS_MAX_TOOLS"))
    visible = [t for t in listed if isinstance(t, Mapping) and isinstance(t.get("name"), str)
               and "app" in app_meta.visibility(t)]
    return [dict(t) for t in visible[:limit]]


def tool_for_app(listed: list[Any], name: Any) -> dict[str, Any]:
    """The listed tool ``name`` when the app may call it.

    Raises:
        AppCallRefused: ``not_listed``, ``not_for_apps`` or ``too_many_tools`` (403).
    """
    spec = next((t for t in listed if isinstance(t, Mapping) and t.get("name") == name), None) \
        if isinstance(name, str) else None
    if spec is None:
        raise AppCallRefused("not_listed", NOT_LISTED, 403)
    if "app" not in app_meta.visibility(spec):
        raise AppCallRefused("not_for_apps", NOT_FOR_APPS, 403)
    if not any(t["name"] == name for t in app_tools(listed)):
        raise AppCallRefused("too_many_tools", TOO_MANY_TOOLS, 403)
    return dict(spec)


def read_only(spec: Mapping[str, Any]) -> bool:
    """Whether the tool declares ``annotations.readOnlyHint`` exactly ``true``."""
    annotations = spec.get("annotations")
    return isinstance(annotations, Mapping) and annotations.get("readOnlyHint") is True


def take_slot(host_id: Any) -> None:
    """Sync: count one request of the app of ``host_id`` in the current second.

    Raises:
        AppCallRefused: ``rate_limited`` (429) past ``APPS_CALLS_PER_SECOND``.
    """
    key = f"{_RATE}{host_id}:{int(time.time())}"
    store = cache()
    store.add(key, 0, 5)
    try:
        count = store.incr(key)
    except ValueError:  # expired between add and incr: this request is the second's first
        store.add(key, 1, 5)
        count = 1
    if count > int(conf.get("APPS_CALLS_PER_SECOND")):
        logger.info("app of operation %s: request refused, over %s per second", host_id,
                    conf.get("APPS_CALLS_PER_SECOND"))
        raise AppCallRefused("rate_limited", RATE_LIMITED, 429)
