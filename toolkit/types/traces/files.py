"""Files: content-addressed bytes (uploaded as multipart, read back raw)."""

from __future__ import annotations

from ..common import WireModel


class FileCreateRes(WireModel):
    digest: str


class FileContentReadReq(WireModel):
    project_id: str
    digest: str
