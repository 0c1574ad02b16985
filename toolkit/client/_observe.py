"""The hook through which opt-in tracing (:mod:`toolkit.tracing`) sees every chat completion.

The client layer cannot import the tracer (it sits above the client), so the tracer registers an
observer here; with none registered a completion runs untouched.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any, Protocol

from ..types.chat import ChatCompletion


class CompletionObserver(Protocol):
    def observe(self, request: dict[str, Any], run: Callable[[], ChatCompletion]) -> ChatCompletion: ...

    async def aobserve(self, request: dict[str, Any], run: Awaitable[ChatCompletion]) -> ChatCompletion: ...


_observer: CompletionObserver | None = None


def set_observer(observer: CompletionObserver | None) -> CompletionObserver | None:
    """Install ``observer`` (``None`` removes it); returns the one it replaces."""
    global _observer
    previous, _observer = _observer, observer
    return previous


def observe(request: dict[str, Any], run: Callable[[], ChatCompletion]) -> ChatCompletion:
    return run() if _observer is None else _observer.observe(request, run)


async def aobserve(request: dict[str, Any], run: Awaitable[ChatCompletion]) -> ChatCompletion:
    return await run if _observer is None else await _observer.aobserve(request, run)
