"""bench/learn_reverse.py, bench/learn_agent.py and bench/learn_tasks.py run (``--smoke``: each step of
the run, smallest size): SFT, held-out evaluations, an RL step and the report, without touching
docs/performance.md. Their figures must be plausible, not only well formed: every reward and success
a share in [0, 1], times positive, the report's figures those the run printed.

learn_reverse.py starts a server of its own (its temporary-folder path); learn_agent.py and
learn_tasks.py are pointed at the suite's server with a user of their own (their ``--url``/``--key``
path), which saves a server start."""

from __future__ import annotations

import re
from typing import TYPE_CHECKING

from bench_script import ROOT, run_bench, table_rows

if TYPE_CHECKING:
    from conftest import LocalServer

PERFORMANCE = ROOT / "docs" / "performance.md"
FIGURE = r"\d+\.\d{3}"


def shares(*cells: str) -> bool:
    """Whether every cell is a figure of :data:`FIGURE` in [0, 1] (a mean reward or a success rate)."""
    return all(re.fullmatch(FIGURE, c) is not None and 0.0 <= float(c) <= 1.0 for c in cells)


def test_learn_reverse_smoke_runs_sft_then_rl_and_reports_without_writing() -> None:
    before = PERFORMANCE.read_text()
    out = run_bench("learn_reverse.py", "--smoke")
    assert PERFORMANCE.read_text() == before
    sft = re.search(r"^SFT: 6 batches of 64 in ([\d.]+) s -> step \d+$", out, re.M)  # 1, then a job of 5
    assert sft is not None and float(sft[1]) > 0
    rl = re.findall(rf"^RL step +(\d+): sampled reward ({FIGURE})$", out, re.M)
    assert [step for step, _ in rl] == ["1"] and shares(*(reward for _, reward in rl))
    report = out[out.index("## Learning task\n") :]
    assert "per RL step 2 words x\n2 samples" in report and "- RL: 1 steps in " in report
    assert "Sampled (T=1) reward on 8 held-out words:" in report
    ends = re.search(rf"- First 10 steps ({FIGURE}) -> last 10 steps ({FIGURE})\.", report)
    assert ends is not None and shares(ends[1], ends[2])
    header, *rows = table_rows(report)
    assert header == ["RL step", "reward"]
    assert [step for step, _ in rows] == ["0", "1"]
    assert shares(*(reward for _, reward in rows))


def test_learn_agent_smoke_runs_sft_then_rl_and_reports_without_writing(server: LocalServer) -> None:
    before = PERFORMANCE.read_text()
    key = server.new_user_key("bench-smoke")
    out = run_bench("learn_agent.py", "--smoke", "--url", server.url, "--key", key)
    assert PERFORMANCE.read_text() == before
    sft_line = rf"^SFT (\d+) batches: held-out success ({FIGURE}) \(greedy ({FIGURE})\)$"
    sft_runs = re.findall(sft_line, out, re.M)
    assert [n for n, *_ in sft_runs] == ["2"] and shares(*sft_runs[0][1:])
    rl = re.findall(rf"^RL step +(\d+): sampled reward ({FIGURE})$", out, re.M)
    assert [step for step, _ in rl] == ["1"] and shares(rl[0][1])
    report = out[out.index("## Agent learning task\n") :]
    assert "- SFT warm start: 2 batches of 8 generated demonstrations" in report
    assert "step 2 scenarios x 2 episodes at T=1" in report
    held_line = rf"- Held-out success at T=1: \*\*({FIGURE}) after SFT -> ({FIGURE}) after RL\*\*"
    held = re.search(held_line, report)
    assert held is not None and held[1] == sft_runs[0][1]  # the report's SFT figure is the run's
    base = re.search(rf"- Base model: held-out success ({FIGURE}) at T=1 \(greedy ({FIGURE})\)\.", report)
    assert base is not None and shares(base[1], base[2])
    rows = table_rows(report)  # SFT's table, RL's, then what each of the 4 phases cost
    (sft_header, sft, rl_header), rl_rows, (cost_header, *phases) = rows[:3], rows[3:-5], rows[-5:]
    assert sft_header == ["SFT batches", "held-out success (T=1)", "greedy", "wall min"]
    assert rl_header == ["RL step", "held-out success (T=1)", "greedy", "wall min"]
    assert sft[0] == "2" and [row[0] for row in rl_rows] == ["0", "1"]
    assert shares(*(cell for row in [sft, *rl_rows] for cell in row[1:3]))
    assert sft[1:3] == list(sft_runs[0][1:]) and held[2] == rl_rows[-1][1]
    # each evaluation's wall minutes, in order; RL step 0 is the SFT job's evaluation
    minutes = [float(row[3]) for row in [sft, *rl_rows]]
    assert minutes == sorted(minutes) and rl_rows[0][3] == sft[3]
    # what each phase cost (the server's RSS 0: a user key of the suite's server does not see its pid)
    assert cost_header[0] == "phase" and cost_header[-1] == "server peak RSS GiB"
    assert sorted(row[0] for row in phases) == ["evaluations", "rl jobs", "rollouts", "sft"]
    assert all(float(row[1]) >= 0 and float(row[2]) >= 0 and float(row[4]) >= 0 for row in phases)


def test_learn_tasks_smoke_runs_the_recipe_on_every_task_of_the_suite(server: LocalServer) -> None:
    key = server.new_user_key("bench-tasks-smoke")
    out = run_bench("learn_tasks.py", "--smoke", "--url", server.url, "--key", key)
    sft_line = rf"^SFT (\d+) batches: held-out success ({FIGURE}) \(greedy ({FIGURE})\)$"
    sft_runs = re.findall(sft_line, out, re.M)
    assert [n for n, *_ in sft_runs] == ["2"] * 4 and all(shares(*figures) for _, *figures in sft_runs)
    rl = re.findall(rf"^RL step +(\d+): sampled reward ({FIGURE})$", out, re.M)
    assert [step for step, _ in rl] == ["1"] * 4 and shares(*(reward for _, reward in rl))
    assert re.findall(r"^### (\w+)$", out, re.M) == ["choice", "words", "chain", "transform"]
    assert len(re.findall(r"^- SFT warm start: 2 batches of 8 at lr 0\.001", out, re.M)) == 4
    curves = re.findall(rf"^- Held-out T=1 at RL steps 0, 1: ({FIGURE}) -> ({FIGURE})$", out, re.M)
    ends = re.findall(rf"^- \*\*({FIGURE}) after SFT -> ({FIGURE}) after RL\*\*", out, re.M)
    assert len(curves) == 4 and ends == curves and all(shares(*curve) for curve in curves)
