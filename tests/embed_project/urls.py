from django.urls import include, path

urlpatterns = [
    path("portal/mcp/", include("mrtrweb.urls")),
    path("portal/mcp/", include("mrtrweb.health")),  # the health URL patterns (docs/embedding.md): /portal/mcp/readyz
]
