"""Multi-turn sequences: every assistant turn of a tool-using conversation is trained on its own tokens
(RL: the sampled ids and logprobs of each Choice; SFT: the template's rendering), and the system, user
and tool turns and the template's scaffolding are masked."""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import pytest

from toolkit.server.engine.model import ensure_builtin
from toolkit.server.training.sequences import ChatFormat, Sample, rl_samples, template_messages
from toolkit.types.training import Trajectory, TrajectoryGroup

TOOLS = [
    {
        "type": "function",
        "function": {
            "name": "get",
            "parameters": {"type": "object", "properties": {"key": {"type": "string"}}, "required": ["key"]},
        },
    }
]
CALL = {"id": "call_1", "type": "function", "function": {"name": "get", "arguments": '{"key": "abc"}'}}


def conversation(arguments: Any = '{"key": "abc"}') -> list[dict[str, Any]]:
    call = {**CALL, "function": {"name": "get", "arguments": arguments}}
    return [
        {"role": "user", "content": "code abc"},
        {"role": "assistant", "content": None, "tool_calls": [call]},
        {"role": "tool", "tool_call_id": "call_1", "content": "417"},
        {"role": "assistant", "content": "417"},
    ]


@pytest.fixture(scope="module")
def fmt(tmp_path_factory: pytest.TempPathFactory) -> ChatFormat:
    return ChatFormat(ensure_builtin(Path(tmp_path_factory.mktemp("data"))))


def spans(fmt: ChatFormat, sample: Sample, trained: bool = True) -> list[str]:
    """The decoded runs of tokens whose mask is ``trained``."""
    runs: list[list[int]] = []
    previous = not trained
    for token, mask in zip(sample.tokens, sample.mask, strict=True):
        if mask == trained:
            if previous != trained:
                runs.append([])
            runs[-1].append(token)
        previous = mask
    return [fmt.codec.decode(run, skip_special_tokens=False, spaces_between=False) for run in runs]


def test_arguments_become_objects_at_the_template_boundary() -> None:
    messages = conversation()
    converted = template_messages(messages)
    assert converted[1]["tool_calls"][0]["function"]["arguments"] == {"key": "abc"}
    assert messages[1]["tool_calls"][0]["function"]["arguments"] == '{"key": "abc"}'  # not mutated
    bad = conversation("{not json")
    assert template_messages(bad)[1]["tool_calls"][0]["function"]["arguments"] == "{not json"


def test_sft_trains_the_call_and_the_answer_only(fmt: ChatFormat) -> None:
    (sample,) = fmt.conversation(conversation(), TOOLS)
    trained = spans(fmt, sample)
    end = fmt.codec.decode([fmt.end_of_turn], skip_special_tokens=False, spaces_between=False)
    assert len(trained) == 2 and all(span.endswith(end) for span in trained)
    call, answer = trained
    assert "<tool_call>" in call and '"arguments": {"key": "abc"}' in call and '\\"key\\"' not in call
    assert answer == "417" + end
    masked = "".join(spans(fmt, sample, trained=False))
    assert "code abc" in masked and "get(key: string)" in masked  # the user turn and the tool list
    assert masked.count("417") == 1  # the tool's result, masked; the answer's 417 is trained
    assert sample.tokens[: len(fmt.encode(fmt.render(conversation()[:1], TOOLS, True)))] == fmt.encode(
        fmt.render(conversation()[:1], TOOLS, True)
    )


def test_sft_arguments_as_strings_or_objects_give_the_same_tokens(fmt: ChatFormat) -> None:
    as_string = fmt.conversation(conversation('{"key": "abc"}'), TOOLS)
    as_object = fmt.conversation(conversation({"key": "abc"}), TOOLS)
    assert [(s.tokens, s.mask) for s in as_string] == [(s.tokens, s.mask) for s in as_object]
    (last_only,) = fmt.conversation(conversation(), TOOLS, trained=[3])
    assert len(spans(fmt, last_only)) == 1 and spans(fmt, last_only)[0].startswith("417")


