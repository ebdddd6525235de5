"""A stand-in portal's tenant resolver for tests/tenancy/test_tenancy.py: the organisations of each user
are whatever the test puts in :data:`ORGS` (by username); :data:`FAIL` makes it raise."""

from __future__ import annotations

from typing import Any

from mrtrweb.tenancy.sync import TenantGrant

#: username -> the grants the resolver answers for them
ORGS: dict[str, list[Any]] = {}
#: when set, the resolver raises it (a portal outage)
FAIL: list[BaseException] = []
#: usernames the resolver was asked about, in order
ASKED: list[str] = []


def resolve(user: Any) -> list[Any]:
    """The portal's organisations of ``user`` (the ``MRTRWEB["TENANT_RESOLVER"]`` callable)."""
    ASKED.append(user.get_username())
    if FAIL:
        raise FAIL[0]
    return list(ORGS.get(user.get_username(), []))


def reset() -> None:
    """Forget every test's organisations, failure and calls."""
    ORGS.clear()
    FAIL.clear()
    ASKED.clear()


NOT_CALLABLE = "not a function"
__all__ = ["ORGS", "FAIL", "ASKED", "resolve", "reset", "TenantGrant", "NOT_CALLABLE"]
