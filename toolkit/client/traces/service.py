"""The service itself: health and version."""

from __future__ import annotations

from ...types import traces as t
from .._transport import Op
from .base import AsyncResource, SyncResource


def op_server_info() -> Op[t.ServerInfo]:
    return Op("GET", "/server_info", t.ServerInfo.model_validate, service="traces")


def op_health() -> Op[t.TraceHealth]:
    return Op("GET", "/health", t.TraceHealth.model_validate, service="traces")


class Service(SyncResource):
    def server_info(self) -> t.ServerInfo:
        return self._run(op_server_info())

    def health(self) -> t.TraceHealth:
        return self._run(op_health())


class AsyncService(AsyncResource):
    async def server_info(self) -> t.ServerInfo:
        return await self._run(op_server_info())

    async def health(self) -> t.TraceHealth:
        return await self._run(op_health())