def sampled_trajectory(fmt: ChatFormat, reward: float, call_text: str | None = None) -> Trajectory:
    """A two-turn trajectory as the engine samples it: each Choice's prompt ids are the template's
    rendering of the history, its token ids what it generated (``call_text``: the model's own spelling
    of the call, default the template's), its logprobs distinct per turn."""
    messages = conversation()
    prompt1 = fmt.encode(fmt.render(messages[:1], TOOLS, True))
    call_ids = fmt.completion(fmt.render(messages[:1], TOOLS, True), messages[:2], TOOLS)
    if call_text is not None:
        call_ids = [*fmt.encode(call_text), fmt.end_of_turn]
    prompt2 = fmt.encode(fmt.render(messages[:3], TOOLS, True))
    answer_ids = [*fmt.encode("417"), fmt.end_of_turn]

    def choice(message: dict[str, Any], prompt: list[int], ids: list[int], logprob: float) -> dict[str, Any]:
        return {
            "message": {k: v for k, v in message.items() if v is not None},
            "finish_reason": "tool_calls" if "tool_calls" in message else "stop",
            "logprobs": {"content": [{"token": str(t), "logprob": logprob} for t in ids]},
            "token_ids": ids,
            "prompt_token_ids": prompt,
        }

    return Trajectory.model_validate(
        {
            "messages_and_choices": [
                messages[0],
                choice(messages[1], prompt1, call_ids, -0.25),
                messages[2],
                choice(messages[3], prompt2, answer_ids, -0.75),
            ],
            "tools": TOOLS,
            "reward": reward,
        }
    )


def plan(fmt: ChatFormat, *trajectories: Trajectory) -> list[Sample]:
    group = TrajectoryGroup(trajectories=list(trajectories))
    return rl_samples(
        [group], fmt, scale_rewards=True, advantage_balance=0.0, allow_without_logprobs=False
    ).samples


def test_rl_trains_each_turn_on_its_sampled_tokens_in_one_sequence(fmt: ChatFormat) -> None:
    good, bad = sampled_trajectory(fmt, 1.0), sampled_trajectory(fmt, 0.0)
    samples = plan(fmt, good, bad)
    assert len(samples) == 2  # one sequence per trajectory: turn 2's prompt extends turn 1
    first, second = good.choices()
    for sample in samples:
        assert sample.tokens == [*(second.prompt_token_ids or []), *(second.token_ids or [])]
        trained = [t for t, m in zip(sample.tokens, sample.mask, strict=True) if m]
        assert trained == [*(first.token_ids or []), *(second.token_ids or [])]
        logprobs = [lp for lp, m in zip(sample.logprobs, sample.mask, strict=True) if m]
        assert logprobs == [-0.25] * len(first.token_ids or []) + [-0.75] * len(second.token_ids or [])
        assert all(math.isnan(lp) for lp, m in zip(sample.logprobs, sample.mask, strict=True) if not m)
        masked = "".join(spans(fmt, sample, trained=False))
        assert "code abc" in masked and "417" in masked  # the user turn and the tool's result
    assert samples[0].advantage > 0 > samples[1].advantage


def test_rl_turn_whose_prompt_does_not_extend_the_sequence_starts_its_own(fmt: ChatFormat) -> None:
    """The model spelled the call without spaces; the template re-renders it with them, so turn 2's
    prompt differs from what turn 1 sampled: both turns are still trained, each under its own prompt."""
    compact = '<tool_call>{"name":"get","arguments":{"key":"abc"}}</tool_call>'
    made = sampled_trajectory(fmt, 1.0, call_text=compact)
    samples = plan(fmt, made, sampled_trajectory(fmt, 0.0))
    first, second = made.choices()
    own = [s for s in samples if s.trajectory == samples[0].trajectory]
    assert len(own) == 2 and own[0].advantage == own[1].advantage
    assert own[0].tokens == [*(first.prompt_token_ids or []), *(first.token_ids or [])]
    assert own[1].tokens == [*(second.prompt_token_ids or []), *(second.token_ids or [])]
    assert spans(fmt, own[0]) == [
        compact + fmt.codec.decode([fmt.end_of_turn], skip_special_tokens=False, spaces_between=False)
    ]
    assert [t for t, m in zip(own[1].tokens, own[1].mask, strict=True) if m] == second.token_ids


def test_rl_without_token_ids_renders_tool_calls_as_objects(fmt: ChatFormat) -> None:
    """allow_training_without_logprobs: turns typed by hand are rendered by the template (arguments
    parsed from their JSON strings) and trained on that rendering."""
    messages = conversation()
    plain = {
        "messages_and_choices": [
            messages[0],
            {"message": messages[1], "finish_reason": "tool_calls"},
            messages[2],
            {"message": messages[3], "finish_reason": "stop"},
        ],
        "tools": TOOLS,
    }
    group = TrajectoryGroup(
        trajectories=[Trajectory.model_validate({**plain, "reward": r}) for r in (0.0, 1.0)]
    )
    samples = rl_samples(
        [group], fmt, scale_rewards=True, advantage_balance=0.0, allow_without_logprobs=True
    ).samples
    (sft,) = fmt.conversation(json.loads(json.dumps(messages)), TOOLS)
    assert [(s.tokens, s.mask) for s in samples] == [(sft.tokens, sft.mask)] * 2
