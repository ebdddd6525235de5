"""URL-mode elicitation safety (mrtr-gate.md §1 row ``unsafe_url_elicitation``, §3).

A URL-mode request is accepted only with a parseable absolute ``https`` URL that has a host and
no user info. :func:`describe_url` gives what the consent card shows: the full URL, its host,
the registrable part to highlight, and whether the host is punycode/IDN or otherwise confusable.
"""

from __future__ import annotations

import dataclasses
import ipaddress
import re
import unicodedata
import urllib.parse

MAX_URL_LENGTH = 65536
# White space, control characters and the backslash (which browsers read as "/", so that
# "https://evil.test\@good.test" would not open what it shows) are refused; other characters are
# escaped when shown and percent-encoded by the browser, as the URL standard does.
_FORBIDDEN = re.compile(r"[\x00-\x20\x7f-\x9f\\]")
# Format characters (bidi controls such as U+202E, zero-width characters) and line/paragraph
# separators: allowed in a URL's path or query, but shown visibly (mrtrweb.text.display) and warned about.
_INVISIBLE_CATEGORIES = frozenset({"Cf", "Zl", "Zp"})
_HOST_LABEL = re.compile(r"^(?!-)[a-z0-9_-]{1,63}(?<!-)$")


class UnsafeUrl(ValueError):
    """The URL is not a safe absolute https URL; ``str(exc)`` says why."""


@dataclasses.dataclass(frozen=True)
class UrlView:
    """What the person is shown for a URL-mode request.

    Attributes:
        url: the full URL exactly as the server sent it.
        host: the host, lower-case ASCII (punycode kept as ``xn--``).
        registrable: the part of the host to highlight (the last two labels, or the IP).
        display_host: the Unicode form of an IDN host, else ``host``.
        warnings: reasons to look twice (punycode/IDN, mixed scripts, IP address, odd port,
            invisible or bidi characters).
    """

    url: str
    host: str
    registrable: str
    display_host: str
    warnings: tuple[str, ...]


def check_url(url: object) -> UrlView:
    """Check a URL-mode URL.

    Raises:
        UnsafeUrl: not a string, not https, relative, with user info, unparseable host or port,
            white space or control characters.
    """
    if not isinstance(url, str):
        raise UnsafeUrl("url must be a string")
    if not url or len(url) > MAX_URL_LENGTH:
        raise UnsafeUrl("url is empty or too long")
    if _FORBIDDEN.search(url):
        raise UnsafeUrl("url contains white space, control or unsafe characters")
    try:
        url.encode("utf-8")
        parts = urllib.parse.urlsplit(url)
        port = parts.port
    except (ValueError, UnicodeError) as exc:
        raise UnsafeUrl("url does not parse") from exc
    if parts.scheme.lower() != "https":
        raise UnsafeUrl("url scheme must be https")
    if not url[len(parts.scheme):].startswith("://"):
        raise UnsafeUrl("url must be absolute (https://host/...)")
    if "@" in parts.netloc or parts.username is not None or parts.password is not None:
        raise UnsafeUrl("url must not carry user info")
    host = parts.hostname
    if not host:
        raise UnsafeUrl("url has no host")
    bracketed = "[" in parts.netloc
    host = host.rstrip(".") if not host.startswith("[") else host
    warnings: list[str] = []
    display_host = host
    try:
        ip = ipaddress.ip_address(host.strip("[]"))
    except ValueError:
        ip = None
    if bracketed and (ip is None or ip.version != 6 or "%" in host):
        raise UnsafeUrl("url host in brackets is not an IPv6 address")  # IPvFuture and zone ids do not parse
    if ip is not None:
        warnings.append("The address is a raw IP address, not a named site.")
        registrable = host
    else:
        try:
            ascii_host = host.encode("idna").decode("ascii").lower() if not host.isascii() else host.lower()
        except UnicodeError as exc:
            raise UnsafeUrl("url host is not a valid domain name") from exc
        labels = ascii_host.split(".")
        if not all(_HOST_LABEL.match(label) for label in labels):
            raise UnsafeUrl("url host is not a valid domain name")
        if not host.isascii() or any(label.startswith("xn--") for label in labels):
            display_host = ".".join(_punycode_label(label) for label in labels)
            warnings.append(
                "The host uses international (punycode/IDN) characters and may imitate another site: "
                f"its ASCII form is {ascii_host}."
            )
            if _mixed_scripts(display_host):
                warnings.append("The host mixes characters from different alphabets.")
        host = ascii_host
        registrable = ".".join(labels[-2:]) if len(labels) >= 2 else ascii_host
    if port is not None and port != 443:
        warnings.append(f"The address uses the unusual port {port}.")
    if any(unicodedata.category(ch) in _INVISIBLE_CATEGORIES for ch in url):
        warnings.append("The address contains invisible or direction-changing characters (shown as ⟨U+…⟩): "
                        "it may not go where it seems to.")
    return UrlView(url=url, host=host, registrable=registrable, display_host=display_host, warnings=tuple(warnings))


def _punycode_label(label: str) -> str:
    """The Unicode form of an ``xn--`` label (other labels as they are); a label that is not valid
    Punycode, or decodes to nothing or to control characters, does not parse as a host."""
    if not label.startswith("xn--"):
        return label
    try:
        text = label[4:].encode("ascii").decode("punycode")
    except UnicodeError as exc:
        raise UnsafeUrl("url host has an invalid punycode label") from exc
    if not text or any(unicodedata.category(ch)[0] == "C" for ch in text):
        raise UnsafeUrl("url host has an invalid punycode label")
    return text


def _mixed_scripts(text: str) -> bool:
    scripts = set()
    for ch in text:
        if ch in ".-" or ch.isdigit():
            continue
        try:
            name = unicodedata.name(ch)
        except ValueError:
            return True
        scripts.add(name.split(" ")[0])
    return len(scripts) > 1
