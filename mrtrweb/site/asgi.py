"""ASGI entry point: HTTP through Django, WebSockets through Channels behind the session auth
middleware and the full origin check (scheme, host, port: the site's own origin or one of
CSRF_TRUSTED_ORIGINS, see :mod:`mrtrweb.live.origin`), and the lifespan protocol to
:data:`mrtrweb.runtime.drain.lifespan` (the worker's lease and heartbeat at start-up, a graceful drain on
SIGTERM): run uvicorn with ``--lifespan on``.

Once the application is built, :func:`mrtrweb.runtime.gcpolicy.configure` freezes what start-up made and
sets the collector's thresholds (``MRTRWEB["GC_FREEZE"]``, ``MRTRWEB["GC_THRESHOLDS"]``)."""

import os

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "mrtrweb.site.settings")

from mrtrweb.runtime.onehop import get_asgi_application  # noqa: E402

# Django's ASGI handler, its sync-style middleware run in one thread hop per request phase
# (mrtrweb.runtime.onehop; MIDDLEWARE itself unchanged)
django_asgi_app = get_asgi_application()

from channels.auth import AuthMiddlewareStack  # noqa: E402
from channels.routing import ProtocolTypeRouter, URLRouter  # noqa: E402

from mrtrweb.runtime.drain import lifespan  # noqa: E402
from mrtrweb.live.origin import SameOriginValidator  # noqa: E402
from mrtrweb.routing import websocket_urlpatterns  # noqa: E402

from django.conf import settings  # noqa: E402
from django.contrib.staticfiles.handlers import ASGIStaticFilesHandler  # noqa: E402

# The standalone site serves its own static files (a production deployment may put them
# behind the reverse proxy instead: MRTRWEB_SERVE_STATIC=0).
http_app = ASGIStaticFilesHandler(django_asgi_app) if os.environ.get("MRTRWEB_SERVE_STATIC", "1") == "1" \
    else django_asgi_app

application = ProtocolTypeRouter(
    {
        "http": http_app,
        "websocket": SameOriginValidator(AuthMiddlewareStack(URLRouter(websocket_urlpatterns))),
        "lifespan": lifespan,
    }
)

# last: everything start-up built is frozen out of the collector's walks (mrtrweb.runtime.gcpolicy)
from mrtrweb.runtime import gcpolicy  # noqa: E402

gcpolicy.configure()
