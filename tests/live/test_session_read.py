"""The socket's session and user read in one statement (:mod:`mrtrweb.live.session_read`): every
push's re-validation (:func:`mrtrweb.live.sessions.session_denial`) says exactly what Django's own
two reads say -- for a valid session, one expired, deleted, of another user, with a stale auth
hash, of an inactive or deleted user, under a backend that lets inactive users in -- and the one
statement is what serves (one query, not two); a session engine or backend it does not know is
left to Django's calls."""

from __future__ import annotations

import datetime

import pytest
from django.contrib.auth import get_user_model
from django.contrib.sessions.models import Session
from django.db import connection
from django.test import Client
from django.test.utils import CaptureQueriesContext
from django.utils import timezone

from mrtrweb.live import session_read, sessions

pytestmark = pytest.mark.django_db

BACKEND = "django.contrib.auth.backends.ModelBackend"


def _signed_in(name: str, backend: str = BACKEND):
    user = get_user_model().objects.create_user(name, password="pw-0123456789")
    client = Client()
    client.force_login(user, backend=backend)
    return user, client.session.session_key


def _both_ways(key, user_id):
    """(what session_denial says with the one statement, what it says with Django's reads)."""
    fast = sessions.session_denial(key, user_id)
    real = session_read.read
    session_read.read = lambda *a: None
    try:
        slow = sessions.session_denial(key, user_id)
    finally:
        session_read.read = real
    return fast, slow


def test_a_valid_session_is_read_in_one_statement():
    user, key = _signed_in("ann")
    with CaptureQueriesContext(connection) as one:
        assert sessions.session_denial(key, user.pk) == ""
    assert len(one) == 1, [q["sql"][:80] for q in one]
    read = session_read.read(key, user.pk)
    assert read is not None and read.user.pk == user.pk and read.data["_auth_user_id"] == str(user.pk)
    assert _both_ways(key, user.pk) == ("", "")


@pytest.mark.parametrize("case", ["expired", "deleted", "other_user", "password_changed", "inactive",
                                  "user_deleted", "bad_key", "no_key"])
def test_every_ended_session_is_judged_as_django_judges_it(case):
    user, key = _signed_in("bob")
    other, _ = _signed_in("cat")
    user_id = user.pk
    if case == "expired":
        Session.objects.filter(pk=key).update(expire_date=timezone.now() - datetime.timedelta(seconds=1))
    elif case == "deleted":
        Session.objects.filter(pk=key).delete()
    elif case == "other_user":
        user_id = other.pk
    elif case == "password_changed":
        user.set_password("another-pw-0123")
        user.save()
    elif case == "inactive":
        get_user_model().objects.filter(pk=user.pk).update(is_active=False)
    elif case == "user_deleted":
        get_user_model().objects.filter(pk=user.pk).delete()
    elif case == "bad_key":
        key = "short"
    elif case == "no_key":
        key = ""
    fast, slow = _both_ways(key, user_id)
    assert fast == slow and fast != "", (case, fast, slow)
    expected = {"expired": sessions.SESSION_GONE, "deleted": sessions.SESSION_GONE, "bad_key": sessions.SESSION_GONE,
                "no_key": sessions.SESSION_GONE, "other_user": sessions.SESSION_INVALID,
                "password_changed": sessions.SESSION_INVALID, "inactive": sessions.USER_ENDED,
                "user_deleted": sessions.USER_ENDED}
    assert fast == expected[case]


def test_a_backend_that_lets_inactive_users_in_is_asked_as_django_asks_it(settings):
    backend = "django.contrib.auth.backends.AllowAllUsersModelBackend"
    settings.AUTHENTICATION_BACKENDS = [*settings.AUTHENTICATION_BACKENDS, backend]
    user, key = _signed_in("dan", backend)
    get_user_model().objects.filter(pk=user.pk).update(is_active=False)
    assert _both_ways(key, user.pk) == ("", "")  # its user_can_authenticate lets them in


def test_a_session_engine_it_does_not_know_is_left_to_django(settings):
    user, key = _signed_in("eve")
    settings.SESSION_ENGINE = "django.contrib.sessions.backends.cached_db"
    assert session_read.read(key, user.pk) is None
    assert sessions.session_denial(key, user.pk) == ""  # Django's store (cached_db reads the same row)


@pytest.mark.django_db(transaction=True)
def test_a_user_model_that_extends_another_is_left_to_django(monkeypatch):
    """A user model whose fields live in two tables (multi-table inheritance: the parent's in the
    parent's) is not read by the one statement (review of session 22: it selected the parent's
    columns from the child's table and failed, every push taken for an outage): Django's calls
    read it, and the socket's session holds."""
    import django.contrib.auth as auth
    from django.apps import apps
    from django.contrib.auth.models import User
    from django.db import models

    class ChildUser(User):
        nickname = models.CharField(max_length=20, default="n")

        class Meta:
            app_label = "mrtrweb"

    with connection.schema_editor() as editor:
        editor.create_model(ChildUser)
    try:
        user = ChildUser.objects.create_user("child", password="pw-0123456789")
        client = Client()
        client.force_login(user, backend=BACKEND)
        key = client.session.session_key
        monkeypatch.setattr(auth, "get_user_model", lambda: ChildUser)
        monkeypatch.setattr("django.contrib.auth.backends.UserModel", ChildUser)
        session_read._SQL.clear()
        assert session_read.read(key, user.pk) is None
        assert sessions.session_denial(key, user.pk) == ""
    finally:
        session_read._SQL.clear()
        with connection.schema_editor() as editor:
            editor.delete_model(ChildUser)
        apps.all_models["mrtrweb"].pop("childuser", None)
        apps.clear_cache()
