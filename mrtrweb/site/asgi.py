"""ASGI entry point of the standalone site, built as a portal builds its own (:mod:`mrtrweb.asgi`):
HTTP through Django (one thread hop per run of sync-style middleware), WebSockets through Channels
behind the session auth middleware and the full origin check (scheme, host, port: the site's own
origin or one of CSRF_TRUSTED_ORIGINS, see :mod:`mrtrweb.live.origin`), and the lifespan protocol to
:data:`mrtrweb.runtime.drain.lifespan` (the worker's lease and heartbeat at start-up, a graceful
drain on SIGTERM): run uvicorn with ``--lifespan on``.

Once the application is built, :func:`mrtrweb.runtime.gcpolicy.configure` freezes what start-up made
and sets the collector's thresholds (``MRTRWEB["GC_FREEZE"]``, ``MRTRWEB["GC_THRESHOLDS"]``)."""

import os

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "mrtrweb.site.settings")

from mrtrweb.asgi import get_asgi_application, mrtrweb_application  # noqa: E402

django_asgi_app = get_asgi_application()  # first: it sets Django up

# The standalone site serves its own static files (a production deployment may put them
# behind the reverse proxy instead: MRTRWEB_SERVE_STATIC=0).
application = mrtrweb_application(django_asgi_app,
                                  serve_static=os.environ.get("MRTRWEB_SERVE_STATIC", "1") == "1")
