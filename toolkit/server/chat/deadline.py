"""A non-streamed chat request's limits: the server's deadline (``--request-timeout``), and its
client's connection. When either ends first the work is cancelled, which frees the request's engine
slots at once (:func:`~.generation.generate` releases the request as it unwinds)."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Coroutine
from typing import Any, TypeVar

from fastapi import Request

from .errors import ClientClosedRequest, DeadlineExceeded

T = TypeVar("T")


async def _disconnected(request: Request) -> None:
    """Returns when the client closes its connection (the body has been read already, so the next
    ASGI message is the disconnect)."""
    while (await request.receive())["type"] != "http.disconnect":
        await asyncio.sleep(0.05)


async def within_limits(request: Request, seconds: float | None, work: Coroutine[Any, Any, T]) -> T:
    """``work``'s result; :class:`DeadlineExceeded` after ``seconds`` (None: no deadline), and
    :class:`ClientClosedRequest` as soon as the client disconnects, ``work`` cancelled in both."""
    task = asyncio.ensure_future(work)
    watcher = asyncio.ensure_future(_disconnected(request))
    try:
        done, _ = await asyncio.wait({task, watcher}, timeout=seconds, return_when=asyncio.FIRST_COMPLETED)
    finally:
        for pending in (task, watcher):
            pending.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await pending
    if task in done:
        return task.result()
    if watcher in done:
        raise ClientClosedRequest("The client closed the connection before the answer.")
    raise DeadlineExceeded(f"The request did not finish within the server's deadline of {seconds:g} s.")
