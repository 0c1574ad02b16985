"""bench/fuzz.py runs (``--smoke``: 1 generated request per operation) and reports its figures.

tests/reliability/test_reliability_fuzz.py fuzzes the same operations with the same checks
(tests/support/reliability_fuzzing.py) but does not run this script; this test does.
"""

from __future__ import annotations

import re

from bench_script import run_bench


def test_fuzz_smoke_sends_every_operation_and_reports_the_tally() -> None:
    out = run_bench("fuzz.py", "--smoke")
    lines = re.findall(
        r"^(GET|POST|DELETE|PUT|PATCH) +(\S+) +(\d+) requests +(\d+) failures +[\d.]+ s$", out, re.M
    )
    paths = {path for _, path, _, _ in lines}
    assert {
        "/v1/chat/completions",
        "/v1/preview/models/{model_id}/log",
        "/traces/calls/stream_query",
    } <= paths
    assert all(requests == "1" and failures == "0" for _, _, requests, failures in lines)
    summary = re.search(
        r"^requests: (\d+), operations: (\d+), examples per operation: 1, seed: \d+$", out, re.M
    )
    assert summary and summary.groups() == (str(len(lines)), str(len(lines)))
    assert "server errors (5xx): 0, transport errors: 0, other check failures: 0" in out
    statuses = re.search(r"^statuses: \{(.*)\}, health afterwards: 200, wall time: \d+ s$", out, re.M)
    assert statuses and sum(int(n) for n in re.findall(r"'\dxx': (\d+)", statuses[1])) == len(lines)
