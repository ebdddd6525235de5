"""The consent card and what is shown on it: where a round becomes something a person answers.

* :mod:`.panels` -- an operation's panel (status, the card of its open round, its result), for the
  page and the WebSocket alike.
* :mod:`.forms` -- Django forms from JSON schemas; :mod:`.argschema` the bounded check of tool
  arguments; :mod:`.fieldhints` and :mod:`.gate_text` what a field's bounds and the gate's messages
  say in the person's language; :mod:`.jsonfields` a JSON form field that never raises.
* :mod:`.sampling` -- sampling and roots, the deprecated exception (AID-H-028.008).
* :mod:`.outcomes` -- how an operation's outcome reads; :mod:`.rerun` running it again;
  :mod:`.pending` the rounds waiting for a person ("Waiting for you").

May import: gate, models, conf, text, tenancy, authz, audit, operations; not views, live or management.
"""
