"""The README's "Train an agent" example runs as written against a local server (tool calling on the
chat endpoint, the agent loop, SFT data with tools, an RL job on multi-turn groups)."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest

from conftest import LocalServer

README = Path(__file__).resolve().parents[2] / "README.md"
MARK = "<!-- tested by tests/docs/test_docs_readme_agent.py -->"


def test_train_an_agent_runs_as_written(server: LocalServer) -> None:
    (block,) = re.findall(re.escape(MARK) + r"\n```python\n(.*?)\n```", README.read_text(), re.DOTALL)
    ns: dict[str, Any] = {}
    with pytest.MonkeyPatch.context() as env:
        env.setenv("TOOLKIT_BASE_URL", server.url)
        env.setenv("TOOLKIT_API_KEY", server.key)
        exec(compile(block, str(README), "exec"), ns)
    try:
        groups, agent = ns["groups"], ns["agent"]
        assert [len(g.trajectories) for g in groups] == [4] * 4 and all(not g.exceptions for g in groups)
        made = groups[0].trajectories[0]
        assert [t.function.name for t in made.tools or []] == ["get"]
        assert made.tools[0].function.parameters == {  # type: ignore[index]
            "type": "object",
            "properties": {"key": {"type": "string"}},
            "required": ["key"],
        }
        assert all(
            c.token_ids and c.logprobs is not None for t in groups[0].trajectories for c in t.choices()
        )
        assert made.initial_policy_version == ns["step"] and agent.max_turns == 3
        assert ns["sft_job"].refresh().status == "succeeded"
        checkpoint, job = ns["checkpoint"], ns["job"]
        assert checkpoint.step == ns["step"] + 1
        trained = checkpoint.metrics["data/step_num_groups_trainable"] > 0
        assert checkpoint.trained is trained  # as the README says, this step may train nothing
        warned = [e.data["code"] for e in job.events(follow=False) if e.type == "warning"]
        assert ("nothing_trained" in warned) is not trained, warned
    finally:
        ns["client"].close()
