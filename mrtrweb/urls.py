"""URLs of mrtrweb; include with ``path("mcp/", include("mrtrweb.urls"))`` (namespace ``mrtrweb``)."""

from django.urls import include, path

from .audit import history
from .runtime import metrics_view
from .consent import rerun
from .views import app_approvals, app_calls, apps as mcp_apps, chat, chat_offers, chat_proposals, completions as suggestions, server_log, settings_page
from . import views
from .views.waiting import waiting_rounds

app_name = "mrtrweb"

urlpatterns = [
    path("", views.index, name="index"),
    path("servers/<int:server_id>/", views.server_detail, name="server"),
    # a tool or prompt is named in the query (?name=... or ?sha256=...): any name a server chooses
    # (mrtrweb.text.names); the older path forms still serve plain names
    path("servers/<int:server_id>/tools/", views.tool_call, name="tool"),
    path("servers/<int:server_id>/tools/<str:tool>/", views.tool_call, name="tool-by-path"),
    path("servers/<int:server_id>/prompts/", views.prompt_get, name="prompt"),
    path("servers/<int:server_id>/prompts/<str:prompt>/", views.prompt_get, name="prompt-by-path"),
    path("servers/<int:server_id>/resources/", views.resource_read, name="resource"),
    # suggestions as a person types in a prompt's or template's form (issue 28): JSON
    path("servers/<int:server_id>/complete/<str:kind>/", suggestions.complete, name="complete"),
    # the level of the server's log messages a person asks for (issue 28)
    path("servers/<int:server_id>/log-level/", server_log.log_level, name="server-log-level"),
    path("operations/<uuid:op_id>/", views.operation_detail, name="operation"),
    # MCP Apps (issue 31, docs/apps.md): the host's endpoints, then the sandbox origin's pages
    path("operations/<uuid:op_id>/app/", mcp_apps.app_start, name="app-start"),
    path("operations/<uuid:op_id>/app/outcome/", mcp_apps.app_outcome, name="app-outcome"),
    path("operations/<uuid:op_id>/app/document/", mcp_apps.app_document, name="app-document"),
    # a tenant admin approves an app's HTML by its digest (issue 31, item 1)
    path("servers/<int:server_id>/apps/", app_approvals.app_approvals, name="app-approvals"),
    path("servers/<int:server_id>/apps/<int:approval_id>/", app_approvals.app_decide, name="app-approval-decide"),
    # an app's own requests (issue 31 item 4, mrtrweb.views.app_calls)
    path("operations/<uuid:op_id>/app/requests/", app_calls.app_request, name="app-request"),
    path("operations/<uuid:op_id>/app/requests/<str:token>/", app_calls.app_decide, name="app-decide"),
    path("operations/<uuid:op_id>/app/sampling/", app_calls.app_sampling_decide, name="app-sampling-decide"),
    path("operations/<uuid:op_id>/app/calls/<uuid:call_id>/", app_calls.app_call, name="app-call"),
    path("operations/<uuid:op_id>/app/download/<str:token>/", app_calls.app_download, name="app-download"),
    path("apps/sandbox/", mcp_apps.sandbox_proxy, name="app-sandbox"),
    path("apps/sandbox/doc/<str:token>/", mcp_apps.sandbox_document, name="app-sandbox-document"),
    path("operations/<uuid:op_id>/panel/", views.operation_panel, name="operation-panel"),
    path("operations/<uuid:op_id>/answer/", views.operation_answer, name="operation-answer"),
    path("operations/<uuid:op_id>/stop/", views.operation_stop, name="operation-stop"),
    path("operations/<uuid:op_id>/result/", views.operation_result, name="operation-result"),
    path("operations/<uuid:op_id>/content/<int:index>/", views.operation_content, name="operation-content"),
    path("operations/<uuid:op_id>/content/<int:index>/read/", views.resource_link_read, name="resource-link-read"),
    path("operations/<uuid:op_id>/rerun/", rerun.operation_rerun, name="operation-rerun"),
    path("waiting/", waiting_rounds, name="waiting"),
    path("history/", history.own_history, name="history"),
    path("history/operations/<uuid:op_id>/", history.operation_timeline, name="history-operation"),
    path("tenants/<slug:slug>/history/", history.tenant_history, name="tenant-history"),
    path("servers/<int:server_id>/settings/", settings_page.server_settings, name="server-settings"),
    # servers people bring (issue 29): a tenant admin's servers, a person's own
    path("", include("mrtrweb.serverconfig.urls")),
    # authorization to MCP servers (issue 13): oauth/... and connections/...
    path("", include("mrtrweb.authz.urls")),
    # a model in the loop (issue 32, docs/chat.md): conversations, proposals, the tenant's model
    path("chat/", chat.chat_index, name="chat-index"),
    path("chat/<uuid:conversation_id>/", chat.chat_page, name="chat"),
    path("chat/<uuid:conversation_id>/log/", chat.chat_log, name="chat-log"),
    path("chat/<uuid:conversation_id>/send/", chat.chat_send, name="chat-send"),
    path("chat/<uuid:conversation_id>/continue/", chat.chat_continue, name="chat-continue"),
    path("chat/<uuid:conversation_id>/rename/", chat.chat_rename, name="chat-rename"),
    path("chat/<uuid:conversation_id>/delete/", chat.chat_delete, name="chat-delete"),
    path("chat/<uuid:conversation_id>/servers/", chat.chat_tools, name="chat-tools"),
    path("chat/proposals/<uuid:proposal_id>/approve/", chat_proposals.proposal_approve, name="proposal-approve"),
    path("chat/proposals/<uuid:proposal_id>/deny/", chat_proposals.proposal_deny, name="proposal-deny"),
    path("chat/proposals/<uuid:proposal_id>/edit/", chat_proposals.proposal_edit, name="proposal-edit"),
    path("tenants/<slug:slug>/model/", chat_proposals.tenant_model, name="tenant-model"),
    path("chat/app-offers/", chat_offers.app_offer, name="app-offer"),
    path("chat/app-offers/<uuid:offer_id>/accept/", chat_offers.offer_accept, name="app-offer-accept"),
    path("chat/app-offers/<uuid:offer_id>/discard/", chat_offers.offer_discard, name="app-offer-discard"),
    path("metrics/", metrics_view.metrics_view, name="metrics"),  # Prometheus (MRTRWEB["METRICS_TOKEN"])
]
