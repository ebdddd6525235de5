"""``manage.py mrtr_rotate_secrets [--drop-unreadable] [--dry-run]``: re-seal every stored secret
with the first of ``MRTRWEB["SECRET_KEYS"]`` (issue 13, item 1; :mod:`mrtrweb.authz.crypto`).

Rotation: put a new key first in ``SECRET_KEYS`` and keep the old ones, deploy, run this command,
then drop the old keys. The sealed fields:

* ``McpServer.auth_secret_sealed`` (tenant credentials, pre-registered client secrets),
* ``OAuthClientRegistration.client_info_sealed`` (client information, maybe a client secret),
* ``OAuthConnection.tokens_sealed`` (people's tokens),
* ``PendingAuthorization.flow_sealed`` (started flows: PKCE verifiers),
* ``LiveBinding.record`` (issue 14: the live bindings of the database binding store -- an
  operation's arguments, a round's ``requestState``),
* ``LegacyAnswer.payload`` (issue 14: answers being handed to the worker holding a legacy call),
* ``TenantModel.api_key_sealed`` (issue 32: a tenant's key of its model provider; unreadable with
  ``--drop-unreadable``: cleared, a tenant admin enters it again).

Each value is opened with any configured key and sealed again with the first one, written only if
the row still holds the value read (a refresh that wrote new tokens meanwhile already sealed them
with the first key: counted as ``changed meanwhile``). A value no configured key opens is counted
``unreadable`` and left as it is, or with ``--drop-unreadable`` removed: the connection,
registration or started flow is deleted (people connect again, the client registers again), a
live binding or handed-over answer is deleted (its round can no longer be answered, as it could
not be with the key gone: the operation ends at its TTL), a server's secret (and its digest) is cleared (an admin enters it again; its open rounds are denied,
its configuration changed). Output: one line per field with its counts; nothing secret is printed.
Exits 1 when the keys are not configured correctly (``ImproperlyConfigured``), 2 when secrets no
configured key opens were left (not with ``--dry-run``): a deploy script notices. Moving from the
embedded default (no ``SECRET_KEYS``: a key derived from ``SECRET_KEY``) to explicit keys: list
``"derived"`` after the new key, run this command, then drop ``"derived"``.
"""

from __future__ import annotations

import dataclasses

from django.core.exceptions import ImproperlyConfigured
from django.core.management.base import BaseCommand, CommandError
from django.db import transaction

from mrtrweb.authz import crypto
from mrtrweb.authz.models import OAuthClientRegistration, OAuthConnection, PendingAuthorization
from mrtrweb.models import LegacyAnswer, LiveBinding, McpServer, TenantModel


@dataclasses.dataclass
class Counts:
    resealed: int = 0
    empty: int = 0
    unreadable: int = 0
    dropped: int = 0
    changed: int = 0

    def line(self, label: str) -> str:
        return (f"{label}: {self.resealed} resealed, {self.empty} empty, {self.unreadable} unreadable"
                f" ({self.dropped} dropped), {self.changed} changed meanwhile")


def _drop_server_secret(model, pk) -> int:
    return model.objects.filter(pk=pk).update(auth_secret_sealed="", auth_secret_digest="")


def _drop_model_key(model, pk) -> int:
    return model.objects.filter(pk=pk).update(api_key_sealed="", api_key_digest="")


def _delete_row(model, pk) -> int:
    return model.objects.filter(pk=pk).delete()[0]


#: (model, sealed field, what --drop-unreadable does to a row whose value no key opens)
SEALED_FIELDS = (
    (McpServer, "auth_secret_sealed", _drop_server_secret),
    (OAuthClientRegistration, "client_info_sealed", _delete_row),
    (OAuthConnection, "tokens_sealed", _delete_row),
    (PendingAuthorization, "flow_sealed", _delete_row),
    (LiveBinding, "record", _delete_row),
    (LegacyAnswer, "payload", _delete_row),
    (TenantModel, "api_key_sealed", _drop_model_key),
)


def rotate_field(model, field: str, drop, *, drop_unreadable: bool = False, dry_run: bool = False) -> Counts:
    """Re-seal ``model.field`` of every row (see the module doc); returns the counts.

    Raises:
        ImproperlyConfigured: ``SECRET_KEYS`` is not a list of valid Fernet keys.
    """
    counts = Counts()
    rows = model.objects.order_by("pk").values_list("pk", field)
    for pk, sealed in rows.iterator(chunk_size=500):
        if not sealed:
            counts.empty += 1
            continue
        try:
            fresh = crypto.reseal(sealed)
        except crypto.SecretUnreadable:
            counts.unreadable += 1
            if drop_unreadable and not dry_run:
                with transaction.atomic():
                    still = model.objects.select_for_update().filter(pk=pk, **{field: sealed}).exists()
                    if still and drop(model, pk):
                        counts.dropped += 1
            continue
        if dry_run:
            counts.resealed += 1
        elif model.objects.filter(pk=pk, **{field: sealed}).update(**{field: fresh}):
            counts.resealed += 1
        else:
            counts.changed += 1
    return counts


class Command(BaseCommand):
    help = "Re-seal every stored secret (tokens, client secrets, tenant credentials) with the first SECRET_KEYS key."

    def add_arguments(self, parser):
        parser.add_argument("--drop-unreadable", action="store_true",
                            help="delete connections, registrations, started flows, live bindings and handed-over "
                                 "answers (and clear server secrets) that no configured key opens")
        parser.add_argument("--dry-run", action="store_true", help="count only; write nothing")

    def handle(self, *args, **options):
        try:
            crypto.keys()
        except ImproperlyConfigured as exc:
            raise CommandError(str(exc), returncode=1) from None
        total = Counts()
        for model, field, drop in SEALED_FIELDS:
            counts = rotate_field(model, field, drop, drop_unreadable=options["drop_unreadable"],
                                  dry_run=options["dry_run"])
            self.stdout.write(counts.line(f"{model.__name__}.{field}"))
            for name in dataclasses.asdict(total):
                setattr(total, name, getattr(total, name) + getattr(counts, name))
        self.stdout.write(total.line("total" + (" (dry run: nothing written)" if options["dry_run"] else "")))
        if total.unreadable > total.dropped and not options["dry_run"]:
            raise CommandError(f"{total.unreadable - total.dropped} stored secret(s) could not be opened with the "
                               "configured keys and were left as they are: list the key that sealed them (\"derived\" "
                               "for the key derived from SECRET_KEY), or --drop-unreadable removes them.",
                               returncode=2)
