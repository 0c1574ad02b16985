"""bench/bench_training.py runs (``--smoke``: an RL step of one group and one SFT batch, each through
the API and bare) and reports every target, phase and size, with the figure where it was asked."""

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
    targets, phases, scaling = [], [], []
    for row in table_rows(report):
        if row[0].startswith(("RL step,", "SFT,")):
            targets.append(row)
        elif row[0].split(" (")[0] in PHASES:
            phases.append(row)
        elif row[0].isdigit():
            scaling.append(row)
    assert [t[0] for t in targets] == ["RL step, 1 groups x 8 (2 gradient steps)", "SFT, 1 batches of 64"]
    for _, api, bare, ratio, goal in targets:
        assert re.fullmatch(SECONDS, api) and re.fullmatch(SECONDS, bare) and float(bare) > 0
        assert re.fullmatch(RATIO, ratio) and goal == "1.5x"
    assert len(phases) == 6 and all(re.fullmatch(SECONDS, c) for row in phases for c in row[1:])
    assert scaling == [["1", "2", targets[0][1], targets[0][2], targets[0][3]]]
    svg = figure.read_text()
    assert "<svg" in svg and "through the API" in svg and "bare PyTorch loop" in svg
