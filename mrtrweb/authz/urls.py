"""The authorization URLs, included by :mod:`mrtrweb.urls` (namespace ``mrtrweb``).

``oauth/connect/<server>/`` (POST), ``oauth/go/<pending>/``, ``oauth/callback/`` (the redirect
URI), ``oauth/client-metadata.json`` (the CIMD: route ``MRTRWEB["OAUTH_CLIENT_METADATA_URL"]``
here), ``connections/`` and ``connections/<server>/disconnect/`` (POST).
"""

from django.urls import path

from . import views

urlpatterns = [
    path("oauth/connect/<int:server_id>/", views.connect, name="oauth-connect"),
    path("oauth/go/<int:pending_id>/", views.go, name="oauth-go"),
    path("oauth/callback/", views.callback, name="oauth-callback"),
    path("oauth/client-metadata.json", views.client_metadata, name="oauth-client-metadata"),
    path("connections/", views.connections, name="connections"),
    path("connections/<int:server_id>/disconnect/", views.disconnect, name="disconnect"),
]
