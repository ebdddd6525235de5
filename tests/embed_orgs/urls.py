from django.urls import include, path

urlpatterns = [
    path("apps/mcp/", include("mrtrweb.urls")),
]
