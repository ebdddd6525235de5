"""The one TLS client context of the process (:func:`tls_client_context`)."""

from __future__ import annotations

import functools
import ssl

import httpx2


@functools.cache
def tls_client_context() -> ssl.SSLContext:
    """The TLS client context every :class:`McpConnection` of this process shares.

    It is httpx2's default (``httpx2.create_ssl_context()``: certificate and host name verified,
    the CA bundle httpx2 uses, ``SSL_CERT_FILE``/``SSL_CERT_DIR`` honoured as httpx2 honours
    them), built once. An httpx2 client left to build its own context loads the CA bundle each
    time: about 25 ms of CPU and 0.8 MiB per connection, i.e. per user and server, measured in
    ``docs/benchmarks`` (pending capacity). Sharing one ``ssl.SSLContext`` between clients is
    what the ``ssl`` module designs it for; nothing per user lives in it.
    """
    return httpx2.create_ssl_context()

