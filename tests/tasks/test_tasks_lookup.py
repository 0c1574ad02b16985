"""The code-lookup agent task: scenarios and held-out keys, demonstrations that are valid SFT data and
match what the agent sends, and a reward that needs the tool's result, the exact code and the end of
the turn (episodes against a scripted chat)."""

from __future__ import annotations

import json
from typing import Any

from support.agent_support import Reply, ScriptedChat
from toolkit.client.sft_data import train_jsonl
from toolkit.rollouts import Agent
from toolkit.server.training.data import iter_conversations
from toolkit.tasks import lookup


def test_scenarios_hold_keys_out_and_draw_fresh_codes() -> None:
    assert set(lookup.TRAIN_KEYS).isdisjoint(lookup.EVAL_KEYS) and len(lookup.EVAL_KEYS) > 1000
    train, held = lookup.scenarios(200, seed=1), lookup.scenarios(200, seed=1, split="eval")
    assert all(s.key in lookup.TRAIN_KEYS for s in train) and all(s.key in lookup.EVAL_KEYS for s in held)
    assert all(len(s.code) == 3 and s.code.isdigit() for s in train)
    assert len({s.code for s in train}) > 100  # codes are drawn per scenario: nothing to memorise
    assert lookup.scenarios(5, seed=3) == lookup.scenarios(5, seed=3)


def test_demonstrations_are_sft_data_with_the_agents_tool() -> None:
    demos = lookup.demonstrations(8, seed=0)
    conversations = list(iter_conversations("train.jsonl", train_jsonl(demos)))
    assert len(conversations) == 8
    first, scenario = demos[0], lookup.scenarios(8, seed=0)[0]
    roles = [m["role"] for m in first["messages"]]
    assert roles == ["user", "assistant", "tool", "assistant"]
    call = first["messages"][1]["tool_calls"][0]["function"]
    assert call == {"name": "get", "arguments": json.dumps({"key": scenario.key})}
    assert first["messages"][2]["content"] == first["messages"][3]["content"] == scenario.code
    chat = ScriptedChat(lambda messages: {"content": "?"})
    lookup.agent(chat, "m").rollout(scenario)  # type: ignore[arg-type]
    assert chat.requests[0]["tools"] == first["tools"]  # SFT shows the model what RL will
    assert chat.requests[0]["messages"] == first["messages"][:1]


def episode(script: Any, scenario: lookup.Scenario) -> Any:
    return Agent(ScriptedChat(script), "m", lookup.CodeLookup, max_turns=3).rollout(scenario)  # type: ignore[arg-type]


def test_the_reward_needs_the_tool_result_the_exact_code_and_the_end_of_turn() -> None:
    scenario = lookup.Scenario("kfz", "417")

    def agent_that(key: str, answer: str) -> Any:
        def script(messages: list[dict[str, Any]]) -> Reply:
            if messages[-1]["role"] == "user":
                return {"calls": [("get", json.dumps({"key": key}))]}
            return {"content": answer}

        return script

    good = episode(agent_that("kfz", "417"), scenario)
    assert good.reward == 1.0 and good.metrics["called"] is True and good.metrics["correct"] is True
    assert len(good.choices()) == 2 and good.metrics["turns"] == 2
    wrong_key = episode(agent_that("kfa", "417"), scenario)  # the tool answers "no such key"
    assert wrong_key.reward == 0.0 and wrong_key.metrics["called"] is False
    assert wrong_key.messages_and_choices[2].content == "no such key"  # type: ignore[union-attr]
    wrong_code = episode(agent_that("kfz", "418"), scenario)
    assert wrong_code.reward == 0.0 and wrong_code.metrics == {
        **wrong_code.metrics,
        "called": True,
        "correct": False,
    }
    guessed = episode(lambda messages: {"content": "417"}, scenario)  # right by chance, without the tool
    assert guessed.reward == 0.0 and guessed.metrics["correct"] is True and guessed.metrics["called"] is False


def test_an_answer_cut_by_max_tokens_scores_nothing() -> None:
    """The right key called and the right code answered, but the answer ran into ``max_tokens``
    (``finish_reason`` "length"): no answer, reward 0."""

    class CutAnswers(ScriptedChat):
        def create(self, **request: Any) -> Any:
            made = super().create(**request)
            if not made.choices[0].message.tool_calls:
                made.choices[0].finish_reason = "length"
            return made

    def script(messages: list[dict[str, Any]]) -> dict[str, Any]:
        return (
            {"content": "417"} if messages[-1]["role"] == "tool" else {"calls": [("get", '{"key": "kfz"}')]}
        )

    agent = Agent(CutAnswers(script), "m", lookup.CodeLookup, max_turns=3)  # type: ignore[arg-type]
    made = agent.rollout(lookup.Scenario("kfz", "417"))
    assert made.choices()[-1].finish_reason == "length" and made.choices()[-1].message.content == "417"
    assert lookup.answer(made) is None
    assert made.reward == 0.0 and made.metrics["called"] is True and made.metrics["correct"] is False
