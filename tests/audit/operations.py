"""An operation of the seeded tenant's ``acme`` server and the round digests the audit tests append
with (a support module of tests/audit: no test file imports another)."""

from __future__ import annotations

import uuid

from mrtrweb.models import Operation

DIGESTS = {"state_digest": "sha256:" + "a" * 64, "schema_digests": {"confirm": "sha256:" + "b" * 64}}


def seeded_operation(seeded) -> Operation:
    """A new ``tools/call`` operation of alice on the ``acme`` server, read back with its server and
    tenant (as the product's own reads give it)."""
    server = seeded["servers"]["acme"]
    rid = f"mrtr-{uuid.uuid4()}"
    op = Operation.objects.create(tenant=server.tenant, user=seeded["users"]["alice"], server=server,
                                  method="tools/call", name="deploy", params={"name": "deploy", "arguments": {}},
                                  request_id=rid, latest_request_id=rid)
    return Operation.objects.select_related("server", "tenant").get(pk=op.pk)
