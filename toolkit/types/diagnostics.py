"""Wire models of the local server's memory diagnostics (extension, ``GET /v1/diagnostics/memory``):
what a long soak samples from inside the server process."""

from __future__ import annotations

from .common import WireModel


class HeapType(WireModel):
    """The live objects of one type: ``type`` is ``module.qualname`` (``builtins.dict``), ``bytes``
    the sum of their ``sys.getsizeof``: an object with the buffers it owns (a dict's table, a string's
    characters), not the objects it refers to; a torch storage counts its data, a tensor does not."""

    type: str
    count: int
    bytes: int


class PythonHeap(WireModel):
    """The objects created since start-up (the garbage collector tracks them outside the permanent
    generation the server freezes at start-up) and the untracked objects they refer to (strings,
    numbers, bytes): their number, bytes and the ``top`` types by bytes; ``frozen_objects`` counts
    what start-up froze (not walked)."""

    objects: int
    bytes: int
    frozen_objects: int
    types: list[HeapType]


class SqliteMemory(WireModel):
    """SQLite's heap in the server process (every connection to its databases): all of it
    (``sqlite3_memory_used``) and the page caches' share (``SQLITE_STATUS_PAGECACHE_OVERFLOW``: all
    of the page cache, as no ``SQLITE_CONFIG_PAGECACHE`` pool is set)."""

    memory_bytes: int
    page_cache_bytes: int


class MallocMemory(WireModel):
    """The C heap as glibc's ``mallinfo2`` sees it: bytes in use, bytes free but kept by the
    allocator (fragmentation that RSS still counts where touched), and bytes in mmapped chunks."""

    in_use_bytes: int
    free_bytes: int
    mmapped_bytes: int


class MemoryDiagnostics(WireModel):
    """One snapshot; ``sqlite`` and ``malloc`` are null where the library does not say (SQLite linked
    without its symbols exported, a C library other than glibc 2.33+). ``duration_ms``: how long the
    snapshot took (its heap walk shares the GIL with the server's other threads)."""

    pid: int
    duration_ms: float
    python_heap: PythonHeap
    sqlite: SqliteMemory | None
    malloc: MallocMemory | None
