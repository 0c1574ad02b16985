"""bench/first_sft_job.py runs (``--smoke``): a fresh server of its own, two SFT jobs, each job's wall
time, gradient steps and server CPU, and the ratio first / second."""

from __future__ import annotations

import re

from bench_script import run_bench

SECONDS = r"\d+\.\d{2}"


def test_first_sft_job_smoke_times_two_jobs_and_their_ratio() -> None:
    out = run_bench("first_sft_job.py", "--smoke")
    gradient = rf"{SECONDS} s gradient steps"
    line = rf"^job (\d): {SECONDS} s wall, {gradient}, {SECONDS} s server CPU \(load [\d.]+\)$"
    assert re.findall(line, out, re.M) == ["1", "2"]
    assert re.search(rf"^first / second job: wall {SECONDS}x, CPU {SECONDS}x$", out, re.M)
