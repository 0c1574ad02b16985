"""Running user functions with a time limit, from sync code (threads, and a background event loop
for coroutines) and from async code (``asyncio.wait_for``), in the caller's context (so tracing sees
the current call as the parent)."""

from __future__ import annotations

import asyncio
import contextvars
import inspect
import threading
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

T = TypeVar("T")
_portal: asyncio.AbstractEventLoop | None = None
_portal_lock = threading.Lock()


def call_in_thread(fn: Callable[[], T], timeout: float | None) -> T:
    """``fn()``, run in a daemon thread when ``timeout`` is set; :class:`TimeoutError` when it has not
    returned by then (a Python thread cannot be stopped: it finishes in the background, ignored)."""
    if timeout is None:
        return fn()
    context = contextvars.copy_context()
    box: dict[str, Any] = {}

    def target() -> None:
        try:
            box["value"] = context.run(fn)
        except BaseException as exc:
            box["error"] = exc

    thread = threading.Thread(target=target, name="toolkit-timed-call", daemon=True)
    thread.start()
    thread.join(max(0.0, timeout))
    if thread.is_alive():
        raise TimeoutError(f"no answer within {timeout:g} s")
    if "error" in box:
        raise box["error"]
    return box["value"]


def _loop() -> asyncio.AbstractEventLoop:
    """The background event loop that runs coroutines for sync callers (started on first use)."""
    global _portal
    with _portal_lock:
        if _portal is None:
            loop = asyncio.new_event_loop()
            threading.Thread(target=loop.run_forever, name="toolkit-async-tools", daemon=True).start()
            _portal = loop
        return _portal


def run_coroutine(awaitable: Awaitable[T], timeout: float | None) -> T:
    """Wait for ``awaitable`` from sync code, even where an event loop already runs in this thread
    (Jupyter): it runs on a background loop, and is cancelled after ``timeout``."""
    context = contextvars.copy_context()

    async def run() -> T:
        return await asyncio.get_running_loop().create_task(_coroutine(awaitable), context=context)

    future = asyncio.run_coroutine_threadsafe(run(), _loop())
    try:
        return future.result(timeout)
    except TimeoutError:
        future.cancel()
        raise TimeoutError(f"no answer within {timeout:g} s") from None


async def _coroutine(awaitable: Awaitable[T]) -> T:
    return await awaitable


def call_sync(
    fn: Callable[..., Any], args: tuple[Any, ...], kwargs: dict[str, Any], timeout: float | None
) -> Any:
    """A sync or async function called from sync code, within ``timeout`` seconds."""
    if inspect.iscoroutinefunction(fn):
        return run_coroutine(fn(*args, **kwargs), timeout)
    result = call_in_thread(lambda: fn(*args, **kwargs), timeout)
    return run_coroutine(result, timeout) if inspect.isawaitable(result) else result


async def call_async(
    fn: Callable[..., Any],
    args: tuple[Any, ...],
    kwargs: dict[str, Any],
    timeout: float | None,
    *,
    thread: bool,
) -> Any:
    """A sync or async function called from async code, within ``timeout`` seconds; a sync one runs in
    a worker thread when ``thread`` (a tool may block) so that the event loop stays free."""
    if inspect.iscoroutinefunction(fn):
        work: Awaitable[Any] = fn(*args, **kwargs)
    elif thread:
        work = asyncio.to_thread(fn, *args, **kwargs)
    else:
        result = fn(*args, **kwargs)
        if not inspect.isawaitable(result):
            return result
        work = result
    result = await asyncio.wait_for(work, timeout)
    return await asyncio.wait_for(_coroutine(result), timeout) if inspect.isawaitable(result) else result
