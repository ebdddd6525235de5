"""WebSocket URL patterns of mrtrweb; wrap them as shown in ``mrtrweb.site.asgi``."""

from django.urls import path

from .live.consumers import OperationsConsumer

websocket_urlpatterns = [
    path("ws/mrtrweb/", OperationsConsumer.as_asgi()),
]
