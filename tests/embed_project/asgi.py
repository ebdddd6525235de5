"""The embedding project's ASGI application, written as an earlier README's embedding snippet said
(the imports of earlier versions keep working; docs/embedding.md has today's one import)."""

import os

from django.core.asgi import get_asgi_application

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "tests.embed_project.settings")
django_asgi_app = get_asgi_application()  # first: it sets Django up

from channels.auth import AuthMiddlewareStack  # noqa: E402
from channels.routing import ProtocolTypeRouter, URLRouter  # noqa: E402

from mrtrweb.drain import lifespan  # noqa: E402
from mrtrweb.origin import SameOriginValidator  # noqa: E402
from mrtrweb.routing import websocket_urlpatterns  # noqa: E402

application = ProtocolTypeRouter({
    "http": django_asgi_app,
    "websocket": SameOriginValidator(AuthMiddlewareStack(URLRouter(websocket_urlpatterns))),
    "lifespan": lifespan,
})

import mrtrweb.gcpolicy  # noqa: E402 -- last, as the docs say

mrtrweb.gcpolicy.configure()
