"""Running a coroutine function from sync code (a signal handler, an ``on_commit`` callback), whether
or not an event loop runs in the calling thread."""

from __future__ import annotations

import asyncio
import concurrent.futures
from typing import Any

from asgiref.sync import async_to_sync

__all__ = ["run_async"]


def run_async(fn, *args: Any, **kwargs: Any) -> None:
    """Run coroutine function ``fn`` from sync code; in another thread when an event loop runs in
    this one (sync ORM calls allowed inside async code by ``DJANGO_ALLOW_ASYNC_UNSAFE``)."""
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        async_to_sync(fn)(*args, **kwargs)
        return
    with concurrent.futures.ThreadPoolExecutor(1) as pool:
        pool.submit(async_to_sync(fn), *args, **kwargs).result()
