from django.urls import include, path

urlpatterns = [
    path("portal/mcp/", include("mrtrweb.urls")),
    path("portal/mcp/", include("mrtrweb.health")),  # the README's health URL patterns: /portal/mcp/readyz
]
