"""An agent rollout in the trace service: rollout -> model calls and tool calls, and the links between
the trajectory, its trace and the policy version that sampled it (real server, scripted chat)."""

from __future__ import annotations

from conftest import LocalServer
from support.agent_support import Faulty, Lookup, ScriptedChat, call_then_answer, faulty_calls
from support.traces_helpers import new_project
from toolkit import tracing
from toolkit.rollouts import Agent


def test_each_rollout_is_a_call_with_its_model_and_tool_calls_as_children(server: LocalServer) -> None:
    client = server.client()
    project = new_project()
    agent = Agent(ScriptedChat(call_then_answer), "lookup:step4", Lookup)  # type: ignore[arg-type]
    tracing.enable(client, project)
    try:
        groups = agent.gather(["abc", "xyz"], group_size=2, progress=False)
        alone = agent.rollout("abc")  # outside gather: the agent opens the rollout call itself
    finally:
        tracing.disable()
    trajectories = [t for g in groups for t in g.trajectories] + [alone]
    roots = list(client.traces.calls_query(project_id=project, filter={"trace_roots_only": True}))
    assert len(roots) == 5 and all(r.op_name == "rollout" for r in roots)
    by_id = {r.id: r for r in roots}
    for made in trajectories:
        root = by_id[str(made.metadata["trace_call_id"])]  # the trajectory names its rollout call
        assert root.attributes == {"model": "lookup:step4", "policy_version": 4}
        assert root.output == {"reward": 1.0, "metrics": made.metrics}
        (tree,) = client.traces.call_tree(project, root.trace_id)
        children = [n.call for n in tree.children]
        assert [c.op_name for c in children] == [
            "chat.completions.create",
            "tool.get",
            "tool.shout",
            "chat.completions.create",
        ]
        get, shout = children[1], children[2]
        assert get.inputs == {"key": root.inputs["scenario"]} and get.attributes == {"kind": "tool"}
        assert get.output == {"abc": "417", "xyz": "093"}[root.inputs["scenario"]]
        assert shout.inputs == {"text": "hi"} and shout.output == "HI"
        assert all(n.children == [] for n in tree.children)


def test_a_failing_tool_is_an_errored_child_of_a_successful_rollout(server: LocalServer) -> None:
    client = server.client()
    project = new_project()
    tracing.enable(client, project)
    try:
        made = Agent(ScriptedChat(faulty_calls), "m", Faulty, tool_timeout=0.3).rollout("xyz")  # type: ignore[arg-type]
    finally:
        tracing.disable()
    (root,) = client.traces.calls_query(project_id=project, filter={"trace_roots_only": True})
    assert root.summary["weave"]["status"] != "error" and made.reward == 1.0
    (tree,) = client.traces.call_tree(project, root.trace_id)
    tools = [
        (n.call.op_name, n.call.summary["weave"]["status"])
        for n in tree.children
        if n.call.op_name != "chat.completions.create"
    ]
    # unknown tools and arguments that do not parse never run: only boom, slow and the good get are calls
    assert tools == [("tool.boom", "error"), ("tool.slow", "error"), ("tool.get", "success")]
    boom = next(n.call for n in tree.children if n.call.op_name == "tool.boom")
    assert boom.exception is not None and "the database is down" in boom.exception
