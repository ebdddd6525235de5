"""The site's URLs with the server test endpoint (:data:`mrtrweb.serverconfig.probe_view.test_urlpatterns`)
included in the ``mrtrweb`` namespace, as the pages of issue 29 include it."""

from django.contrib.auth import views as auth_views
from django.urls import include, path

from mrtrweb import urls as mrtrweb_urls
from mrtrweb.serverconfig.probe_view import test_urlpatterns

urlpatterns = [
    path("accounts/login/", auth_views.LoginView.as_view(), name="login"),
    path("mcp/", include((list(mrtrweb_urls.urlpatterns) + test_urlpatterns, "mrtrweb"), namespace="mrtrweb")),
]
