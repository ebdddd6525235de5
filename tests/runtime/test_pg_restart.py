"""A PostgreSQL restart loses no answer (issue 14, item 1: the live round is in PostgreSQL now).

After a restart every connection the workers' pools held is dead, and a dead pooled connection is
only found out when it is used. The answer's request and the background task that sends its
retry each take a connection from the pool: the pool checks a connection before handing it out
(``CONN_HEALTH_CHECKS``, settings_prod), so neither gets a dead one -- without that, an answer is
accepted (``submitted``), its retry's task fails on its first query, and the answer is never
sent (the operation stays ``running``). Right after the restart an answer may still be refused
503 while the pool reconnects: nothing is sent then, and it is answered again. Real processes:
one uvicorn worker on a private PostgreSQL server (tests/runtime/test_topology.py's ``own_postgres``),
restarted while rounds wait and the pool holds several connections.
"""

from __future__ import annotations

import time
from concurrent.futures import ThreadPoolExecutor

import pytest

from ..topology import Cluster, PrivateDatabase, WebSession

pytestmark = [pytest.mark.services]


def test_an_answer_after_a_postgres_restart_is_sent_once(demo_mcp, own_postgres):  # noqa: F811
    class Db(PrivateDatabase):
        def __init__(self, url: str) -> None:  # the private server's own database
            self.name, self.url = "postgres", url

    c = Cluster(Db(own_postgres.url), demo_mcp.url, MRTRWEB_DB_POOL_TIMEOUT_S="2")
    try:
        base = c.start("P")
        user = WebSession()
        user.login(base, "alice", "alice-demo-pw")
        demo_mcp.log.clear()
        ops = [user.start(base, c.server_id(), "connect_account", {"provider": f"pg-restart-{i}"}) for i in range(3)]
        c.wait_status(ops, "awaiting_input")
        with ThreadPoolExecutor(max_workers=8) as pool:  # the worker's pool holds several connections
            list(pool.map(lambda op_id: user.page(base, op_id), ops * 6))

        own_postgres.stop()
        own_postgres.start()
        for op_id in ops:
            deadline = time.monotonic() + 30
            while True:  # right after the restart the pool may still be reconnecting: 503, nothing sent
                status, body = user.answer(base, op_id, 1)
                if status != 503 or time.monotonic() > deadline:
                    break
                assert "Nothing was sent" in body
                time.sleep(0.3)
            assert status == 302, (status, body[:400])
        c.wait_status(ops, "completed", timeout_s=30)  # each accepted answer's retry went out
        assert demo_mcp.calls[("connect_account", True)] == len(ops)  # each answer sent, once
        log = c.logs["P"].read_text()
        assert "Traceback" not in log and "crashed" not in log, log[-3000:]
    finally:
        c.stop_all()
