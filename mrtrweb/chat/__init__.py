"""A model in the loop (issue 32): a person's conversations with the tenant's model, whose every
proposed call reaches a server only through this product's consent, binding and audit.

Owns:

* :mod:`.choice` -- the tenant's provider and model (a tenant admin's choice, the key sealed at rest);
* :mod:`.tools` -- the tools a conversation offers, namespaced per server (``<server>_<id>__<tool>``),
  app-only tools never;
* :mod:`.policy` -- the tenant's rule per server and tool (ask / read-only without asking / never)
  and the cross-server rule;
* :mod:`.context` -- what the model is given: the conversation, bounded, and each call's final
  result marked as data from that server (never a round, a ``requestState``, an answer or a token);
  :mod:`.withheld` -- the person's answered values, as digests, hidden where the result echoes them;
* :mod:`.turns` and :mod:`.loop` -- a turn: model steps, bounded (steps, proposals at once, reply size and time),
  the conversation saved before every step;
* :mod:`.decisions` -- Approve / Edit / Deny of a proposal: an approved call is an operation
  started through :func:`mrtrweb.operations.start_operation` with initiator ``model``;
* :mod:`.events` -- proposal, approval, edit and denial in the tenant's audit chain (digests only);
* :mod:`.app_offers` -- an MCP App's ``ui/message`` / ``ui/update-model-context`` offered to the
  conversation of the model's call it belongs to, given to the model only once the person accepts it;
* :mod:`.sampling` -- a sampling provider whose reply the tenant's model drafts, for the person to review;
* :mod:`.push` -- the reply streamed to the person's WebSocket group; :mod:`.messages` -- what the
  person reads.

May import: the models, :mod:`mrtrweb.providers`, :mod:`mrtrweb.operations`, :mod:`mrtrweb.audit`,
:mod:`mrtrweb.authz` (sealing), :mod:`mrtrweb.catalog`, :mod:`mrtrweb.mcpapps` (app-only tools),
:mod:`mrtrweb.servers`, :mod:`mrtrweb.tenancy`, :mod:`mrtrweb.rendering`, :mod:`mrtrweb.runtime`,
:mod:`mrtrweb.text`, :mod:`mrtrweb.conf`. Never the views.
"""
