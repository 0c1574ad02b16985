"""Files: bytes uploaded as multipart and stored by content digest, read back raw."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from ...types import traces as t
from .._transport import Op
from .base import AsyncResource, SyncResource, body, request


def op_file_create(project_id: str, name: str, content: bytes) -> Op[t.FileCreateRes]:
    return Op(
        "POST",
        "/file/create",
        t.FileCreateRes.model_validate,
        service="traces",
        data={"project_id": project_id},
        files={"file": (name, content, "application/octet-stream")},
        idempotent=True,
    )


def op_file_content(req: t.FileContentReadReq) -> Op[bytes]:
    return Op("POST", "/file/content", bytes, service="traces", json=body(req), raw=True, idempotent=True)


class Files(SyncResource):
    def file_create(self, project_id: str, name: str, content: bytes) -> t.FileCreateRes:
        return self._run(op_file_create(project_id, name, content))

    def file_content_read(
        self, req: t.FileContentReadReq | Mapping[str, Any] | None = None, /, **fields: Any
    ) -> bytes:
        return self._run(op_file_content(request(t.FileContentReadReq, req, fields)))


class AsyncFiles(AsyncResource):
    async def file_create(self, project_id: str, name: str, content: bytes) -> t.FileCreateRes:
        return await self._run(op_file_create(project_id, name, content))

    async def file_content_read(
        self, req: t.FileContentReadReq | Mapping[str, Any] | None = None, /, **fields: Any
    ) -> bytes:
        return await self._run(op_file_content(request(t.FileContentReadReq, req, fields)))
