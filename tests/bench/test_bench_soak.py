"""bench/soak.py at its smoke size: agent rollouts with a tool, jobs, adapters, trace ingest and
abandoned requests together; every request answered, no stall, every acknowledged write read back,
and the server's memory sampled all along (plausible figures, the slope the samples give)."""

from __future__ import annotations

import json
import math
import re

import numpy as np
from bench_script import run_bench

from support.soak_support import figures, memory_report

MIB = 2**20
EVERY = 2  # seconds between two memory samples at the smoke size (soak_mix.SMOKE)
PARTS = {"kv_cache", "adapters", "parameters", "sqlite_page_cache", "python_heap", "malloc_free"}


def test_soak_smoke_answers_every_request_without_a_stall() -> None:
    out = run_bench("soak.py", "--smoke", "--requests", "200", timeout=600)
    f = figures(out)
    assert f["requests"] >= 200 and f["answered"] >= 100 and f["abandoned"] >= 1
    assert f["failed"] == 0 and f["failed_rollouts"] == 0
    assert f["watchdog"] == f["warnings"] == f["timeouts"] == 0  # no request 30 s without progress
    assert f["rollouts"] >= 16  # one round of one model: 4 groups of 4 episodes
    assert f["succeeded"] >= 1 and "'failed'" not in out and "'unfinished'" not in out  # every job ended well
    assert "unhandled errors" not in out  # the server log has no 500
    assert f["traces"] >= 1 and f["logged"] >= 8 and f["checkpoints"] >= 1
    assert f["rss_start"] > 0 and f["rss_end"] > 0
    assert f["kills"] == 0 and f["failed_checks"] == 0
    assert re.search(r"p50 \d+ ms, p99 \d+ ms", out)
    check_memory(out)


def check_memory(out: str) -> None:
    """The samples (one server process, every ``EVERY`` seconds) are plausible, and the report's RSS
    figures and slope are theirs (the slope refitted here by numpy over the last half of the run)."""
    m = memory_report(out)
    assert m["slope"] is not None and math.isfinite(m["slope"]), out
    samples = [json.loads(line) for line in m["path"].read_text().splitlines()]
    assert len(samples) == m["samples"] >= 4 and len({s["pid"] for s in samples}) == 1
    times = [s["t"] for s in samples]
    assert times == sorted(times) and times[0] < 5 and times[-2] - times[0] >= EVERY * (len(times) - 2)
    assert all(100 * MIB < s["rss"] < 16 * 2**30 for s in samples)
    last = samples[-1]
    assert last["parameters"] > MIB  # the built-in base (1M float32 parameters), loaded by the mix
    assert max(s["kv_cache"] for s in samples) > 0  # chat requests held KV caches
    assert last["sqlite_page_cache"] > 0 and last["python_heap"] > 0 and last["python_objects"] > 0
    sizes = [t["bytes"] for t in last["types"]]
    assert len(sizes) == 20 and sizes == sorted(sizes, reverse=True)
    assert (m["rss_first"], m["rss_last"]) == (round(samples[0]["rss"] / MIB), round(last["rss"] / MIB))
    window = (last["t"] - samples[0]["t"]) / 2
    recent = [s for s in samples if s["t"] >= last["t"] - window]
    fitted = np.polyfit([s["t"] for s in recent], [s["rss"] / MIB for s in recent], 1)[0] * 3600
    assert abs(m["slope"] - fitted) < 0.1
    assert set(m["parts"]) == PARTS and m["grew_most"] == max(m["parts"], key=m["parts"].get)
    chart = m["chart"].read_text()
    assert "<svg" in chart and all(name in chart for name in ("rss", *PARTS))
