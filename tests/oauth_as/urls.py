"""URLs of the test authorization server: DOT's endpoints under ``/o/`` (authorize, token,
revoke_token, introspect), its RFC 8414 metadata at the root
(``/.well-known/oauth-authorization-server``, the issuer has no path), the login page, and the
test's control views under ``/_test/`` (:mod:`tests.oauth_as.control`)."""

from django.contrib.auth import views as auth_views
from django.urls import include, path
from oauth2_provider import urls as dot_urls
from oauth2_provider import views as dot_views

from tests.oauth_as import control

urlpatterns = [
    path(".well-known/oauth-authorization-server", dot_views.OAuthServerMetadataView.as_view(),
         name="oauth-server-metadata"),
    path("o/", include((dot_urls.base_urlpatterns, "oauth2_provider"), namespace="oauth2_provider")),
    path("accounts/login/", auth_views.LoginView.as_view(), name="login"),
    path("_test/", include(control.urlpatterns)),
]
