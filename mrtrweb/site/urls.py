from django.contrib import admin
from django.contrib.auth import views as auth_views
from django.templatetags.static import static
from django.urls import include, path
from django.views.generic import RedirectView

urlpatterns = [
    path("", RedirectView.as_view(pattern_name="mrtrweb:index", permanent=False)),
    # browsers ask for /favicon.ico on their own (pages link the SVG): the same icon, never a 404
    path("favicon.ico", RedirectView.as_view(url=static("mrtrweb/favicon.svg"), permanent=True)),
    path("accounts/login/", auth_views.LoginView.as_view(), name="login"),
    path("accounts/logout/", auth_views.LogoutView.as_view(), name="logout"),
    path("admin/", admin.site.urls),
    path("mcp/", include("mrtrweb.urls")),
]

# a service outage raised outside a view is a 503 page too, never a 500 (mrtrweb.middleware)
handler500 = "mrtrweb.middleware.server_error"
