"""A simulated browser: one signed-in user talking to an ASGI worker over HTTP (``httpx2``) and the
per-user WebSocket ``ws/mrtrweb/`` (``websockets``), as the real pages do.

A round is: POST the tool form (starts the operation) -> the ``operation`` push with status
``awaiting_input`` (the consent card) -> POST the answer to ``operation_answer`` -> the push with
status ``completed``. :func:`answer_post` is the one place that posts an answer (adapt it when the
answer view gains its review step)."""

from __future__ import annotations

import asyncio
import html
import http.cookiejar
import json
import re
import secrets
import time
from typing import Any, Callable

import httpx2
from websockets.asyncio.client import connect

_CSRF_RE = re.compile(r'name="csrfmiddlewaretoken" value="([^"]+)"')
_ROUND_RE = re.compile(r'name="round" value="(\d+)"')
_STATUS_RE = re.compile(r'data-status="([a-z_]+)"')


class BrowserUser:
    """One user's session (cookie minted by :func:`mrtrweb.bench.common.seed`) on one worker."""

    def __init__(self, base: str, session_key: str, server_id: int, http: Any = None) -> None:
        self.base = base
        self.server_id = server_id
        self.session_key = session_key
        self._own_http = http is None
        #: HTTP clients may be shared between users (cookies travel in each request's header)
        self.http = http or new_http()
        self.cookies = {"sessionid": session_key}
        self.csrf = ""
        self.ws: Any = None
        self.reader: asyncio.Task | None = None
        #: WebSocket closed by the server (reopened by the next wait, as the page does)
        self.ws_closed = False
        self.reconnects = 0
        #: waits answered by fetching the panel (no push came within ``FALLBACK_S``)
        self.fallback_fetches = 0
        #: op id -> [(monotonic time, status, html)] of the pushes received
        self.pushes: dict[str, list[tuple[float, str, str]]] = {}
        self._changed = asyncio.Condition()

    @property
    def tool_path(self) -> str:
        return f"/mcp/servers/{self.server_id}/tools/deploy/"

    def _headers(self) -> dict[str, str]:
        return {"Cookie": "; ".join(f"{k}={v}" for k, v in self.cookies.items())}

    async def _get(self, path: str):
        try:
            resp = await self.http.get(self.base + path, headers=self._headers())
        except (httpx2.ReadError, httpx2.RemoteProtocolError):  # a GET is safe to repeat
            resp = await self.http.get(self.base + path, headers=self._headers())
        for name in ("csrftoken", "sessionid"):
            if name in resp.cookies:
                self.cookies[name] = resp.cookies[name]
        return resp

    async def _post(self, path: str, data: dict[str, Any]):
        return await self.http.post(self.base + path, data=data, headers=self._headers())

    async def open(self, fetch_page: bool = True) -> None:
        """Get the CSRF token -- from the tool page, as a browser does (``fetch_page``), or by
        minting the CSRF cookie's secret directly (for thousands of users) -- and open the WebSocket."""
        if fetch_page:
            resp = await self._get(self.tool_path)
            if resp.status_code != 200:
                raise RuntimeError(f"tool page: HTTP {resp.status_code}")
            m = _CSRF_RE.search(resp.text)
            if not m:
                raise RuntimeError("no CSRF token on the tool page")
            self.csrf = m.group(1)
        else:
            self.csrf = self.cookies["csrftoken"] = secrets.token_hex(16)  # 32 characters: a CSRF secret
        await self._connect()

    async def _connect(self) -> None:
        cookies = self._headers()["Cookie"]
        ws_url = self.base.replace("http://", "ws://") + "/ws/mrtrweb/"
        self.ws = await connect(ws_url, origin=self.base, additional_headers={"Cookie": cookies},
                                open_timeout=120, ping_interval=None, max_size=2 ** 22)
        self.ws_closed = False
        self.reader = asyncio.get_running_loop().create_task(self._read())

    async def _fetch_panel(self, op_id: str) -> None:
        """The page's fallback: GET the panel (its ``data-status``) when no push came."""
        resp = await self._get(f"/mcp/operations/{op_id}/panel/")
        m = _STATUS_RE.search(resp.text)
        if m:
            self.pushes.setdefault(op_id, []).append((time.monotonic(), m.group(1), resp.text, time.time(), False))

    async def _read(self) -> None:
        try:
            async for raw in self.ws:
                now = time.monotonic()
                wall = time.time()
                try:
                    msg = json.loads(raw)
                except ValueError:
                    continue
                if msg.get("type") != "operation":
                    continue
                self.pushes.setdefault(msg["id"], []).append((now, msg.get("status", ""), msg.get("html", ""), wall,
                                                              True))
                async with self._changed:
                    self._changed.notify_all()
        except Exception:  # noqa: BLE001 -- connection closed
            pass
        self.ws_closed = True
        async with self._changed:
            self._changed.notify_all()

    async def wait_status(self, op_id: str, status: str, timeout_s: float = 60.0,
                          fallback_s: float = 10.0) -> tuple[float, str, float]:
        """The first push of ``op_id`` with ``status``: (monotonic time received, panel html, wall
        time; wall is NaN when the status was only seen by the fallback panel fetch). As the page
        does, a closed WebSocket is reopened and the panel fetched, and so is the panel after
        ``fallback_s`` seconds without the push."""
        deadline = time.monotonic() + timeout_s
        quiet_until = time.monotonic() + fallback_s
        async with self._changed:  # held while checking: a push's notify cannot slip in between
            while True:
                for t, s, html, wall, pushed in self.pushes.get(op_id, []):
                    if s == status:
                        return t, html, wall if pushed else float("nan")
                    if s in ("failed", "denied", "expired", "interrupted") and status != s:
                        raise RuntimeError(f"operation {op_id} ended {s}")
                now = time.monotonic()
                if now >= deadline:
                    raise TimeoutError(f"no {status} push for {op_id}: "
                                       f"{[p[1] for p in self.pushes.get(op_id, [])]}")
                if self.ws_closed:
                    self.reconnects += 1
                    await self._connect()
                    await self._fetch_panel(op_id)
                    continue
                if now >= quiet_until:
                    self.fallback_fetches += 1
                    quiet_until = now + fallback_s
                    await self._fetch_panel(op_id)
                    continue
                try:
                    await asyncio.wait_for(self._changed.wait(), min(deadline, quiet_until) - now)
                except asyncio.TimeoutError:
                    pass

    async def start(self, arguments: dict[str, Any]) -> str:
        """POST the tool form; returns the operation id (from the redirect)."""
        data = {f"arg-{k}": str(v) for k, v in arguments.items()}
        data["csrfmiddlewaretoken"] = self.csrf
        resp = await self._post(self.tool_path, data)
        if resp.status_code != 302:
            raise RuntimeError(f"start: HTTP {resp.status_code}: {resp.text[:300]}")
        return resp.headers["location"].rstrip("/").split("/")[-1]

    async def round(self, arguments: dict[str, Any], fields: dict[str, Any], timeout_s: float = 60.0,
                    cpu: Callable[[], float] | None = None) -> dict[str, Any]:
        """One whole round; returns its timings (seconds). ``cpu``: a reading of the worker's CPU
        seconds (:func:`mrtrweb.bench.machine.cpu_seconds`) taken where each phase ends: then also
        ``cpu``, the worker's CPU seconds in each phase (``start_post``, ``card`` -- from the start's
        answer to the card --, ``answer_post``, ``to_completed``)."""
        marks = [cpu()] if cpu else []
        t0 = time.monotonic()
        op_id = await self.start(arguments)
        t1 = time.monotonic()
        marks += [cpu()] if cpu else []
        t_card, html, _ = await self.wait_status(op_id, "awaiting_input", timeout_s)
        marks += [cpu()] if cpu else []
        m = _ROUND_RE.search(html)
        await answer_post(self, op_id, m.group(1) if m else "1", fields)
        t_answered = time.monotonic()
        marks += [cpu()] if cpu else []
        t_done, _, _ = await self.wait_status(op_id, "completed", timeout_s)
        marks += [cpu()] if cpu else []
        self.pushes.pop(op_id, None)
        out: dict[str, Any] = {"op_id": op_id, "total": t_done - t0, "start_post": t1 - t0, "to_card": t_card - t0,
                               "answer_post": t_answered - t_card, "to_completed": t_done - t_answered}
        if cpu:
            out["cpu"] = dict(zip(("start_post", "card", "answer_post", "to_completed"),
                                  (b - a for a, b in zip(marks, marks[1:]))))
        return out

    async def close(self) -> None:
        if self.ws is not None:
            await self.ws.close()
        if self.reader is not None:
            self.reader.cancel()
        if self._own_http:
            await self.http.aclose()


