"""Checkpoint download: a checkpoint's files, fetched one by one into a hidden folder beside the
target, each checked against its size and SHA-256 digest, then renamed to the target, so that the
target ends up holding the whole checkpoint or is left as it was."""

from __future__ import annotations

import hashlib
import shutil
import uuid
from pathlib import Path
from types import TracebackType

from ..types.training import CheckpointFile
from ._errors import StreamError


class FileSink:
    """One file being written; :meth:`close` checks what arrived against what the server listed."""

    def __init__(self, path: Path, expected: CheckpointFile) -> None:
        self.expected = expected
        self._fh = open(path, "wb")  # noqa: SIM115 (closed by close())
        self._digest = hashlib.sha256()
        self._size = 0

    def write(self, chunk: bytes) -> None:
        self._fh.write(chunk)
        self._digest.update(chunk)
        self._size += len(chunk)

    def close(self) -> None:
        self._fh.close()
        got = (self._size, self._digest.hexdigest())
        if got != (self.expected.size, self.expected.sha256):
            raise StreamError(
                f"{self.expected.name} arrived with {got[0]} bytes and SHA-256 {got[1]}; the server listed"
                f" {self.expected.size} bytes and {self.expected.sha256}"
            )

    def __enter__(self) -> FileSink:
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        if exc is None:
            self.close()
        else:
            self._fh.close()


class FolderDownload:
    """The files of one checkpoint, staged beside ``target`` until :meth:`commit`.

    ``target`` must not exist, or be an empty folder; with ``overwrite`` an existing one is replaced
    (only once every file has arrived intact). On any error the staged files are removed."""

    def __init__(self, target: Path, overwrite: bool) -> None:
        if not overwrite and target.exists() and (not target.is_dir() or any(target.iterdir())):
            raise FileExistsError(f"{target} exists and is not empty; pass overwrite=True to replace it")
        self.target = target
        self.staging = target.parent / f".{target.name}.download-{uuid.uuid4().hex[:8]}"

    def file(self, expected: CheckpointFile) -> FileSink:
        if Path(expected.name).name != expected.name or expected.name in ("", ".", ".."):
            raise StreamError(f"the server listed a file name that is not a plain name: {expected.name!r}")
        return FileSink(self.staging / expected.name, expected)

    def commit(self) -> Path:
        if self.target.is_dir():
            shutil.rmtree(self.target)
        elif self.target.exists():
            self.target.unlink()
        self.staging.rename(self.target)
        return self.target

    def __enter__(self) -> FolderDownload:
        self.staging.mkdir(parents=True)
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        shutil.rmtree(self.staging, ignore_errors=True)
