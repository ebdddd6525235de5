"""URLs of mrtrweb; include with ``path("mcp/", include("mrtrweb.urls"))`` (namespace ``mrtrweb``)."""

from django.urls import path

from . import views

app_name = "mrtrweb"

urlpatterns = [
    path("", views.index, name="index"),
    path("servers/<int:server_id>/", views.server_detail, name="server"),
    path("servers/<int:server_id>/tools/<str:tool>/", views.tool_call, name="tool"),
    path("operations/<uuid:op_id>/", views.operation_detail, name="operation"),
    path("operations/<uuid:op_id>/panel/", views.operation_panel, name="operation-panel"),
    path("operations/<uuid:op_id>/answer/", views.operation_answer, name="operation-answer"),
    path("operations/<uuid:op_id>/stop/", views.operation_stop, name="operation-stop"),
]
