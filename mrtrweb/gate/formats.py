"""String formats the gate really checks (mrtr-gate.md §2, row ``input_response_schema_mismatch``).

``jsonschema``'s own ``FormatChecker`` checks ``email`` only for an ``@`` and ``uri`` only when an
optional package is installed; the gate needs real checks, so each supported format has a checker
here. A format not in :data:`CHECKERS` cannot be enforced, and a schema naming one is refused.
"""

from __future__ import annotations

import datetime
import ipaddress
import re
import uuid
from collections.abc import Callable

_LABEL = r"(?!-)[A-Za-z0-9-]{1,63}(?<!-)"
_HOSTNAME_RE = re.compile(rf"^(?=.{{1,253}}\.?$){_LABEL}(?:\.{_LABEL})*\.?$")


def is_hostname(value: str) -> bool:
    """RFC 1123 host name (ASCII; IDNs must be given in their ``xn--`` form)."""
    return bool(_HOSTNAME_RE.match(value)) and not value.endswith("\n")


_ATEXT = r"[A-Za-z0-9!#$%&'*+/=?^_`{|}~-]+"
_LOCAL_RE = re.compile(rf"^{_ATEXT}(?:\.{_ATEXT})*$")


def is_email(value: str) -> bool:
    """An address ``local@domain``: a dot-atom local part and a domain that is a host name with
    at least one dot, or a bracketed IP literal. Quoted local parts and internationalized
    addresses are not accepted."""
    if value.count("@") != 1 or len(value) > 254:
        return False
    local, domain = value.split("@")
    if not local or len(local) > 64 or not _LOCAL_RE.match(local) or local.endswith("\n"):
        return False
    if domain.startswith("[") and domain.endswith("]"):
        literal = domain[1:-1]
        if literal.lower().startswith("ipv6:"):
            return _is_ip(literal[5:], 6)
        return _is_ip(literal, 4)
    return "." in domain.strip(".") and is_hostname(domain) and not domain.endswith(".")


def _is_ip(value: str, version: int) -> bool:
    try:
        addr = ipaddress.ip_address(value)
    except ValueError:
        return False
    return addr.version == version


def is_ipv4(value: str) -> bool:
    """Dotted-quad IPv4 address, no leading zeros."""
    return bool(re.fullmatch(r"(?:25[0-5]|2[0-4]\d|1\d\d|[1-9]?\d)(?:\.(?:25[0-5]|2[0-4]\d|1\d\d|[1-9]?\d)){3}", value, re.ASCII))


def is_ipv6(value: str) -> bool:
    """IPv6 address (RFC 4291 text forms, no zone id)."""
    return "%" not in value and _is_ip(value, 6)


_UNRESERVED = r"A-Za-z0-9\-._~"
_SUB_DELIMS = r"!$&'()*+,;="
_PCHAR = rf"(?:[{_UNRESERVED}{_SUB_DELIMS}:@]|%[0-9A-Fa-f]{{2}})"
_URI_RE = re.compile(
    rf"^(?P<scheme>[A-Za-z][A-Za-z0-9+.\-]*):"
    rf"(?P<hier>(?://(?P<authority>(?:[{_UNRESERVED}{_SUB_DELIMS}:@\[\]]|%[0-9A-Fa-f]{{2}})*))?"
    rf"(?:/|{_PCHAR})*)"
    rf"(?:\?(?:{_PCHAR}|[/?])*)?"
    rf"(?:#(?:{_PCHAR}|[/?])*)?$"
)


