"""Secrets at rest: tokens, client secrets and tenant credentials, sealed with Fernet.

Keys come from ``MRTRWEB["SECRET_KEYS"]``: a list of urlsafe-base64 32-byte Fernet keys
(``cryptography.fernet.Fernet.generate_key()``). The **first** key seals; every key opens
(:class:`cryptography.fernet.MultiFernet`). Rotation: put a new key first, keep the old ones,
run ``manage.py mrtr_rotate_secrets`` (re-seals every stored secret with the first key), then drop
the old keys. With no ``SECRET_KEYS`` (the embedded defaults), one key is derived from
``SECRET_KEY`` with HKDF-SHA256 (info ``mrtrweb secrets at rest``): rotating ``SECRET_KEY`` then
makes stored secrets unreadable (they are treated as absent: people connect again).

API: :func:`seal` (JSON value -> token text), :func:`unseal` (token text -> JSON value; raises
:class:`SecretUnreadable`), :func:`reseal` (rotation), :func:`secret_digest` (what a row may hold
to tell that a secret changed) and :func:`set_server_secret` (an ``McpServer``'s write-only secret).
"""

from __future__ import annotations

import base64
import functools
import json
from typing import Any

from cryptography.fernet import Fernet, InvalidToken, MultiFernet
from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives.kdf.hkdf import HKDF
from django.conf import settings
from django.core.exceptions import ImproperlyConfigured

__all__ = ["SecretUnreadable", "keys", "reseal", "seal", "secret_digest", "set_server_secret", "unseal"]


class SecretUnreadable(Exception):
    """A sealed value no configured key opens (rotated away, or tampered with)."""


def _derived_key() -> bytes:
    return _derived_from(str(settings.SECRET_KEY))


@functools.lru_cache(maxsize=4)
def _derived_from(secret_key: str) -> bytes:
    """The key HKDF derives from ``secret_key``: once per value (every seal and unseal of a round
    asked for it; a changed ``SECRET_KEY`` is another value, so another key)."""
    hkdf = HKDF(algorithm=hashes.SHA256(), length=32, salt=b"mrtrweb", info=b"mrtrweb secrets at rest")
    return base64.urlsafe_b64encode(hkdf.derive(secret_key.encode()))


#: an entry of ``SECRET_KEYS`` standing for the key derived from ``SECRET_KEY`` (the embedded
#: default): ``[new_key, "derived"]`` opens what was sealed before ``SECRET_KEYS`` was set, so a
#: deployment moves to explicit keys with ``mrtr_rotate_secrets`` and loses nothing
DERIVED = "derived"


def keys() -> list[bytes]:
    """The configured Fernet keys, sealing key first (:data:`DERIVED` entries: the key derived from
    ``SECRET_KEY``).

    Raises:
        ImproperlyConfigured: ``SECRET_KEYS`` is not a non-empty list of valid Fernet keys.
    """
    from .. import conf

    configured = conf.get("SECRET_KEYS")
    if configured is None:
        return [_derived_key()]
    if not isinstance(configured, (list, tuple)) or not configured:
        raise ImproperlyConfigured('MRTRWEB["SECRET_KEYS"] must be a non-empty list of Fernet keys')
    out = []
    for key in configured:
        if key == DERIVED:
            out.append(_derived_key())
            continue
        raw = key.encode() if isinstance(key, str) else key
        try:
            Fernet(raw)
        except (ValueError, TypeError):
            raise ImproperlyConfigured('MRTRWEB["SECRET_KEYS"] holds a value that is not a Fernet key') from None
        out.append(raw)
    return out


@functools.lru_cache(maxsize=4)
def _fernet(key_tuple: tuple[bytes, ...]) -> MultiFernet:
    return MultiFernet([Fernet(k) for k in key_tuple])


def _multi() -> MultiFernet:
    return _fernet(tuple(keys()))


def seal(value: Any) -> str:
    """Seal a JSON value (compact JSON, UTF-8) with the first key. ``None`` seals to ``""``."""
    if value is None:
        return ""
    data = json.dumps(value, separators=(",", ":"), ensure_ascii=False).encode()
    return _multi().encrypt(data).decode("ascii")


def unseal(token: str) -> Any:
    """The JSON value a :func:`seal` made; ``""`` opens to ``None``.

    Raises:
        SecretUnreadable: no configured key opens it, or it is not sealed JSON.
    """
    if not token:
        return None
    try:
        return json.loads(_multi().decrypt(token.encode("ascii")))
    except (InvalidToken, ValueError, UnicodeError):
        raise SecretUnreadable("a stored secret could not be opened with the configured keys") from None


def reseal(token: str) -> str:
    """The same secret sealed with the first key (rotation); ``""`` stays ``""``.

    Raises:
        SecretUnreadable: no configured key opens it.
    """
    if not token:
        return ""
    try:
        return _multi().rotate(token.encode("ascii")).decode("ascii")
    except (InvalidToken, ValueError, UnicodeError):
        raise SecretUnreadable("a stored secret could not be opened with the configured keys") from None


def secret_digest(value: Any) -> str:
    """A digest telling that a secret changed, never what it is: ``hmac-sha256:`` (the audit key,
    :func:`mrtrweb.audit.events.keyed_digest`) of the value's canonical JSON, so a weak token cannot be
    guessed offline from a row, an export or a configuration digest. ``None`` gives ``""``."""
    if value is None:
        return ""
    from ..audit.events import keyed_digest

    return keyed_digest("auth-secret:" + json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False))


def set_server_secret(server: Any, value: Any) -> None:
    """Give an ``McpServer`` its write-only secret (tenant ``{"bearer": ...}`` or ``{"headers":
    {...}}``; OAuth ``{"client_secret": ...}``; ``None`` clears it): ``auth_secret_sealed`` and
    ``auth_secret_digest`` set together (not saved). A new digest changes the server's
    configuration digest and the authorization identity, so rounds waiting under the old secret are
    denied (``authorization_changed``)."""
    server.auth_secret_sealed = seal(value)
    server.auth_secret_digest = secret_digest(value)
