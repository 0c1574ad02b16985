"""bench/first_sft_job.py runs (``--smoke``): a fresh server of its own, two SFT jobs, each job's wall
time, gradient steps and server CPU, and the ratio first / second. The figures must be plausible, not
only well formed: each positive, a job's gradient steps inside its wall time, and each ratio the one
of the figures above it (to their printed rounding)."""

from __future__ import annotations

import re

from bench_script import run_bench

SECONDS = r"(\d+\.\d{2})"
HALF_CENT = 0.005  # the rounding of every printed figure


def ratio_of(shown: float, first: float, second: float) -> bool:
    """Whether ``shown`` is ``first / second`` to the rounding of the three."""
    low = (first - HALF_CENT) / (second + HALF_CENT) - HALF_CENT
    high = (first + HALF_CENT) / (second - HALF_CENT) + HALF_CENT
    return low <= shown <= high


def test_first_sft_job_smoke_times_two_jobs_and_their_ratio() -> None:
    out = run_bench("first_sft_job.py", "--smoke")
    line = rf"^job (\d): {SECONDS} s wall, {SECONDS} s gradient steps, {SECONDS} s server CPU \(load [\d.]+\)"
    jobs = re.findall(line + "$", out, re.M)
    assert [number for number, *_ in jobs] == ["1", "2"]
    (wall1, steps1, cpu1), (wall2, steps2, cpu2) = [tuple(map(float, figures)) for _, *figures in jobs]
    for wall, steps, cpu in ((wall1, steps1, cpu1), (wall2, steps2, cpu2)):
        assert 0 < steps <= wall and cpu > 0  # the gradient steps are part of the job's wall time
    ratios = re.search(rf"^first / second job: wall {SECONDS}x, CPU {SECONDS}x$", out, re.M)
    assert ratios is not None
    assert ratio_of(float(ratios[1]), wall1, wall2) and ratio_of(float(ratios[2]), cpu1, cpu2), ratios[0]
