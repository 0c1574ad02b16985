"""The agent task suite (toolkit.tasks.suite): held-out splits disjoint from training, demonstrations
that are valid SFT data and list what the agent sends, rewards that need the tools' results, the exact
answer and the end of the turn (episodes against a scripted chat), and each task's demonstrations
training and its episodes running against the real server."""

from __future__ import annotations

import json
from typing import Any

import pytest

from conftest import LocalServer
from support.agent_support import Reply, ScriptedChat
from support.seeded_requests import seeded_requests
from support.training_helpers import new_model, served
from toolkit.client.sft_data import train_jsonl
from toolkit.server.training.data import iter_conversations
from toolkit.tasks import suite
from toolkit.tasks.agent_task import AgentTask
from toolkit.types.training import Trajectory

TASKS = pytest.mark.parametrize("task", list(suite.TASKS.values()), ids=list(suite.TASKS))


@TASKS
def test_held_out_scenarios_never_meet_training_ones(task: AgentTask[Any]) -> None:
    train_keys, held_keys = suite.SPLITS[task.name]
    assert set(train_keys).isdisjoint(held_keys) and 1000 < len(held_keys) < 3000
    assert len(train_keys) + len(held_keys) == len(suite.WORDS)
    train, held = task.scenarios(300, seed=1), task.scenarios(300, seed=1, split="eval")

    def asked_about(s: Any) -> str:
        return s.name if isinstance(s, suite.Chain) else s.key

    assert {asked_about(s) for s in train} <= set(train_keys)
    assert {asked_about(s) for s in held} <= set(held_keys)
    assert len({str(s) for s in train}) == 300  # fresh answers per scenario: nothing to memorise
    assert task.scenarios(5, seed=3) == task.scenarios(5, seed=3) != task.scenarios(5, seed=4)


@TASKS
def test_demonstrations_are_sft_data_with_the_agents_tools(task: AgentTask[Any]) -> None:
    demos = task.demonstrations(8, seed=0)
    assert len(list(iter_conversations("train.jsonl", train_jsonl(demos)))) == 8
    chat = ScriptedChat(lambda messages: {"content": "?"})
    made = task.agent(chat, "m").rollout(task.scenarios(1, seed=0)[0])  # type: ignore[arg-type]
    assert chat.requests[0]["tools"] == demos[0]["tools"]  # SFT shows the model what RL will
    assert chat.requests[0]["messages"] == demos[0]["messages"][:1]
    assert made.reward == 0.0 and made.metrics["called"] is False


def replay(demo: dict[str, Any], final: str | None = None, calls: int | None = None) -> Any:
    """A script answering turn ``i`` with the demonstration's ``i``-th assistant turn: its first
    ``calls`` calls (all by default), then ``final`` (the demonstration's answer by default)."""
    turns = [m for m in demo["messages"] if m["role"] == "assistant"]
    made_calls, answer = turns[:-1][:calls], turns[-1]["content"] if final is None else final

    def script(messages: list[dict[str, Any]]) -> Reply:
        i = sum(1 for m in messages if m["role"] == "assistant")
        if i < len(made_calls):
            f = made_calls[i]["tool_calls"][0]["function"]
            return {"calls": [(f["name"], f["arguments"])]}
        return {"content": answer}

    return script


def episode(task: AgentTask[Any], script: Any, scenario: Any) -> Trajectory:
    return task.agent(ScriptedChat(script), "m").rollout(scenario)  # type: ignore[arg-type]


@TASKS
def test_the_demonstrated_episode_scores_1_and_a_wrong_answer_or_no_call_0(task: AgentTask[Any]) -> None:
    scenario = task.scenarios(1, seed=5)[0]
    demo = task.demonstration(scenario)
    good = episode(task, replay(demo), scenario)
    assert good.reward == 1.0 and good.metrics == {**good.metrics, "called": True, "correct": True}
    assert good.metrics["tool_calls"] == len(demo["messages"]) // 2 - 1 and good.metrics["tool_errors"] == 0
    right = demo["messages"][-1]["content"]
    wrong = episode(task, replay(demo, final=right + "0"), scenario)
    assert wrong.reward == 0.0 and wrong.metrics["called"] is True and wrong.metrics["correct"] is False
    guessed = episode(task, replay(demo, calls=0), scenario)  # the right answer, without the tools
    assert guessed.reward == 0.0 and guessed.metrics["correct"] is True and guessed.metrics["called"] is False


def test_choice_pays_only_the_asked_tools_number() -> None:
    scenario = suite.Pick("room", "kfz", ("111", "222", "333"))
    assert scenario.number == "222"

    def calling(tool: str, answer: str) -> Any:
        return lambda m: (
            {"calls": [(tool, '{"key": "kfz"}')]} if m[-1]["role"] == "user" else {"content": answer}
        )

    assert episode(suite.CHOICE, calling("room", "222"), scenario).reward == 1.0
    other = episode(suite.CHOICE, calling("code", "111"), scenario)  # another tool's number, copied right
    assert other.reward == 0.0 and other.metrics["called"] is False
    assert other.messages_and_choices[2].content == "111"  # type: ignore[union-attr]
    assert suite.demonstrate_choice(scenario)["messages"][1]["tool_calls"][0]["function"]["name"] == "room"


