"""The memory diagnostics (``GET /v1/diagnostics/memory``, toolkit/server/diagnostics.py): over HTTP
for the local key only, and each figure counted as it claims (Python's heap by type, untracked
objects once each; SQLite's page cache following what is read and closed)."""

from __future__ import annotations

import gc
import platform
import sqlite3
import sys
from pathlib import Path
from typing import Any

from toolkit.server.diagnostics import python_heap, sqlite_memory

GLIBC_MALLINFO2 = platform.libc_ver()[0] == "glibc" and tuple(
    int(part) for part in platform.libc_ver()[1].split(".")
) >= (2, 33)


def test_memory_of_the_server_process_for_the_local_key(server: Any) -> None:
    with server.http() as http:
        http.get("/v1/preview/models").raise_for_status()  # its database read at least once
        r = http.get("/v1/diagnostics/memory", params={"top": 8})
        bad = http.get("/v1/diagnostics/memory", params={"top": 0})
    assert r.status_code == 200, r.text
    assert bad.status_code == 422 and bad.json()["detail"][0]["loc"] == ["query", "top"]
    body = r.json()
    assert body["pid"] == server.proc.pid and body["duration_ms"] > 0
    heap = body["python_heap"]
    assert heap["frozen_objects"] > 10_000  # what start-up built, frozen by the app
    assert heap["objects"] > 0 and heap["bytes"] > 0
    sizes = [t["bytes"] for t in heap["types"]]
    assert len(sizes) == 8 and sizes == sorted(sizes, reverse=True) and sum(sizes) <= heap["bytes"]
    assert all(t["count"] > 0 and "." in t["type"] for t in heap["types"])
    sqlite = body["sqlite"]
    assert sqlite["memory_bytes"] >= sqlite["page_cache_bytes"] > 0
    if GLIBC_MALLINFO2:
        assert body["malloc"]["in_use_bytes"] > 0 and body["malloc"]["free_bytes"] >= 0


def test_another_users_key_is_refused(server: Any) -> None:
    with server.http(server.new_user_key("diagnostics-other")) as http:
        r = http.get("/v1/diagnostics/memory")
    assert r.status_code == 403
    assert r.json() == {"detail": "the memory diagnostics answer the local user's key (local.key) only"}


class Marker:
    """Tracked by the collector (it has a ``__dict__``)."""


def test_the_heap_counts_tracked_objects_and_untracked_ones_once_each() -> None:
    def complex_numbers() -> int:
        return next((t.count for t in python_heap(top=100_000).types if t.type == "builtins.complex"), 0)

    before = complex_numbers()
    markers = [Marker() for _ in range(30_000)]
    numbers = [complex(i, 1) for i in range(20_000)]  # untracked: found as what the list refers to
    also = list(numbers)  # referred to twice, counted once
    heap = {t.type: t for t in python_heap(top=100_000).types}
    marker, number = heap[f"{__name__}.Marker"], heap["builtins.complex"]
    assert marker.count == 30_000 and marker.bytes == sum(sys.getsizeof(m) for m in markers)
    assert number.count == before + 20_000 and len(also) == 20_000
    assert gc.is_tracked(markers[0]) and not gc.is_tracked(numbers[0])


def test_the_page_cache_follows_what_is_read_and_closed(tmp_path: Path) -> None:
    db = tmp_path / "pages.db"
    with sqlite3.connect(db) as conn:
        conn.execute("CREATE TABLE t (x TEXT)")
        conn.executemany("INSERT INTO t VALUES (?)", (("y" * 200,) for _ in range(20_000)))
    conn.close()
    before = sqlite_memory()
    assert before is not None
    reader = sqlite3.connect(db)
    assert reader.execute("SELECT count(*), sum(length(x)) FROM t").fetchone() == (20_000, 4_000_000)
    read = sqlite_memory()
    assert read is not None and read.page_cache_bytes - before.page_cache_bytes > 1_000_000  # 2 MiB cache
    reader.close()
    closed = sqlite_memory()
    assert closed is not None and closed.page_cache_bytes <= before.page_cache_bytes
