"""The audit trail: every round's events, their per-tenant hash chain, its reconciliation,
and the history pages that read it.

* :mod:`.events` -- recording events (digests only, mrtr-gate.md §4), verifying and purging the trail.
* :mod:`.chain` -- an event's canonical hash and the statements that append to a tenant's chain.
* :mod:`.reconcile` -- every received round paired with what ended it.
* :mod:`.history` -- a person's history of operations: pages, filters, exports.

May import: models, conf, :mod:`mrtrweb.runtime` (metrics), :mod:`mrtrweb.text`; ``history``
(pages) also operations, consent and tenancy.
"""