def test_chain_needs_the_key_found_first() -> None:
    scenario = suite.Chain("bob", "kfz", "417")
    demo = suite.demonstrate_chain(scenario)
    calls = [m["tool_calls"][0]["function"] for m in demo["messages"] if m.get("tool_calls")]
    assert calls == [
        {"name": "find", "arguments": json.dumps({"name": "bob"})},
        {"name": "get", "arguments": json.dumps({"key": "kfz"})},
    ]
    assert [m["content"] for m in demo["messages"] if m["role"] == "tool"] == ["kfz", "417"]

    def get_directly(messages: list[dict[str, Any]]) -> Reply:  # the name is not the key
        return (
            {"calls": [("get", '{"key": "bob"}')]} if messages[-1]["role"] == "user" else {"content": "417"}
        )

    skipped = episode(suite.CHAIN, get_directly, scenario)
    assert skipped.reward == 0.0 and skipped.messages_and_choices[2].content == "no such key"  # type: ignore[union-attr]
    assert episode(suite.CHAIN, replay(demo, calls=1), scenario).reward == 0.0  # found the key, never got


def test_words_and_transform_answers_differ_from_their_arguments() -> None:
    words = suite.Words("kfz", "qpa rex")
    assert suite.demonstrate_words(words)["messages"][-1]["content"] == "qpa rex"
    assert episode(suite.WORDS_TASK, replay(suite.demonstrate_words(words), final="qpa"), words).reward == 0.0
    assert all(" " in s.name and len(s.name) == 7 for s in suite.WORDS_TASK.scenarios(50, seed=0))
    code = suite.Transform("kfz", "417")
    demo = suite.demonstrate_transform(code)
    assert demo["messages"][2]["content"] == "417" and demo["messages"][-1]["content"] == "714"
    copied = episode(suite.TRANSFORM, replay(demo, final="417"), code)  # copied, not reversed
    assert copied.reward == 0.0 and copied.metrics["called"] is True


def trained_bytes(demo: dict[str, Any]) -> int:
    turns = [m for m in demo["messages"] if m["role"] == "assistant"]
    calls = [t["tool_calls"][0]["function"] for t in turns[:-1]]
    texts = [json.dumps({"name": f["name"], "arguments": json.loads(f["arguments"])}) for f in calls]
    return sum(len(f"<tool_call>{t}</tool_call>") + 1 for t in texts) + len(turns[-1]["content"]) + 1


@TASKS
def test_each_task_trains_and_runs_against_the_server(server: LocalServer, task: AgentTask[Any]) -> None:
    """Its demonstrations make an SFT job the server accepts and trains; episodes of the checkpoint run
    through the chat endpoint with the task's tools, each scored 0 or 1."""
    client = server.client()
    try:
        model = new_model(client, f"suite-{task.name}")
        job = client.sft_training_jobs.create_from_data(
            model_id=model.id, data=task.demonstrations(16, seed=0), config={"batch_size": 8}
        )
        checkpoint = job.wait(progress=False)
        step = checkpoint.step
        assert step == 1 and checkpoint.trained
        # every assistant turn of the last batch is trained: each call as the template writes it, the
        # answer, and each turn's end (one byte a token)
        last_batch = task.demonstrations(16, seed=0)[8:]
        assert checkpoint.metrics["sft/num_trainable_tokens"] == sum(map(trained_bytes, last_batch))
        groups = task.agent(client, served(model, step)).gather(
            task.scenarios(2, seed=0, split="eval"), group_size=2, progress=False, max_exceptions=0
        )
        made = [t for g in groups for t in g.trajectories]
        assert len(made) == 4 and all(t.reward in (0.0, 1.0) for t in made)
        assert all(t.tools == made[0].tools for t in made)
        tools = task.demonstration(task.scenarios(1, seed=0)[0])["tools"]
        assert [t.model_dump(mode="json", exclude_none=True) for t in made[0].tools or []] == tools
        assert all(c.token_ids and c.logprobs is not None for t in made for c in t.choices())
        # held-out success: the mean reward of the held-out episodes its seed draws and samples
        name = served(model, step)
        success, sent = seeded_requests(lambda: task.success(client, name, 4, seed=1))
        held_out = task.scenarios(4, 1, split="eval")
        episodes, gathered = seeded_requests(
            lambda: task.agent(client, name).gather(held_out, progress=False, seed=1)
        )
        rewards = [t.reward for g in episodes for t in g.trajectories]
        assert sent == gathered and len(rewards) == 4 and success == sum(rewards) / 4
    finally:
        client.close()