def is_uri(value: str) -> bool:
    """An absolute URI per RFC 3986 (``scheme:`` then hier-part, optional query and fragment);
    only RFC 3986 characters, ``[]`` only around an IP literal host."""
    m = _URI_RE.match(value)
    if not m or value.endswith("\n"):
        return False
    authority = m.group("authority")
    if authority is not None:
        host_port = authority.rsplit("@", 1)[-1]
        if "[" in host_port or "]" in host_port:
            lit = re.fullmatch(r"\[([0-9A-Fa-f:.]+|v[0-9A-Fa-f]+\.[" + _UNRESERVED + _SUB_DELIMS + r":]+)\](?::\d*)?", host_port)
            if not lit:
                return False
            if not lit.group(1).startswith("v") and not is_ipv6(lit.group(1)):
                return False
        elif "@" in authority.rsplit("@", 1)[0] or "[" in authority or "]" in authority:
            return False
        elif host_port.count(":") > 1:
            return False
        elif ":" in host_port and not host_port.rsplit(":", 1)[1].isdigit() and host_port.rsplit(":", 1)[1] != "":
            return False
    elif "[" in value or "]" in value:
        return False
    return True


_DATE_RE = re.compile(r"^(\d{4})-(\d{2})-(\d{2})$", re.ASCII)  # ASCII digits only, as RFC 3339
_TIME_RE = re.compile(r"^(\d{2}):(\d{2}):(\d{2})(\.\d+)?([Zz]|[+-]\d{2}:\d{2})$", re.ASCII)


def is_date(value: str) -> bool:
    """RFC 3339 ``full-date``: ``YYYY-MM-DD`` and a real calendar day."""
    m = _DATE_RE.match(value)
    if not m or value.endswith("\n"):
        return False
    year, month, day = int(m.group(1)), int(m.group(2)), int(m.group(3))
    if not 1 <= month <= 12 or day < 1:
        return False
    leap = year % 4 == 0 and (year % 100 != 0 or year % 400 == 0)  # proleptic Gregorian; 0000 is leap
    days = [31, 29 if leap else 28, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31][month - 1]
    return day <= days


def is_time(value: str) -> bool:
    """RFC 3339 ``full-time``: ``HH:MM:SS[.frac](Z|+HH:MM|-HH:MM)``; second 60 only at minute 59."""
    m = _TIME_RE.match(value)
    if not m or value.endswith("\n"):
        return False
    hour, minute, second = int(m.group(1)), int(m.group(2)), int(m.group(3))
    if hour > 23 or minute > 59 or second > 60 or (second == 60 and minute != 59):
        return False
    offset = m.group(5)
    if offset not in ("Z", "z"):
        oh, om = int(offset[1:3]), int(offset[4:6])
        if oh > 23 or om > 59:
            return False
    return True


def is_date_time(value: str) -> bool:
    """RFC 3339 ``date-time``: ``full-date`` ``T`` ``full-time`` (``T``/``t`` separator)."""
    if len(value) < 11 or value[10] not in "Tt":
        return False
    return is_date(value[:10]) and is_time(value[11:])


def is_uuid(value: str) -> bool:
    """RFC 4122 textual UUID, ``8-4-4-4-12`` hex digits."""
    if not re.fullmatch(r"[0-9A-Fa-f]{8}-[0-9A-Fa-f]{4}-[0-9A-Fa-f]{4}-[0-9A-Fa-f]{4}-[0-9A-Fa-f]{12}", value):
        return False
    uuid.UUID(value)
    return True


#: format name -> checker(str) -> bool
CHECKERS: dict[str, Callable[[str], bool]] = {
    "email": is_email,
    "uri": is_uri,
    "date": is_date,
    "date-time": is_date_time,
    "time": is_time,
    "uuid": is_uuid,
    "ipv4": is_ipv4,
    "ipv6": is_ipv6,
    "hostname": is_hostname,
}

#: Human text for a format, used in validation messages.
DESCRIPTIONS: dict[str, str] = {
    "email": "an email address (name@domain.example)",
    "uri": "an absolute URI (for example https://example.com/path)",
    "date": "a calendar date (YYYY-MM-DD)",
    "date-time": "a date and time (YYYY-MM-DDTHH:MM:SSZ)",
    "time": "a time (HH:MM:SSZ)",
    "uuid": "a UUID",
    "ipv4": "an IPv4 address",
    "ipv6": "an IPv6 address",
    "hostname": "a host name",
}
