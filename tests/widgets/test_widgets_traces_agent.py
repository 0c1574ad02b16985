"""TraceBrowser on an agent rollout: the rollout's model calls and tool calls as steps, tool calls
with their arguments and results collapsed (real trace service, scripted chat)."""

from __future__ import annotations

import json

from conftest import LocalServer
from support.agent_support import Faulty, Lookup, ScriptedChat, call_then_answer, faulty_calls
from support.traces_helpers import new_project
from toolkit import tracing
from toolkit.rollouts import Agent
from toolkit.widgets import TraceBrowser


def test_an_agent_rollout_shows_its_steps(server: LocalServer) -> None:
    client = server.client()
    project = new_project()
    tracing.enable(client, project)
    try:
        made = Agent(ScriptedChat(call_then_answer), "lookup:step2", Lookup).rollout("abc")  # type: ignore[arg-type]
        Agent(ScriptedChat(faulty_calls), "m", Faulty, tool_timeout=0.3).rollout("xyz")  # type: ignore[arg-type]
        with tracing.call("not-an-agent"):
            pass
    finally:
        tracing.disable()
    browser = TraceBrowser(client, project, roots_only=True)
    browser.search()
    assert browser.total == 3
    browser.open_call(str(made.metadata["trace_call_id"]))
    steps = browser.steps
    assert steps[["step", "kind", "name", "status"]].values.tolist() == [
        [0, "model", "lookup:step2", "success"],
        [1, "tool", "get", "success"],
        [2, "tool", "shout", "success"],
        [3, "model", "lookup:step2", "success"],
    ]
    assert json.loads(steps.loc[1, "input"]) == {"key": "abc"} and steps.loc[1, "output"] == "417"
    assert json.loads(steps.loc[0, "input"]) == {"role": "user", "content": "code abc"}
    first_turn = json.loads(steps.loc[0, "output"])
    assert [c["function"]["name"] for c in first_turn["tool_calls"]] == ["get", "shout"]
    assert json.loads(steps.loc[3, "output"])["content"] == "417"
    view = browser.agent_view.value
    assert view.startswith("<b>Agent steps</b>")
    assert view.count('class="tool-call"') == 4  # the model's two calls and the two tool calls
    assert view.count('class="tool-result"') == 2

    faulty = next(
        r.id
        for r in browser.calls.itertuples()
        if r.id not in (made.metadata["trace_call_id"],) and r.name == "rollout"
    )
    browser.open_call(faulty)
    tools = browser.steps[browser.steps["kind"] == "tool"]
    assert tools[["name", "status"]].values.tolist() == [
        ["boom", "error"],
        ["slow", "error"],
        ["get", "success"],
    ]
    assert "the database is down" in tools.iloc[0]["output"]

    other = next(r.id for r in browser.calls.itertuples() if r.name == "not-an-agent")
    browser.open_call(other)
    assert browser.steps.empty and browser.agent_view.value == ""
