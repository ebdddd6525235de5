"""The app's models, one module per concern (Django loads them from here; every model is
importable as ``mrtrweb.models.<Name>`` as before):

* :mod:`.tenancy` -- ``Tenant``, ``Membership``;
* :mod:`.servers` -- ``McpServer`` and its field validators, ``ServerLogLevel`` (per person);
* :mod:`.operations` -- ``Operation``;
* :mod:`.apps` -- ``AppApproval`` (an MCP App's HTML approved by its digest, issue 31);
* :mod:`.audit` -- ``AuditEvent``, ``AuditChainHead``, ``AuditCheckpoint`` (append-only), ``AuditOnce``;
* :mod:`.durability` -- ``LiveBinding``, ``BindingIndexEntry``, ``BindingClaim``, ``LegacyAnswer``,
  ``WorkerLease``;
* :mod:`.chat` -- ``TenantModel``, ``ToolPolicy``, ``Conversation``, ``ChatMessage``, ``Proposal``, ``AppOffer``
  (a model in the loop, issue 32);
* the authorization models live with their package (:mod:`mrtrweb.authz.models`) and are
  imported here so that Django registers them with the app.

May import: Django, :mod:`mrtrweb.mcp` (``origin_of``), :mod:`mrtrweb.text` (display rules),
:mod:`mrtrweb.authz.models`.
"""

from __future__ import annotations

from .tenancy import Membership, Tenant
from .servers import McpServer, ServerLogLevel, validate_roots, validate_server_url
from .operations import Operation
from .apps import AppApproval
from .audit import AppendOnlyQuerySet, AuditChainHead, AuditCheckpoint, AuditEvent, AuditOnce
from ..authz.models import OAuthClientRegistration, OAuthConnection, PendingAuthorization
from .durability import BindingClaim, BindingIndexEntry, LegacyAnswer, LiveBinding, WorkerLease
from .chat import AppOffer, ChatMessage, Conversation, Proposal, TenantModel, ToolPolicy

__all__ = [
    "AppApproval", "AppendOnlyQuerySet", "AuditChainHead", "AuditCheckpoint", "AuditEvent", "AuditOnce", "BindingClaim", "BindingIndexEntry",
    "AppOffer", "ChatMessage", "Conversation", "Proposal", "TenantModel", "ToolPolicy",
    "LegacyAnswer", "LiveBinding", "McpServer", "Membership", "OAuthClientRegistration", "OAuthConnection",
    "Operation", "PendingAuthorization", "ServerLogLevel", "Tenant", "WorkerLease", "validate_roots", "validate_server_url",
]
