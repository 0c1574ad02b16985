"""bench/load.py runs (``--smoke``: 4 clients, 24 requests): every kind of request, every write read back."""

from __future__ import annotations

import re

from bench_script import run_bench, table_rows


def test_load_smoke_reports_every_kind_and_reads_back_every_write() -> None:
    out = run_bench("load.py", "--smoke")
    header, *rows = table_rows(out)
    assert header == ["kind", "ok", "errors", "p50 ms", "p99 ms"]
    assert [row[0] for row in rows] == ["chat", "chat_stream", "log", "ingest", "stream_query", "poll_events"]
    for kind, ok, errors, p50, p99 in rows:
        assert int(ok) >= 1 and errors == "0", kind  # the first requests go one to each kind
        assert 0 < float(p50) <= float(p99), kind
    assert re.search(r"^clients: 4, requests: 24, .* errors: 0, server peak RSS: \d+ MiB$", out, re.M)
    counts = dict(re.findall(r"^- (.+): (\d+)$", out, re.M))
    assert counts["log batches read back"] == counts["log batches acknowledged"] != "0"
    assert counts["trace batches read back (all calls)"] == counts["trace batches acknowledged"] != "0"
