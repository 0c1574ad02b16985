"""The soak's memory samples, every ``--memory-every`` seconds: the server's RSS (psutil), what its
engines hold (``GET /v1/health``: KV caches, adapters, parameters, over every base model) and what
``GET /v1/diagnostics/memory`` reads inside the process (Python's heap and its top types, SQLite's
page cache, glibc's heap), one JSON line each in ``memory.jsonl``. At the end: the slope of RSS
over the last hour (over the last half of a shorter run), each part's slope over the same window, the
part that grew most, and the curves in ``memory.svg``."""

from __future__ import annotations

import json
import statistics
import threading
import time
from pathlib import Path
from typing import Any

import httpx
import psutil
from charts import line_chart
from soak_server import Server

MIB = 2**20
# the sampled parts of RSS, in bytes (a tensor's data is not in the Python heap; a torch storage's is)
PARTS = ("kv_cache", "adapters", "parameters", "sqlite_page_cache", "python_heap", "malloc_free")
TOP_TYPES = 20


class MemorySampler:
    def __init__(
        self, server: Server, folder: Path, every: float, up: threading.Event, stop: threading.Event
    ) -> None:
        self.server, self.every, self.up, self.stop = server, every, up, stop
        self.path, self.chart = folder / "memory.jsonl", folder / "memory.svg"
        self.samples: list[dict[str, Any]] = []
        self.started = time.monotonic()

    def run(self) -> None:
        """A sample now, then every ``every`` seconds, the last once ``stop`` is set; none while the
        server is down."""
        with self.path.open("w") as out:
            while True:
                stopped = self.stop.is_set()
                if self.up.is_set() and (sample := self.sample()) is not None:
                    self.samples.append(sample)
                    out.write(json.dumps(sample) + "\n")
                    out.flush()
                if stopped:
                    return
                self.stop.wait(self.every)

    def sample(self) -> dict[str, Any] | None:
        """One sample, or None when the server went down meanwhile (a kill)."""
        t = time.monotonic() - self.started
        assert self.server.proc is not None
        pid = self.server.proc.pid
        try:
            rss = psutil.Process(pid).memory_info().rss
            with self.server.http(timeout=300) as http:
                health = http.get("/v1/health").raise_for_status().json()
                diagnostics = http.get("/v1/diagnostics/memory", params={"top": TOP_TYPES})
                memory = diagnostics.raise_for_status().json()
        except (httpx.HTTPError, psutil.Error):
            return None
        if memory["pid"] != pid:
            return None
        heap, sqlite, malloc = memory["python_heap"], memory["sqlite"], memory["malloc"]
        models = health["models"]
        return {
            "t": round(t, 1),  # seconds since the soak started
            "pid": pid,
            "rss": rss,
            "kv_cache": sum(m["kv_cache_bytes"] for m in models),
            "adapters": sum(m["adapter_bytes"] for m in models),
            "parameters": sum(m["parameter_bytes"] for m in models),
            "sqlite_page_cache": sqlite["page_cache_bytes"] if sqlite else None,
            "python_heap": heap["bytes"],
            "python_objects": heap["objects"],
            "malloc_free": malloc["free_bytes"] if malloc else None,
            "malloc_in_use": malloc["in_use_bytes"] if malloc else None,  # not ranked: parts live in it
            "diagnostics_ms": round(memory["duration_ms"]),
            "types": heap["types"],
        }

    def summary(self) -> list[str]:
        """The report's lines; the slopes are over the samples of the last server process (a kill
        restarts it), the window its last hour or last half, whichever is shorter."""
        samples = self.samples
        head = f"memory: {len(samples)} samples every {self.every:g} s in {self.path}"
        process = [s for s in samples if s["pid"] == samples[-1]["pid"]]
        window = min(3600.0, (process[-1]["t"] - process[0]["t"]) / 2) if process else 0.0
        recent = [s for s in process if s["t"] >= process[-1]["t"] - window]
        if len(recent) < 2:
            return [f"{head}; too few for a slope"]
        line_chart(
            self.chart,
            {name: [(s["t"] / 60, s[name] / MIB) for s in samples] for name in ("rss", *parts(samples))},
            title="Server memory during the soak",
            xlabel="minutes",
            ylabel="MiB",
            markers=len(samples) <= 30,
        )
        first, last = recent[0], recent[-1]
        since = " since the last restart" if len(process) < len(samples) else ""
        slopes = {name: slope(recent, name) for name in parts(recent)}
        ranked = sorted(slopes, key=lambda name: -slopes[name])
        millis = statistics.median(s["diagnostics_ms"] for s in samples)
        return [
            f"{head} (curves: {self.chart.name}; the diagnostics took {millis:.0f} ms each, median)",
            f"RSS: {process[0]['rss'] / MIB:.0f} MiB at {process[0]['t']:.0f} s, "
            f"{last['rss'] / MIB:.0f} MiB at {last['t']:.0f} s{since}; "
            f"slope over the last {last['t'] - first['t']:.0f} s: {slope(recent, 'rss'):+.1f} MiB/h",
            "slopes over that window (MiB/h): "
            + ", ".join(f"{name} {slopes[name]:+.1f}" for name in ranked)
            + f"; grew most: {ranked[0]}",
            f"Python types that grew most over that window: {type_growth(first, last)}",
        ]


def parts(samples: list[dict[str, Any]]) -> list[str]:
    """The parts every sample has (SQLite's and glibc's figures are missing where they do not say)."""
    return [name for name in PARTS if all(s[name] is not None for s in samples)]


def slope(samples: list[dict[str, Any]], name: str) -> float:
    """The least-squares slope of ``name`` over time, in MiB per hour."""
    fit = statistics.linear_regression([s["t"] for s in samples], [s[name] / MIB for s in samples])
    return fit.slope * 3600


def type_growth(first: dict[str, Any], last: dict[str, Any], shown: int = 3) -> str:
    """The types in the top lists of both samples whose bytes grew most, with their object counts."""
    before = {t["type"]: t for t in first["types"]}
    grown = sorted(
        ((t["bytes"] - before[t["type"]]["bytes"], t) for t in last["types"] if t["type"] in before),
        key=lambda pair: -pair[0],
    )[:shown]
    return ", ".join(
        f"{t['type']} {delta / MIB:+.2f} MiB ({t['count'] - before[t['type']]['count']:+,} objects)"
        for delta, t in grown
    )
