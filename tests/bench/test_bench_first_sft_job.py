"""bench/first_sft_job.py runs (``--smoke``): a fresh server of its own, two SFT jobs, each job's wall
time, gradient steps and server CPU, and the ratio first / second; every figure positive, a job's
gradient steps within its wall time, and the ratios those of the printed times."""

from __future__ import annotations

import re

from bench_script import run_bench

SECONDS = r"(\d+\.\d{2})"


def test_first_sft_job_smoke_times_two_jobs_and_their_ratio() -> None:
    out = run_bench("first_sft_job.py", "--smoke")
    figures = rf"{SECONDS} s wall, {SECONDS} s gradient steps, {SECONDS} s server CPU"
    line = rf"^job (\d): {figures} \(load [\d.]+\)$"
    jobs = re.findall(line, out, re.M)
    assert [job[0] for job in jobs] == ["1", "2"]
    (wall1, steps1, cpu1), (wall2, steps2, cpu2) = ([float(x) for x in job[1:]] for job in jobs)
    assert all(x > 0 for x in (wall1, steps1, cpu1, wall2, steps2, cpu2))
    assert steps1 <= wall1 and steps2 <= wall2  # the gradient steps happen inside the job
    ratios = re.search(rf"^first / second job: wall {SECONDS}x, CPU {SECONDS}x$", out, re.M)
    assert ratios is not None
    assert ratio_of(float(ratios[1]), wall1, wall2) and ratio_of(float(ratios[2]), cpu1, cpu2)


def ratio_of(printed: float, first: float, second: float) -> bool:
    """``printed`` (2 decimals) is ``first / second`` of the unrounded times the bench printed to 2
    decimals (each off by at most 0.005)."""
    ratio = first / second
    return abs(printed - ratio) <= 0.005 + ratio * (0.005 / first + 0.005 / second) + 1e-9
