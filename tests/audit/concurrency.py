"""Many people answering at once: the answers and the audit rows each role's operation must end
with (shared by the in-process and the multi-process audit tests), and threads released together.
"""

from __future__ import annotations

import threading

from django.db import connections

USERS_PER_TENANT = 10
INVALID_POSTS = 3

VALID = {"in-confirm_deploy-confirm": "on", "in-confirm_deploy-ticket": "CHG-1", "in-confirm_deploy-window": "3",
         "in-confirm_deploy-region": "eu-west-1"}
INVALID = dict(VALID, **{"in-confirm_deploy-email": "not-an-email"})  # Django accepts it; the gate does not


def run_threads(target, count: int, timeout_s: float = 240.0) -> list[BaseException]:
    """Run ``target(i)`` in ``count`` threads released together; returns what they raised."""
    barrier = threading.Barrier(count)
    errors: list[BaseException] = []

    def body(i: int) -> None:
        try:
            barrier.wait(30)
            target(i)
        except BaseException as exc:  # noqa: BLE001 -- reported to the test
            errors.append(exc)
        finally:
            connections.close_all()

    threads = [threading.Thread(target=body, args=(i,), daemon=True) for i in range(count)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout_s)
    assert not any(t.is_alive() for t in threads), "some writers never finished"
    return errors


#: what each user of a tenant does, by index (the rest accept valid answers at once)
ROLES = {0: "invalid_then_accept", 1: "invalid_then_accept", 2: "invalid_then_accept", 3: "decline",
         4: "cancel", 5: "stop"}
#: the audit rows each role's operation must have, and its final status
EXPECTED = {
    "accept": ({"received": 1, "shown": 1, "submitted": 1, "completed": 1}, "completed"),
    "invalid_then_accept": ({"received": 1, "shown": 1, "rejected": INVALID_POSTS, "submitted": 1, "completed": 1},
                            "completed"),
    "decline": ({"received": 1, "shown": 1, "submitted": 1, "completed": 1}, "completed"),
    "cancel": ({"received": 1, "shown": 1, "submitted": 1, "cancelled": 1}, "completed"),
    "stop": ({"received": 1, "shown": 1, "denied": 1}, "denied"),
}


class ChainHolder:
    """Another writer in the middle of its transaction: it holds the tenant ``tenant_id``'s chain
    head (made first when the tenant has none; a row lock on PostgreSQL, the write lock on SQLite)
    until :meth:`release`."""

    def __init__(self, tenant_id) -> None:
        self.tenant_id, self.locked, self._release = tenant_id, threading.Event(), threading.Event()
        self.errors: list[BaseException] = []
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()
        assert self.locked.wait(10), self.errors

    def _run(self) -> None:
        from django.db import transaction
        from django.db.models import F

        from mrtrweb.audit import events as audit
        from mrtrweb.models import AuditChainHead

        try:
            with transaction.atomic():
                AuditChainHead.objects.get_or_create(tenant_id=self.tenant_id, defaults={"hash": audit.GENESIS})
                AuditChainHead.objects.filter(tenant_id=self.tenant_id).update(sequence=F("sequence"))
                self.locked.set()
                self._release.wait(20)
        except BaseException as exc:  # noqa: BLE001 -- reported by release()
            self.errors.append(exc)
        finally:
            connections.close_all()

    def release(self) -> None:
        self._release.set()
        self._thread.join(20)
        assert not self.errors, self.errors
