"""bench/learn_reverse.py and bench/learn_agent.py run (``--smoke``: each step of the run, smallest size):
SFT, held-out evaluations, RL steps and the report, without touching docs/performance.md."""

from __future__ import annotations

import re

from bench_script import ROOT, run_bench, table_rows

PERFORMANCE = ROOT / "docs" / "performance.md"
FIGURE = r"\d+\.\d{3}"


def test_learn_reverse_smoke_runs_sft_then_rl_and_reports_without_writing() -> None:
    before = PERFORMANCE.read_text()
    out = run_bench("learn_reverse.py", "--smoke")
    assert PERFORMANCE.read_text() == before
    assert re.search(r"^SFT: 6 batches of 64 in [\d.]+ s -> step \d+$", out, re.M)  # 1, then one job of 5
    assert len(re.findall(rf"^RL step +\d: sampled reward {FIGURE}$", out, re.M)) == 2
    report = out[out.index("## Learning task\n") :]
    assert "- RL: 2 steps in " in report and "Sampled (T=1) reward on 8 held-out words:" in report
    assert re.search(rf"- First 10 steps {FIGURE} -> last 10 steps {FIGURE}\.", report)
    rows = table_rows(report)
    assert rows[0] == ["RL step", "reward"]
    assert [step for step, _ in rows[1:]] == ["0", "1", "2"]
    assert all(re.fullmatch(FIGURE, reward) for _, reward in rows[1:])


def test_learn_agent_smoke_runs_sft_then_rl_and_reports_without_writing() -> None:
    before = PERFORMANCE.read_text()
    out = run_bench("learn_agent.py", "--smoke")
    assert PERFORMANCE.read_text() == before
    assert (
        len(re.findall(rf"^SFT [24] batches: held-out success {FIGURE} \(greedy {FIGURE}\)$", out, re.M)) == 2
    )
    assert len(re.findall(rf"^RL step +\d: sampled reward {FIGURE}$", out, re.M)) == 2
    report = out[out.index("## Agent learning task\n") :]
    assert "- SFT warm start: 4 batches of 8 generated demonstrations" in report
    assert re.search(rf"- Held-out success at T=1: \*\*{FIGURE} after SFT -> {FIGURE} after RL\*\*", report)
    rows = table_rows(report)
    sft_header, sft_2, sft_4, rl_header, *rl = rows
    assert sft_header == ["SFT batches", "held-out success (T=1)", "greedy"]
    assert rl_header == ["RL step", "held-out success (T=1)", "greedy"]
    assert [sft_2[0], sft_4[0]] == ["2", "4"] and [row[0] for row in rl] == ["0", "1", "2"]
    assert all(re.fullmatch(FIGURE, cell) for row in [sft_2, sft_4, *rl] for cell in row[1:])
