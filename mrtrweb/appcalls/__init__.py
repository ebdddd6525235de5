"""MCP Apps' own requests to the host (issue 31 items 4 and 5, docs/apps.md): what an app rendered
on a person's page may ask of the product, decided here on the server, never by the browser.

Owns:

* :mod:`.host` -- the *app host*: the person's completed ``tools/call`` operation whose page renders
  the app, and the ``app_rendered`` audit event of each rendering (server, tool, HTML digest, CSP);
  an app may call nothing before the product rendered it;
* :mod:`.rights` -- which tools an app may call (same server, ``_meta.ui.visibility`` including
  ``"app"``, the first ``APPS_MAX_TOOLS``) and its rate (``APPS_CALLS_PER_SECOND``);
* :mod:`.calls` -- an app's ``tools/call`` / ``resources/read`` as an operation with initiator
  ``app`` (:func:`mrtrweb.operations.start_operation`, the one path): a tool that is not read-only
  waits for the person's confirmation first; the time limit (``APPS_CALL_TIMEOUT_S``); what the
  page reads of the operation (its status, its final result only);
* :mod:`.offers` -- ``ui/open-link`` (the URL-mode interstitial's checks, opened only on the
  person's click) and ``ui/download-file`` (asked first, served as an attachment);
* :mod:`.sampling` -- ``sampling/createMessage``: where the tenant has a model and its server may
  sample, drafted by the model through the server's sampling path (:mod:`mrtrweb.chat.sampling`),
  sent to the app only as the person sends or edits it on a host-rendered card.

Every refusal is an :class:`AppCallRefused` with a stable ``code`` (the JSON-RPC error the app reads).

May import: :mod:`mrtrweb.operations`, :mod:`mrtrweb.audit`, :mod:`mrtrweb.servers`,
:mod:`mrtrweb.mcpapps`, :mod:`mrtrweb.chat` (the tenant's model, its sampling drafts),
:mod:`mrtrweb.consent` (the sampling provider's call, the card's view of a request),
:mod:`mrtrweb.gate` (the URL check, a ``CreateMessageResult``'s shape), models, conf, text. Imported by the views.
"""

from __future__ import annotations

from .errors import AppCallRefused

__all__ = ["AppCallRefused"]