_REVIEW_TOKEN = re.compile(r'<input type="hidden" name="review_token" value="([^"]*)">')


async def answer_post(user: BrowserUser, op_id: str, round_no: str, fields: dict[str, Any]) -> None:
    """Accept the consent card with ``fields`` as a person does: Accept (the server renders the
    review, nothing sent), then Send with the review's signed token (the answer leaves)."""
    url = f"/mcp/operations/{op_id}/answer/"
    data = {"action": "accept", "round": round_no, "csrfmiddlewaretoken": user.csrf, **fields}
    review = await user._post(url, data)
    match = _REVIEW_TOKEN.search(review.text) if review.status_code == 200 else None
    if match is None:
        raise RuntimeError(f"review: HTTP {review.status_code}: {review.text[:300]}")
    resp = await user._post(url, dict(data, action="send", review_token=html.unescape(match.group(1))))
    if resp.status_code != 302:
        raise RuntimeError(f"answer: HTTP {resp.status_code}: {resp.text[:300]}")


def new_http(max_connections: int = 64) -> Any:
    """An HTTP client whose own cookie jar keeps nothing (users' cookies go in each request)."""
    jar = http.cookiejar.CookieJar(policy=http.cookiejar.DefaultCookiePolicy(allowed_domains=[]))
    return httpx2.AsyncClient(follow_redirects=False, timeout=120.0, cookies=jar,
                              # idle connections dropped before uvicorn's 5 s keep-alive closes them
                              # (reusing one the server is closing fails with ReadError)
                              limits=httpx2.Limits(max_connections=max_connections,
                                                   max_keepalive_connections=max_connections, keepalive_expiry=2.0))


async def open_users(base: str | list[str], sessions: list[str], server_id: int, concurrency: int = 16, *,
                     http: Any = None, fetch_page: bool = True) -> list[BrowserUser]:
    """Open one :class:`BrowserUser` per session (round-robin over the worker URLs in ``base``)."""
    bases = [base] if isinstance(base, str) else base
    users = [BrowserUser(bases[i % len(bases)], key, server_id, http) for i, key in enumerate(sessions)]
    sem = asyncio.Semaphore(concurrency)

    async def one(u: BrowserUser) -> None:
        async with sem:
            await u.open(fetch_page)

    await asyncio.gather(*(one(u) for u in users))
    return users
