"""The servers pages' URLs (:mod:`.views`), included by :mod:`mrtrweb.urls` (namespace ``mrtrweb``)."""

from django.urls import path

from . import views
from .probe_view import test_urlpatterns

urlpatterns = [
    path("tenants/<slug:slug>/servers/", views.tenant_servers, name="tenant-servers"),
    path("tenants/<slug:slug>/servers/add/", views.server_add, name="tenant-server-add"),
    path("tenants/<slug:slug>/servers/personal/", views.personal_switch, name="tenant-personal-servers"),
    path("tenants/<slug:slug>/my-servers/", views.own_servers, name="own-servers"),
    path("tenants/<slug:slug>/my-servers/add/", views.own_server_add, name="own-server-add"),
    path("servers/<int:server_id>/edit/", views.server_edit, name="server-edit"),
    path("servers/<int:server_id>/state/", views.server_state, name="server-state"),
    path("servers/<int:server_id>/remove/", views.server_remove, name="server-remove"),
    *test_urlpatterns,  # "Test" (mrtrweb.serverconfig.probe_view)
]
