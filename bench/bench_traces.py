"""Trace service against Weave's own SQLite trace server, same data, same run.

    .venv/bin/python bench/bench_traces.py [--calls 100000] [--weave-python PATH] [--ours-only] [--smoke]
    .venv/bin/python bench/bench_traces.py --scaling 10000,100000,1000000 [--weave-up-to 100000]

Weave's SQLite server needs packages of its ``trace-server`` extra that its wheel does not declare
for the default install; a separate venv keeps them out of ours (``scripts/test`` builds it):

    python -m venv .venv-weave && .venv-weave/bin/pip install -r bench/weave-requirements.txt

Ours: ``toolkit serve`` on a temporary data folder, measured over HTTP (loopback). Weave's:
``weave.trace_server.sqlite_trace_server.SqliteTraceServer`` (weave==0.52.38) called in-process,
in a subprocess of its own (``--weave-python``, default ``.venv-weave/bin/python``). Both get the same
calls (traces of one root and nine children, 20 ops, one start and one end per call, UUIDv7 ids as
Weave's client makes them):
- ingest: calls/s through ``/call/upsert_batch`` (500 calls = 1000 items a request) vs
  ``call_start_batch`` with the same batches (Weave's commits each start and end, so its rate is
  timed over the first ``--weave-timed-calls`` and the rest loaded through ``calls_complete``);
- limit-100 queries, p50 of 20: by op sorted by time, roots only, a ``$expr`` filter;
- a full streamed scan (rows/s) and the peak growth of the serving process's memory during it;
- the CPU time of the serving process per call, query and row (steadier than wall time on a shared
  machine).
Prints a Markdown table with ratios (the figures of docs/performance.md). ``--scaling``: a run at each
size (Weave's up to ``--weave-up-to``), a table, and two log-log figures in ``--charts`` (default
docs/figures). ``--smoke``: 1,000 calls and 3 queries per p50, in seconds (the test suite runs both
sides so, tests/bench/test_bench_traces.py); ``--ours-only`` leaves Weave's column ``not run``.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import types
import uuid
from collections.abc import Callable, Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
WEAVE_PYTHON = ROOT / ".venv-weave/bin/python"
PROJECT = "bench/traces"
BATCH = 500
QUERIES: dict[str, dict[str, Any]] = {
    "by op, newest first": {
        "filter": {"op_names": ["op_7"]},
        "sort_by": [{"field": "started_at", "direction": "desc"}],
        "limit": 100,
    },
    "roots only, newest first": {
        "filter": {"trace_roots_only": True},
        "sort_by": [{"field": "started_at", "direction": "desc"}],
        "limit": 100,
    },
    # not a whole number: latencies are whole milliseconds here, and Weave computes them in floating
    # point (julianday), so a latency of exactly the threshold would be decided by rounding error
    "$expr latency > 1900.5 ms": {
        "query": {"$expr": {"$gt": [{"$getField": "summary.weave.latency_ms"}, {"$literal": 1900.5}]}},
        "sort_by": [{"field": "started_at", "direction": "desc"}],
        "limit": 100,
    },
}


def uuid7(at: datetime, rnd: random.Random) -> str:
    """A UUIDv7 (RFC 9562) of time ``at``: the ids Weave's client gives calls and traces
    (``weave.trace_server.ids.generate_id``), so ids grow with time."""
    ms = int(at.timestamp() * 1000)
    value = ms << 80 | 0x7 << 76 | rnd.getrandbits(12) << 64 | 0b10 << 62 | rnd.getrandbits(62)
    return str(uuid.UUID(int=value))


CPU_ROWS = [  # (key, label, decimals): CPU time of the serving process (ours: the server; Weave's: its own)
    ("ingest_us", "server CPU per call ingested, µs", 1),
    ("query_ms", "server CPU per query (the three above), ms", 2),
    ("scan_us", "server CPU per row scanned, µs", 2),
]


def make_batches(n: int) -> Iterator[list[dict[str, Any]]]:
    """``upsert_batch`` item lists of ``BATCH`` calls each (start then end of every call), made as
    they are taken (a million calls never sit in memory as dicts)."""
    rnd = random.Random(0)
    t0 = datetime(2025, 6, 1, tzinfo=UTC)
    items: list[dict[str, Any]] = []
    root = ""
    for i in range(n):
        started = t0 + timedelta(milliseconds=i)
        call_id = uuid7(started, rnd)
        if i % 10 == 0:
            root = call_id
        prompt, completion = rnd.randrange(10, 500), rnd.randrange(1, 200)
        start = {
            "project_id": PROJECT,
            "id": call_id,
            "trace_id": root,
            "parent_id": None if call_id == root else root,
            "op_name": "rollout" if call_id == root else f"op_{rnd.randrange(20)}",
            "started_at": started.isoformat(),
            "attributes": {"weave": {"source": "bench"}},
            "inputs": {"n": i, "prompt": f"question number {i}", "temperature": 0.7},
        }
        end = {
            "project_id": PROJECT,
            "id": call_id,
            "ended_at": (started + timedelta(milliseconds=rnd.randrange(1, 2000))).isoformat(),
            "output": {"answer": f"answer {i}", "score": rnd.random()},
            "summary": {
                "usage": {"tiny": {"requests": 1, "prompt_tokens": prompt, "completion_tokens": completion}},
                "status_counts": {"success": 1, "error": 0},
            },
        }
        items += [{"mode": "start", "req": {"start": start}}, {"mode": "end", "req": {"end": end}}]
        if len(items) == 2 * BATCH:
            yield items
            items = []
    if items:
        yield items


def rss_mb(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return 0.0


SCAN_CPU_ROWS = 20_000  # rows scanned for the CPU-per-row figure
QUERY_CPU_QUERIES = 60  # queries run for the CPU-per-query figure


def cpu_per(pid: int, work: Callable[[], int], at_least: int) -> float:
    """CPU seconds of process ``pid`` per unit of ``work`` (which returns the units it did: rows
    scanned, queries run), repeated until at least ``at_least`` units: /proc counts CPU time in
    10 ms ticks, so a small table's one scan can read as none."""
    cpu, done = cpu_s(pid), 0
    while done < at_least:
        done += max(work(), 1)
    return (cpu_s(pid) - cpu) / done


