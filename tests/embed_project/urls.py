from django.urls import include, path

urlpatterns = [path("portal/mcp/", include("mrtrweb.urls"))]
