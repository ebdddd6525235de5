"""What a live round needs to survive a cache restart (issue 14): binding records, their index
and single-use claims, legacy answers handed to a worker, and the workers' leases."""

from __future__ import annotations

from django.db import models


# --------------------------------------------------------------------------- durability (issue 14)
# What a live round needs survives a restart of the cache (Redis without persistence): the gate's
# binding records, its request-id index and its single-use claims live in the database
# (``MRTRWEB["BINDING_STORE"] = "database"``, :mod:`mrtrweb.bindings.database`), and so do the
# workers' leases (:mod:`mrtrweb.runtime.workers`) and the answers handed to a worker holding a legacy
# server's call (:mod:`mrtrweb.operations`). Rows past ``expires_at`` count as absent and are swept.


class LiveBinding(models.Model):
    """One operation's binding record (:class:`mrtrweb.gate.BindingStore` ``save``/``load``).

    ``record`` is the gate's JSON record sealed (:mod:`mrtrweb.authz.crypto`: Fernet, authenticated)
    together with a digest of its tenant, so a row moved to another tenant or altered reads as
    absent: it holds the operation's arguments and a round's ``requestState``, never readable at
    rest (re-sealed by ``mrtr_rotate_secrets``)."""

    tenant = models.CharField(max_length=64)
    operation_id = models.CharField(max_length=64)
    record = models.TextField()
    expires_at = models.DateTimeField(db_index=True)

    class Meta:
        constraints = [models.UniqueConstraint(fields=["tenant", "operation_id"], name="mrtrweb_livebinding_once")]


class BindingIndexEntry(models.Model):
    """``(tenant, user, request-id key) -> operation`` of the gate's index; ``key_digest`` is a
    SHA-256 of user and request-id key (a request id is server-visible but long and arbitrary)."""

    tenant = models.CharField(max_length=64)
    key_digest = models.CharField(max_length=64)
    operation_id = models.CharField(max_length=64)
    expires_at = models.DateTimeField(db_index=True)

    class Meta:
        constraints = [models.UniqueConstraint(fields=["tenant", "key_digest"], name="mrtrweb_bindingindex_once")]


class BindingClaim(models.Model):
    """A single-use token of the gate (``claim``): the unique constraint makes exactly one insert
    win across workers; ``token_digest`` is a SHA-256 of the token. Also the settle key of a legacy
    round (see :mod:`mrtrweb.operations`)."""

    tenant = models.CharField(max_length=64)
    token_digest = models.CharField(max_length=64)
    expires_at = models.DateTimeField(db_index=True)

    class Meta:
        constraints = [models.UniqueConstraint(fields=["tenant", "token_digest"], name="mrtrweb_bindingclaim_once")]


class LegacyAnswer(models.Model):
    """The validated response to a legacy (2025-11-25) server's request, handed by the worker that
    took the person's answer to the worker holding the server's call; taken (deleted) once.
    ``payload`` is sealed like :class:`LiveBinding.record`, with its operation and round inside
    (:mod:`mrtrweb.runtime.handover`)."""

    operation_id = models.UUIDField()
    round_number = models.PositiveIntegerField()
    payload = models.TextField()
    expires_at = models.DateTimeField(db_index=True)

    class Meta:
        constraints = [models.UniqueConstraint(fields=["operation_id", "round_number"], name="mrtrweb_legacyanswer_once")]


class WorkerLease(models.Model):
    """A worker process's lease (:mod:`mrtrweb.runtime.workers`): written before it drives any operation,
    renewed every ``HEARTBEAT_S`` with the database's clock, deleted when it exits after draining.
    A worker is judged dead only on evidence: its lease present and not renewed for three periods,
    or absent although an operation names it."""

    worker_id = models.CharField(max_length=120, primary_key=True)
    host = models.CharField(max_length=255, blank=True)
    pid = models.PositiveIntegerField(default=0)
    started_at = models.DateTimeField()
    beat_at = models.DateTimeField(db_index=True)
    draining = models.BooleanField(default=False)
