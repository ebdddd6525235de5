"""What the house move (issue 27) must not have renamed with the modules: keys, salts, session
keys and group names derived from a module's old dotted name. Each value below was computed with
the code before the move (commit 3e911cd); a deployment upgraded across the move keeps verifying
its audit digests and checkpoints, its people's saved filters, and its sockets' session groups
(a worker of each version during a rolling restart computes the same group)."""

from __future__ import annotations

from django.core import signing
from django.test import override_settings

SECRET = "pinned-secret-key-for-the-test-0123456789-abcdefghijklmnop"


@override_settings(SECRET_KEY=SECRET, MRTRWEB={})
def test_audit_digests_and_checkpoints_are_those_of_before_the_move():
    from mrtrweb.audit import events

    assert events.keyed_digest("alice") == \
        "hmac-sha256:b0da3aaf5cba2cf31ec66329e1f241ee36ee184e21897e28bd1a09e7ece48d2f"
    # a checkpoint signed before the move (a timestamped token) still verifies under today's salt
    before = ("eyJ0ZW5hbnQiOiI3Iiwic2VxdWVuY2UiOjMsImhhc2giOiJhYmFiYWJhYmFiYWJhYmFiYWJhYmFiYWJhYmFiYWJhYmFiYWJhYmFi"
              "YWJhYmFiYWJhYmFiYWJhYmFiYWJhYmFiIn0:1xZC8t:LHzjqwMICuVb8C6FeuCMZQHkZsYBPt7kfNiAFsZMmT0")
    assert signing.loads(before, salt=events.CHECKPOINT_SALT) == {"tenant": "7", "sequence": 3, "hash": "ab" * 32}


@override_settings(SECRET_KEY=SECRET)
def test_session_groups_and_saved_filters_keep_their_names():
    from mrtrweb.audit.history import saved
    from mrtrweb.live import sessions

    assert sessions.session_group("abc123") == "mrtrweb.session.c5f11e94dd60c3c931f595ba9dd2894754e1faf0"
    assert saved.SESSION_KEY == "mrtrweb.history.filters"
