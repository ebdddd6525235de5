"""The consent tests' shared fixtures."""

from __future__ import annotations

import ssl
import threading

import pytest

from tests.certs import self_signed
from tests.consent.counting_site import CountingHttpsServer


@pytest.fixture
def counting_site(tmp_path):
    """The counting HTTPS site (:class:`~tests.consent.counting_site.CountingHttpsServer`) on 127.0.0.1."""
    cert, key = self_signed(tmp_path)
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.load_cert_chain(cert, key)
    server = CountingHttpsServer(context)
    thread = threading.Thread(target=server.serve_forever, name="counting-site", daemon=True)
    thread.start()
    yield server
    server.shutdown()
    server.server_close()
    thread.join(5)