def cpu_s(pid: int) -> float:
    """CPU seconds a process has used (user and system, all threads): unlike wall time, barely moved by
    other work on the machine."""
    fields = Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


class PeakRss:
    """Samples a process's resident memory every 20 ms; ``growth`` is peak minus the start."""

    def __init__(self, pid: int) -> None:
        self.pid, self.start, self.peak = pid, rss_mb(pid), 0.0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        while not self._stop.is_set():
            self.peak = max(self.peak, rss_mb(self.pid))
            time.sleep(0.02)

    def __enter__(self) -> PeakRss:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()
        self.peak = max(self.peak, rss_mb(self.pid))

    @property
    def growth(self) -> float:
        return self.peak - self.start


def p50_ms(run: Callable[[], int], repeats: int) -> tuple[float, int]:
    times, rows = [], 0
    for _ in range(repeats):
        t = time.perf_counter()
        rows = run()
        times.append((time.perf_counter() - t) * 1000)
    return statistics.median(times), rows


# ----------------------------------------------------------------------------- Weave's side


def weave_side(data: Path, repeats: int, timed_calls: int) -> dict[str, Any]:
    """Weave's server on the same batches: its ingest timed over the first ``timed_calls`` calls
    through ``call_start_batch`` (a commit per start and per end, so disk-bound), the rest loaded
    through ``calls_complete`` (a commit per batch) so that the queries and the scan see every call."""
    # The server imports its model-evaluation worker, which needs weave[scorers] (torch, ...);
    # the benchmark never evaluates models, so that one module is stood in for.
    worker = types.ModuleType("weave.trace_server.workers.evaluate_model_worker.evaluate_model_worker")
    worker.EvaluateModelArgs = worker.EvaluateModelDispatcher = object  # type: ignore[attr-defined]
    sys.modules.setdefault(worker.__name__, worker)
    from weave.trace_server import trace_server_interface as tsi
    from weave.trace_server.sqlite_trace_server import SqliteTraceServer

    with data.open() as lines:
        batches = [json.loads(line)["batch"] for line in lines]
    timed = batches[: max(1, timed_calls // BATCH)]
    calls = sum(len(b) for b in timed) // 2
    with tempfile.TemporaryDirectory() as tmp:
        server = SqliteTraceServer(str(Path(tmp) / "weave.db"))
        server.setup_tables()
        requests = [tsi.CallCreateBatchReq.model_validate({"batch": b}) for b in timed]
        t, cpu = time.perf_counter(), cpu_s(os.getpid())
        for req in requests:
            server.call_start_batch(req)
        ingest = calls / (time.perf_counter() - t)
        cpu_ingest = (cpu_s(os.getpid()) - cpu) / calls
        for batch in batches[len(timed) :]:
            ends = {i["req"]["end"]["id"]: i["req"]["end"] for i in batch if i["mode"] == "end"}
            starts = [i["req"]["start"] for i in batch if i["mode"] == "start"]
            whole = [{**start, **ends[start["id"]]} for start in starts]
            server.calls_complete(tsi.CallsUpsertCompleteReq.model_validate({"batch": whole}))
        out: dict[str, Any] = {"ingest": ingest, "queries": {}}
        reqs = [
            tsi.CallsQueryReq.model_validate({"project_id": PROJECT, **spec}) for spec in QUERIES.values()
        ]
        for name, req in zip(QUERIES, reqs, strict=True):
            out["queries"][name] = p50_ms(lambda r=req: sum(1 for _ in server.calls_query_stream(r)), repeats)

        def each_query() -> int:
            for req in reqs:
                sum(1 for _ in server.calls_query_stream(req))
            return len(reqs)

        cpu_query = cpu_per(os.getpid(), each_query, QUERY_CPU_QUERIES)
        with PeakRss(os.getpid()) as mem:
            t = time.perf_counter()
            rows = sum(1 for _ in server.calls_query_stream(tsi.CallsQueryReq(project_id=PROJECT)))
            out["scan"] = {"rows": rows, "rows_per_s": rows / (time.perf_counter() - t), "rss_growth_mb": 0.0}
        cpu_scan = cpu_per(
            os.getpid(),
            lambda: sum(1 for _ in server.calls_query_stream(tsi.CallsQueryReq(project_id=PROJECT))),
            SCAN_CPU_ROWS,
        )
        out["scan"]["rss_growth_mb"] = mem.growth
        out["cpu"] = {"ingest_us": cpu_ingest * 1e6, "query_ms": cpu_query * 1e3, "scan_us": cpu_scan * 1e6}
    return out


# ----------------------------------------------------------------------------- our side


def jsonl_rows(chunks: Iterator[bytes]) -> int:
    """Decode a JSON Lines body as it arrives; the number of objects."""
    import orjson

    rows, rest = 0, b""
    for chunk in chunks:
        *lines, rest = (rest + chunk).split(b"\n")
        rows += sum(1 for line in lines if orjson.loads(line))
    return rows + (1 if rest.strip() and orjson.loads(rest) else 0)


def our_side(bodies: list[bytes], calls: int, repeats: int) -> dict[str, Any]:
    """Ingest the request bodies, then the queries and the scan, over HTTP."""
    import httpx
    from server_process import start_server

    with tempfile.TemporaryDirectory() as tmp:
        proc, url, key = start_server(Path(tmp), timeout=120)
        headers = {"Authorization": f"Bearer {key}", "Content-Type": "application/json"}
        try:
            with httpx.Client(base_url=f"{url}/traces", headers=headers, timeout=600) as http:
                t, cpu = time.perf_counter(), cpu_s(proc.pid)
                for body in bodies:
                    http.post("/call/upsert_batch", content=body).raise_for_status()
                ingest = calls / (time.perf_counter() - t)
                cpu_ingest = (cpu_s(proc.pid) - cpu) / calls
                out: dict[str, Any] = {"ingest": ingest, "queries": {}}

                def query(spec: dict[str, Any]) -> int:
                    with http.stream(
                        "POST", "/calls/stream_query", json={"project_id": PROJECT, **spec}
                    ) as r:
                        r.raise_for_status()
                        return jsonl_rows(r.iter_bytes())

                for name, spec in QUERIES.items():
                    out["queries"][name] = p50_ms(lambda s=spec: query(s), repeats)

                def each_query() -> int:
                    for spec in QUERIES.values():
                        query(spec)
                    return len(QUERIES)

                cpu_query = cpu_per(proc.pid, each_query, QUERY_CPU_QUERIES)
                with PeakRss(proc.pid) as mem:
                    t = time.perf_counter()
                    rows = query({})
                    out["scan"] = {"rows": rows, "rows_per_s": rows / (time.perf_counter() - t)}
                cpu_scan = cpu_per(proc.pid, lambda: query({}), SCAN_CPU_ROWS)
                out["scan"]["rss_growth_mb"] = mem.growth
                out["cpu"] = {
                    "ingest_us": cpu_ingest * 1e6,
                    "query_ms": cpu_query * 1e3,
                    "scan_us": cpu_scan * 1e6,
                }
        finally:
            proc.terminate()
            proc.wait(30)
    return out


def table(calls: int, ours: dict[str, Any], theirs: dict[str, Any] | None) -> str:
    """The Markdown report; without Weave's figures (``--ours-only``) its cells read ``not run``."""
    rows: list[tuple[str, str, Callable[[dict[str, Any]], str], Callable[[dict[str, Any]], str]]] = [
        (
            f"ingest, calls/s (`/call/upsert_batch`, {BATCH} calls a request)",
            f"{ours['ingest']:,.0f}",
            lambda w: f"{w['ingest']:,.0f}",
            lambda w: f"{ours['ingest'] / w['ingest']:.1f}x",
        )
    ]
    for name in QUERIES:
        mine, n_mine = ours["queries"][name]
        assert theirs is None or theirs["queries"][name][1] == n_mine, (name, n_mine, theirs["queries"][name])
        rows.append(
            (
                f"{name}, limit 100, p50 ms",
                f"{mine:.1f}",
                lambda w, q=name: f"{w['queries'][q][0]:.1f}",
                lambda w, q=name, m=mine: f"{w['queries'][q][0] / m:.1f}x faster",
            )
        )
    scan = ours["scan"]
    rows += [
        (
            f"full streamed scan, rows/s ({scan['rows']:,} rows)",
            f"{scan['rows_per_s']:,.0f}",
            lambda w: f"{w['scan']['rows_per_s']:,.0f}",
            lambda w: f"{scan['rows_per_s'] / w['scan']['rows_per_s']:.1f}x",
        ),
        (
            "memory growth of the server during the scan, MB",
            f"{scan['rss_growth_mb']:.0f}",
            lambda w: f"{w['scan']['rss_growth_mb']:.0f}",
            lambda w: "",
        ),
    ]
    for key, label, digits in CPU_ROWS:
        rows.append(
            (
                label,
                f"{ours['cpu'][key]:,.{digits}f}",
                lambda w, k=key, d=digits: f"{w['cpu'][k]:,.{d}f}",
                lambda w, k=key: f"{w['cpu'][k] / ours['cpu'][k]:.1f}x less",
            )
        )
    lines = [
        f"{calls:,} calls; ours over HTTP (loopback), Weave's SQLite server in-process\n",
        "| measure | ours | Weave SQLite | ratio |",
        "|---|---|---|---|",
    ]
    for label, mine_cell, weave_cell, ratio_cell in rows:
        weave, ratio = (weave_cell(theirs), ratio_cell(theirs)) if theirs else ("not run", "")
        lines.append(f"| {label} | {mine_cell} | {weave} | {ratio} |")
    return "\n".join(lines)


Sides = tuple[dict[str, Any], dict[str, Any] | None]


def run_size(calls: int, repeats: int, weave_python: str | None, weave_timed: int) -> Sides:
    """Both sides on the same ``calls`` (Weave's skipped without ``weave_python``; its ingest timed
    over ``weave_timed`` calls), ours first."""
    import orjson

    bodies = [orjson.dumps({"batch": b}) for b in make_batches(calls)]
    ours = our_side(bodies, calls, repeats)
    if weave_python is None:
        return ours, None
    with tempfile.TemporaryDirectory() as tmp:
        data = Path(tmp) / "batches.jsonl"
        data.write_bytes(b"\n".join(bodies) + b"\n")
        del bodies
        result = subprocess.run(
            [
                *(weave_python, __file__, "--weave-side", str(data), "--repeats", str(repeats)),
                *("--weave-timed-calls", str(weave_timed)),
            ],
            capture_output=True,
            text=True,
            check=True,
        )
    return ours, json.loads(result.stdout.strip().splitlines()[-1])


def scaling(sizes: list[int], runs: dict[int, Sides], charts: Path) -> str:
    """The cost of each measure at each size, as a Markdown table and two log-log figures in
    ``charts`` (``traces_scaling.svg``: ingest and scan per call; ``traces_scaling_queries.svg``)."""
    from charts import scaling_chart

    lines = [
        "| calls | side | ingest, calls/s | "
        + " | ".join(f"{q}, p50 ms" for q in QUERIES)
        + " | scan, rows/s | scan memory growth, MB |",
        "|---|---|---|" + "---|" * len(QUERIES) + "---|---|",
    ]
    per_call: dict[str, list[tuple[float, float]]] = {}
    queries: dict[str, list[tuple[float, float]]] = {}
    for n in sizes:
        for side, out in zip(("ours", "Weave"), runs[n], strict=True):
            if out is None:
                continue
            cells = [f"{out['queries'][q][0]:.1f}" for q in QUERIES]
            scan = out["scan"]
            lines.append(
                f"| {n:,} | {side} | {out['ingest']:,.0f} | {' | '.join(cells)} | "
                f"{scan['rows_per_s']:,.0f} | {scan['rss_growth_mb']:.0f} |"
            )
            per_call.setdefault(f"{side}: ingest", []).append((n, 1e6 / out["ingest"]))
            per_call.setdefault(f"{side}: streamed scan", []).append((n, 1e6 / scan["rows_per_s"]))
            for q in QUERIES:
                queries.setdefault(f"{side}: {q}", []).append((n, out["queries"][q][0]))
    scaling_chart(
        charts / "traces_scaling.svg",
        per_call,
        title="Trace service: time per call against the number of calls",
        xlabel="calls stored",
        ylabel="µs per call (ingest) or per row (scan)",
    )
    scaling_chart(
        charts / "traces_scaling_queries.svg",
        queries,
        title="Trace service: limit-100 queries against the number of calls",
        xlabel="calls stored",
        ylabel="p50 ms over HTTP (ours) / in-process (Weave)",
    )
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--calls", type=int, default=100_000)
    parser.add_argument("--repeats", type=int, default=20, help="queries per p50")
    parser.add_argument("--weave-python", default=str(WEAVE_PYTHON), help="interpreter with weave==0.52.38")
    parser.add_argument(
        "--ours-only", action="store_true", help="skip Weave's side (no --weave-python set up)"
    )
    parser.add_argument("--smoke", action="store_true", help="1,000 calls, 3 repeats, for CI")
    parser.add_argument(
        "--scaling", help="comma-separated sizes (e.g. 10000,100000,1000000): a run at each, and the figures"
    )
    parser.add_argument("--weave-up-to", type=int, default=100_000, help="largest size Weave runs at")
    parser.add_argument(
        "--weave-timed-calls",
        type=int,
        default=2_000,
        help="calls Weave's ingest is timed over (the rest loaded in one commit a batch)",
    )
    parser.add_argument("--charts", type=Path, default=ROOT / "docs/figures", help="where --scaling writes")
    parser.add_argument("--weave-side", type=Path, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.smoke:
        args.calls, args.repeats = 2 * BATCH, 3
    if args.weave_side:
        print(json.dumps(weave_side(args.weave_side, args.repeats, args.weave_timed_calls)))
        return
    weave = None if args.ours_only else args.weave_python
    if weave is not None and not Path(weave).exists():
        parser.error(f"no Weave interpreter at {weave}: build it (scripts/_weave_env.sh) or pass --ours-only")
    if args.scaling:
        sizes = [int(n) for n in args.scaling.split(",")]
        runs = {
            n: run_size(n, args.repeats, weave if n <= args.weave_up_to else None, args.weave_timed_calls)
            for n in sizes
        }
        print(scaling(sizes, runs, args.charts))
        return
    ours, theirs = run_size(args.calls, args.repeats, weave, args.weave_timed_calls)
    print(table(args.calls, ours, theirs))


if __name__ == "__main__":
    main()
