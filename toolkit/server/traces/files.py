"""Files: bytes stored once per project by content digest."""

from __future__ import annotations

from ..errors import Conflict, NotFound
from .digests import bytes_digest
from .store import Base


class Files:
    def __init__(self, base: Base) -> None:
        self.base = base

    def create(self, user_id: str, project_id: str, name: str, content: bytes, expected: str | None) -> str:
        digest = bytes_digest(content)
        if expected is not None and expected != digest:
            raise Conflict(f"Digest mismatch: expected {expected}, computed {digest}")
        pid = self.base.pid(user_id, project_id, create=True)
        with self.base.db.write() as conn:
            conn.execute(
                "INSERT OR IGNORE INTO files (pid, digest, name, content) VALUES (?, ?, ?, ?)",
                (pid, digest, name, content),
            )
        return digest

    def content(self, user_id: str, project_id: str, digest: str) -> bytes:
        pid = self.base.pid(user_id, project_id)
        row = None
        if pid is not None:
            row = self.base.db.conn.execute(
                "SELECT content FROM files WHERE pid = ? AND digest = ?", (pid, digest)
            ).fetchone()
        if row is None:
            raise NotFound(f"File with digest {digest} not found")
        return bytes(row[0])
