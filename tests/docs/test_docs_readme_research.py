"""The README's "Research" example runs as written against a local server: stored rollouts exported,
the best of each group trained on, re-scored, and two checkpoints evaluated."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest

from conftest import LocalServer

README = Path(__file__).resolve().parents[2] / "README.md"
MARK = "<!-- tested by tests/docs/test_docs_readme_research.py -->"


def test_research_example_runs_as_written(server: LocalServer, tmp_path: Path) -> None:
    (block,) = re.findall(re.escape(MARK) + r"\n```python\n(.*?)\n```", README.read_text(), re.DOTALL)
    ns: dict[str, Any] = {}
    with pytest.MonkeyPatch.context() as env:
        env.setenv("TOOLKIT_BASE_URL", server.url)
        env.setenv("TOOLKIT_API_KEY", server.key)
        env.chdir(tmp_path)
        exec(compile(block, str(README), "exec"), ns)
    try:
        lines = (tmp_path / "rollouts.jsonl").read_text().splitlines()
        assert len(lines) == 6 and all("messages" in json.loads(line) for line in lines)
        assert ns["tk"].research.read_jsonl(tmp_path / "groups.jsonl") == ns["stored"]
        assert ns["job"].refresh().status == "succeeded"
        assert len(ns["rescored"]) == 3
        frame = ns["evaluation"].frame
        assert list(frame["step"]) == [0, 1] and list(frame["n"]) == [2, 2]
    finally:
        ns["client"].close()
