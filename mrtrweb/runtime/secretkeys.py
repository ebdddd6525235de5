"""Secret keys: which values are worthless as a key (known or weak), and the standalone site's own
random key, made once on first run and kept in a file.

Importable from a settings module (nothing here needs Django to be set up).

* :func:`key_problem` -- ``None`` for a usable key, else why it is not (a short English phrase).
* :func:`load_or_create` -- the key kept in a file (mode 0600), created atomically on first use:
  processes starting at the same moment all end up with the same key.
"""

from __future__ import annotations

import errno
import os
import secrets
import stat
import tempfile
import time
from pathlib import Path

from django.core.exceptions import ImproperlyConfigured

#: keys that were ever written into this repository (settings, tests, docs): anyone who read it
#: knows them. A key listed here signs nothing in production (system check ``mrtrweb.E020``).
KNOWN_KEYS = frozenset({
    "dev-only-insecure-key-change-me-0123456789abcdefghijklmnop",  # the standalone/demo site until 2026-12
    "embed-test-key-0123456789-abcdefghijklmnopqrstuvwxyz",  # tests/embed_project until 2026-12
})
#: the prefix of keys made by ``django-admin startproject`` (Django's ``security.W009``)
INSECURE_PREFIX = "django-insecure-"
#: Django's ``security.W009`` criteria: at least this many characters ...
MIN_LENGTH = 50
#: ... and at least this many different characters
MIN_UNIQUE_CHARACTERS = 5

#: the length of a key this module makes: ``secrets.token_urlsafe(50)`` gives 67 URL-safe
#: characters (400 random bits)
_NEW_KEY_BYTES = 50
#: how long a reader waits for a key file another process is still writing (seconds)
_WAIT_FOR_WRITER_S = 5.0


def key_problem(value: object) -> str | None:
    """Why ``value`` cannot be a secret key in production, or ``None`` when it can.

    Refused: a non-string, a key in :data:`KNOWN_KEYS` (also with surrounding white space), a key
    with Django's ``django-insecure-`` prefix, a key shorter than :data:`MIN_LENGTH` characters or
    with fewer than :data:`MIN_UNIQUE_CHARACTERS` different characters. Bytes are judged as
    Latin-1 text. The phrase never contains the key."""
    if isinstance(value, bytes):
        value = value.decode("latin-1")
    if not isinstance(value, str):
        return f"it is not a string ({type(value).__name__})"
    if value in KNOWN_KEYS or value.strip() in KNOWN_KEYS:
        return "it is published in the mrtrweb repository"
    if value.startswith(INSECURE_PREFIX):
        return f"it starts with Django's {INSECURE_PREFIX!r} prefix (made by startproject for development)"
    if len(value) < MIN_LENGTH:
        return f"it has {len(value)} characters, fewer than {MIN_LENGTH}"
    if len(set(value)) < MIN_UNIQUE_CHARACTERS:
        return f"it has fewer than {MIN_UNIQUE_CHARACTERS} different characters"
    return None


def load_or_create(path: str | os.PathLike[str]) -> str:
    """The secret key kept in the file ``path``, made on first use.

    A new key is ``secrets.token_urlsafe(50)`` (67 characters), written to a temporary file (mode
    0600) in the same directory and published with ``os.link``, which fails when the file exists:
    of several processes starting at once, the first link wins and every process reads that key.
    An existing file readable by others is narrowed to 0600.

    Raises :class:`~django.core.exceptions.ImproperlyConfigured` when the file is not a regular
    file, cannot be read or made, or holds an unusable key (:func:`key_problem`): it is never
    replaced silently, since a new key signs everyone out and changes the audit digests."""
    path = Path(path)
    try:
        return _read(path)
    except FileNotFoundError:
        pass
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        _create(path, secrets.token_urlsafe(_NEW_KEY_BYTES))
        return _read(path)
    except OSError as exc:
        raise ImproperlyConfigured(f"cannot make the secret key file {path}: {exc.strerror or exc}; "
                                   "set DJANGO_SECRET_KEY or make its directory writable") from exc


def _create(path: Path, key: str) -> None:
    """Publish ``key`` at ``path`` unless a file is there already (then keep that one)."""
    fd, tmp = tempfile.mkstemp(prefix=".secret_key-", dir=path.parent)  # mode 0600
    try:
        with os.fdopen(fd, "w", encoding="ascii") as out:
            out.write(key + "\n")
            out.flush()
            os.fsync(out.fileno())
        try:
            os.link(tmp, path)
        except FileExistsError:
            return  # another process was first: its key is the key
        except OSError as exc:
            if exc.errno not in (errno.EPERM, errno.EOPNOTSUPP, errno.ENOTSUP, errno.EMLINK):
                raise
            _create_exclusive(path, key)  # a file system without hard links
    finally:
        os.unlink(tmp)


def _create_exclusive(path: Path, key: str) -> None:
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    except FileExistsError:
        return
    with os.fdopen(fd, "w", encoding="ascii") as out:
        out.write(key + "\n")
        out.flush()
        os.fsync(out.fileno())


def _read(path: Path) -> str:
    """The key in ``path`` (raises ``FileNotFoundError`` when there is none)."""
    deadline = time.monotonic() + _WAIT_FOR_WRITER_S
    while True:
        try:
            fd = os.open(path, os.O_RDONLY)
        except FileNotFoundError:
            raise
        except OSError as exc:
            raise ImproperlyConfigured(f"cannot read the secret key file {path}: {exc.strerror or exc}") from exc
        try:
            info = os.fstat(fd)
            if not stat.S_ISREG(info.st_mode):
                raise ImproperlyConfigured(f"the secret key file {path} is not a regular file")
            if info.st_mode & 0o077:
                os.fchmod(fd, 0o600)
            with os.fdopen(fd, "r", encoding="ascii", errors="replace") as src:
                fd = -1
                text = src.read(4096)
        except OSError as exc:
            raise ImproperlyConfigured(f"cannot read the secret key file {path}: {exc.strerror or exc}") from exc
        finally:
            if fd >= 0:
                os.close(fd)
        key = text.strip()
        if key or time.monotonic() > deadline:
            break
        time.sleep(0.05)  # only without hard links: the creating process is still writing
    problem = key_problem(key)
    if problem:
        raise ImproperlyConfigured(f"the secret key file {path} holds no usable key ({problem}); "
                                   "restore it from a backup, or delete it to make a new key (this signs "
                                   "everyone out and changes the audit digests of new rows)")
    return key
