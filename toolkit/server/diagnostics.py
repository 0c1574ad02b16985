"""Memory diagnostics of the server process (extension, ``GET /v1/diagnostics/memory``, the local
user's key only): Python's heap by type, SQLite's heap and page cache, glibc's C heap. What a long
soak (bench/soak.py) samples every minute; nothing runs until asked and nothing is kept between calls."""

from __future__ import annotations

import _sqlite3
import ctypes
import gc
import os
import sys
import time
from collections import Counter
from functools import cache
from typing import Any

from fastapi import APIRouter, Query

from ..types.diagnostics import HeapType, MallocMemory, MemoryDiagnostics, PythonHeap, SqliteMemory
from .auth import CurrentUser
from .errors import Forbidden
from .store.users import LOCAL_USER

router = APIRouter()

SQLITE_STATUS_PAGECACHE_OVERFLOW = 2  # sqlite3.h: page cache bytes taken from the heap


@router.get("/v1/diagnostics/memory", response_model=MemoryDiagnostics)
def memory(user: CurrentUser, top: int = Query(20, ge=1, le=1000)) -> MemoryDiagnostics:
    """A snapshot of the process's memory with the ``top`` Python types by bytes; 403 for any key
    but the local user's. The heap walk is plain Python over every object made since start-up."""
    if user.name != LOCAL_USER:
        raise Forbidden("the memory diagnostics answer the local user's key (local.key) only")
    start = time.perf_counter()
    heap = python_heap(top)
    return MemoryDiagnostics(
        pid=os.getpid(),
        duration_ms=(time.perf_counter() - start) * 1000,
        python_heap=heap,
        sqlite=sqlite_memory(),
        malloc=malloc_memory(),
    )


def python_heap(top: int) -> PythonHeap:
    """The objects the collector tracks outside its permanent generation, and the untracked objects
    (strings, numbers, bytes) they refer to, counted once each by type."""
    tracked = gc.get_objects()
    counts: Counter[type] = Counter()
    sizes: Counter[type] = Counter()
    seen: set[int] = set()

    def add(obj: Any) -> None:
        counts[type(obj)] += 1
        sizes[type(obj)] += sys.getsizeof(obj, 0)

    for obj in tracked:
        if obj is not tracked:
            add(obj)
            for ref in gc.get_referents(obj):
                if not gc.is_tracked(ref) and id(ref) not in seen:
                    seen.add(id(ref))
                    add(ref)
    del tracked
    types = [
        HeapType(type=f"{kind.__module__}.{kind.__qualname__}", count=counts[kind], bytes=size)
        for kind, size in sizes.most_common(top)
    ]
    return PythonHeap(
        objects=sum(counts.values()),
        bytes=sum(sizes.values()),
        frozen_objects=gc.get_freeze_count(),
        types=types,
    )


@cache
def _sqlite() -> ctypes.CDLL:
    """The SQLite library Python's ``sqlite3`` runs on (the symbols its extension module resolves)."""
    library = ctypes.CDLL(_sqlite3.__file__)
    library.sqlite3_memory_used.restype = ctypes.c_int64
    return library


def sqlite_memory() -> SqliteMemory | None:
    try:
        library = _sqlite()
        status = library.sqlite3_status64
    except (OSError, AttributeError):
        return None
    current, highest = ctypes.c_int64(), ctypes.c_int64()
    if status(SQLITE_STATUS_PAGECACHE_OVERFLOW, ctypes.byref(current), ctypes.byref(highest), 0) != 0:
        return None
    return SqliteMemory(memory_bytes=library.sqlite3_memory_used(), page_cache_bytes=current.value)


class _Mallinfo2(ctypes.Structure):
    _fields_ = [
        (name, ctypes.c_size_t)
        for name in (
            "arena",
            "ordblks",
            "smblks",
            "hblks",
            "hblkhd",
            "usmblks",
            "fsmblks",
            "uordblks",
            "fordblks",
            "keepcost",
        )
    ]


def malloc_memory() -> MallocMemory | None:
    try:
        mallinfo2 = ctypes.CDLL(None).mallinfo2
    except (OSError, AttributeError):
        return None
    mallinfo2.restype = _Mallinfo2
    info = mallinfo2()
    return MallocMemory(in_use_bytes=info.uordblks, free_bytes=info.fordblks, mmapped_bytes=info.hblkhd)
