"""The one import a portal's ``asgi.py`` needs: HTTP through Django, the WebSocket behind the session
and full-origin checks, the worker's lifespan, the collector policy (docs/embedding.md)::

    import os

    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "yourportal.settings")

    from mrtrweb.asgi import get_asgi_application, mrtrweb_application

    django_asgi_app = get_asgi_application()          # first: it sets Django up
    application = mrtrweb_application(django_asgi_app)

* :func:`get_asgi_application` -- Django's ASGI handler, each run of sync-style middleware in one
  thread hop per request phase (:mod:`mrtrweb.runtime.onehop`; ``MIDDLEWARE`` unchanged). Django's
  own ``django.core.asgi.get_asgi_application`` works too.
* :func:`mrtrweb_application` -- the ``ProtocolTypeRouter``: ``http`` (with the static files served
  by the worker when ``serve_static``, by default when ``DEBUG`` is on), ``websocket``
  (:class:`SameOriginValidator` around Channels' ``AuthMiddlewareStack`` around mrtrweb's
  :data:`websocket_urlpatterns` -- ``/ws/mrtrweb/`` -- and any of the portal's own) and ``lifespan``
  (:data:`lifespan`: the worker's lease and heartbeat at start-up, a graceful drain on SIGTERM; run
  the ASGI server with ``--lifespan on``); last, :func:`configure_gc` (``MRTRWEB["GC_FREEZE"]``,
  ``MRTRWEB["GC_THRESHOLDS"]``, ``MRTRWEB["GC_EVERY_S"]``: a daemon thread, ``mrtrweb-gc-spacer``).
* The pieces, for a portal that builds its own router: :data:`lifespan`,
  :class:`SameOriginValidator`, :data:`websocket_urlpatterns`, :func:`configure_gc`.

Importing this module sets nothing up: the pieces that need Django's apps load on first use, after
:func:`get_asgi_application`.
"""

from __future__ import annotations

import importlib
from collections.abc import Sequence
from typing import Any

__all__ = ["get_asgi_application", "mrtrweb_application", "lifespan", "SameOriginValidator",
           "websocket_urlpatterns", "configure_gc"]

# name -> (module, attribute), loaded on first use
_PIECES = {
    "lifespan": ("mrtrweb.runtime.drain", "lifespan"),
    "SameOriginValidator": ("mrtrweb.live.origin", "SameOriginValidator"),
    "websocket_urlpatterns": ("mrtrweb.routing", "websocket_urlpatterns"),
    "configure_gc": ("mrtrweb.runtime.gcpolicy", "configure"),
}


def __getattr__(name: str) -> Any:
    if name in _PIECES:
        module, attr = _PIECES[name]
        return getattr(importlib.import_module(module), attr)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def get_asgi_application() -> Any:
    """Django set up, and its ASGI handler with one thread hop per run of sync-style middleware."""
    from .runtime.onehop import get_asgi_application as onehop_application

    return onehop_application()


def mrtrweb_application(http_app: Any = None, *, serve_static: bool | None = None,
                        websocket_urlpatterns: Sequence[Any] = (), configure_gc: bool = True) -> Any:
    """The whole ASGI application of a worker serving mrtrweb.

    Args:
        http_app: the HTTP application (from :func:`get_asgi_application`, or Django's); made here
            when ``None``.
        serve_static: wrap ``http_app`` in Django's ``ASGIStaticFilesHandler`` (the worker serves
            ``STATIC_URL`` itself, as ``runserver`` does). ``None``: when ``settings.DEBUG`` is on.
        websocket_urlpatterns: the portal's own WebSocket routes, behind the same checks, after
            mrtrweb's.
        configure_gc: apply the collector policy last (:func:`mrtrweb.runtime.gcpolicy.configure`).
    """
    if http_app is None:
        http_app = get_asgi_application()
    from channels.auth import AuthMiddlewareStack
    from channels.routing import ProtocolTypeRouter, URLRouter
    from django.conf import settings

    from .live.origin import SameOriginValidator
    from .routing import websocket_urlpatterns as ours
    from .runtime import gcpolicy
    from .runtime.drain import lifespan

    if serve_static is None:
        serve_static = bool(settings.DEBUG)
    if serve_static:
        from django.contrib.staticfiles.handlers import ASGIStaticFilesHandler

        http_app = ASGIStaticFilesHandler(http_app)
    application = ProtocolTypeRouter({
        "http": http_app,
        "websocket": SameOriginValidator(AuthMiddlewareStack(URLRouter([*ours, *websocket_urlpatterns]))),
        "lifespan": lifespan,
    })
    if configure_gc:
        gcpolicy.configure()  # last: what start-up built is frozen out of the collector's walks
    return application
