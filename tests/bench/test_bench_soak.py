"""bench/soak.py at its smoke size: agent rollouts with a tool, jobs, adapters, trace ingest and
abandoned requests together; every request answered, no stall, every acknowledged write read back."""

from __future__ import annotations

import re

from bench_script import run_bench

from support.soak_support import figures


def test_soak_smoke_answers_every_request_without_a_stall() -> None:
    out = run_bench("soak.py", "--smoke", "--requests", "200", timeout=600)
    f = figures(out)
    assert f["requests"] >= 200 and f["answered"] >= 100 and f["abandoned"] >= 1
    assert f["failed"] == 0 and f["failed_rollouts"] == 0
    assert f["watchdog"] == f["warnings"] == f["timeouts"] == 0  # no request 30 s without progress
    assert f["rollouts"] >= 16  # one round of one model: 4 groups of 4 episodes
    assert f["succeeded"] >= 1 and "'failed'" not in out  # jobs ran, none failed
    assert f["traces"] >= 1 and f["logged"] >= 8 and f["checkpoints"] >= 1
    assert f["rss_start"] > 0 and f["rss_end"] > 0
    assert f["kills"] == 0 and f["failed_checks"] == 0
    assert re.search(r"p50 \d+ ms, p99 \d+ ms", out)
