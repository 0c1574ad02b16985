"""bench/bench_training.py runs (``--smoke``: an RL step of one group and one SFT batch, each through
the API and bare) and reports every target, phase and size, with the figure where it was asked. The
figures must be plausible: positive times, phases not negative with gradient steps taking time, and
each ratio the API's time over the bare loop's (to the printed rounding)."""

from __future__ import annotations

import re
from pathlib import Path

from bench_script import ROOT, run_bench, table_rows

PERFORMANCE = ROOT / "docs" / "performance.md"
SECONDS = r"\d+\.\d{3}"
RATIO = r"\d+\.\d{2}x"
PHASES = ("request", "prepare", "gradient steps", "checkpoint", "noticed", "servable")


def test_bench_training_smoke_measures_both_sides_and_draws_the_curve(tmp_path: Path) -> None:
    before = PERFORMANCE.read_text()
    figure = tmp_path / "scaling.svg"
    out = run_bench("bench_training.py", "--smoke", "--threads", "1", "--figure", str(figure))
    assert PERFORMANCE.read_text() == before
    assert re.search(rf"^RL  1 groups: API {SECONDS} s, bare {SECONDS} s$", out, re.M)
    assert re.search(rf"^SFT 1 batches: API {SECONDS} s, bare {SECONDS} s$", out, re.M)
    report = out[out.index("## Training through the API\n") :]
    rows = table_rows(report)  # the targets' header and rows, then the jobs' header and rows
    targets, header, jobs = rows[1:3], rows[3], rows[4:]
    assert [t[0] for t in targets] == ["RL step, 1 groups x 8 (2 gradient steps)", "SFT, 1 batches of 64"]
    for _, api, bare, ratio, goal in targets:
        assert re.fullmatch(SECONDS, api) and re.fullmatch(SECONDS, bare) and float(bare) > 0
        assert re.fullmatch(RATIO, ratio) and goal == "1.5x"
        low = (float(api) - 5e-4) / (float(bare) + 5e-4) - 5e-3
        high = (float(api) + 5e-4) / (float(bare) - 5e-4) + 5e-3
        assert float(api) > 0 and low <= float(ratio[:-1]) <= high, (api, bare, ratio)
    assert header == ["job", "through the API", *PHASES, "bare loop", "ratio"]
    assert [job[0] for job in jobs] == ["RL, 1 x 8 (2 steps)", "SFT, 1 x 64"]
    for job, (_, api, bare, ratio, _goal) in zip(jobs, targets, strict=True):
        assert (job[1], job[-2], job[-1]) == (api, bare, ratio)
        assert all(re.fullmatch(SECONDS, cell) for cell in job[2:-2])
        phases = dict(zip(PHASES, map(float, job[2:-2]), strict=True))
        assert min(phases.values()) >= 0 and phases["gradient steps"] > 0, phases
    for phase in PHASES:
        assert f"\n- {phase}: " in report
    svg = figure.read_text()
    assert "<svg" in svg and "through the API" in svg and "bare PyTorch loop" in svg
