"""Cursor pages (``after`` / ``limit`` / ``order``) that iterate across pages."""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable, Generator, Iterator
from typing import Any, Generic, TypeVar

from ..types.common import ListEnvelope
from ._transport import AsyncTransport, Op, SyncTransport

T = TypeVar("T")
PageOp = Callable[[str | None], Op[ListEnvelope[T]]]


class _Page(Generic[T]):
    """The items of one page and its cursor fields."""

    def __init__(self, make_op: PageOp[T], envelope: ListEnvelope[T]) -> None:
        self._make_op = make_op
        self.data = envelope.data
        self.has_more = envelope.has_more
        self.first_id = envelope.first_id
        self.last_id = envelope.last_id

    def has_next_page(self) -> bool:
        return bool(self.has_more and self.data)

    def __repr__(self) -> str:
        return f"{type(self).__name__}(items={len(self.data)}, has_more={self.has_more})"


class CursorPage(_Page[T]):
    """One page; iterating it walks every item of this page and the pages after it."""

    def __init__(self, transport: SyncTransport, make_op: PageOp[T], envelope: ListEnvelope[T]) -> None:
        super().__init__(make_op, envelope)
        self._transport = transport

    @classmethod
    def first(cls, transport: SyncTransport, make_op: PageOp[T], after: str | None = None) -> CursorPage[T]:
        return cls(transport, make_op, transport.run(make_op(after)))

    def next_page(self) -> CursorPage[T] | None:
        if not self.has_next_page():
            return None
        return CursorPage.first(self._transport, self._make_op, self.last_id)

    def iter_pages(self) -> Iterator[CursorPage[T]]:
        page: CursorPage[T] | None = self
        while page is not None:
            yield page
            page = page.next_page()

    def __iter__(self) -> Iterator[T]:
        for page in self.iter_pages():
            yield from page.data


class AsyncCursorPage(_Page[T]):
    """One page; ``async for`` over it walks every item of this page and the pages after it."""

    def __init__(self, transport: AsyncTransport, make_op: PageOp[T], envelope: ListEnvelope[T]) -> None:
        super().__init__(make_op, envelope)
        self._transport = transport

    async def next_page(self) -> AsyncCursorPage[T] | None:
        if not self.has_next_page():
            return None
        return await AsyncPaginator(self._transport, self._make_op, self.last_id)

    async def iter_pages(self) -> AsyncIterator[AsyncCursorPage[T]]:
        page: AsyncCursorPage[T] | None = self
        while page is not None:
            yield page
            page = await page.next_page()

    async def __aiter__(self) -> AsyncIterator[T]:
        async for page in self.iter_pages():
            for item in page.data:
                yield item


class AsyncPaginator(Generic[T], Awaitable[AsyncCursorPage[T]]):
    """``await`` it for the first page, or ``async for`` over every item of every page."""

    def __init__(self, transport: AsyncTransport, make_op: PageOp[T], after: str | None = None) -> None:
        self._transport = transport
        self._make_op = make_op
        self._after = after

    async def _first(self) -> AsyncCursorPage[T]:
        envelope = await self._transport.run(self._make_op(self._after))
        return AsyncCursorPage(self._transport, self._make_op, envelope)

    def __await__(self) -> Generator[Any, None, AsyncCursorPage[T]]:
        return self._first().__await__()

    async def __aiter__(self) -> AsyncIterator[T]:
        page = await self._first()
        async for item in page:
            yield item
