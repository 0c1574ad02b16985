"""The README's "Reproducible experiments" example runs as written (after its "Your own task" blocks,
as a reader runs them) and, run twice, each time on a fresh local server in a data folder of its own,
exports the same checkpoint digests at its defaults: seeded gathers and a seed per job, no other
setting. Its replay on a fresh server matches every job."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest

import toolkit as tk
from conftest import LocalServer

README = Path(__file__).resolve().parents[2] / "README.md"
TASK = "<!-- tested by tests/docs/test_docs_readme.py -->"
MARK = "<!-- tested by tests/docs/test_docs_readme_experiments.py -->"


def blocks(mark: str) -> list[str]:
    return re.findall(re.escape(mark) + r"\n```python\n(.*?)\n```", README.read_text(), re.DOTALL)


def run_readme(folder: Path) -> dict[str, Any]:
    """The task's blocks, then the experiment's, on a fresh server of ``folder``; the names they left."""
    (folder / "data").mkdir(parents=True)
    server = LocalServer(folder / "data").start()
    namespace: dict[str, Any] = {}
    try:
        with pytest.MonkeyPatch.context() as env:
            env.setenv("TOOLKIT_BASE_URL", server.url)
            env.setenv("TOOLKIT_API_KEY", server.key)
            env.chdir(folder)
            for block in [*blocks(TASK), *blocks(MARK)]:
                exec(compile(block, str(README), "exec"), namespace)
        namespace["client"].close()
    finally:
        server.stop()
    return namespace


def test_the_experiment_example_repeats_bit_for_bit_at_its_defaults(tmp_path: Path) -> None:
    (block,) = blocks(MARK)
    assert "precalculate_logprobs" not in block  # no flag beyond the seeds
    runs = [run_readme(tmp_path / name) for name in ("first", "second")]
    records = [tk.load_experiment(tmp_path / name / "shout-grpo.json") for name in ("first", "second")]
    for record, ns in zip(records, runs, strict=True):
        assert ns["report"].ok and [r.match for r in ns["report"].rows] == [True, True, True], ns["report"]
        (model,) = record.models
        assert [r.step for r in model.records] == [0, 1, 2, 3] and [j.kind for j in record.jobs] == [
            "sft",
            "rl",
            "rl",
        ]
        assert all(r.metrics["data/step_num_gradient_steps"] > 0 for r in model.records[1:])  # each trained
    digests = [[r.checkpoint_digest for r in record.models[0].records[1:]] for record in records]
    assert all(digests[0]) and len(set(digests[0])) == 3
    assert digests[1] == digests[0]
