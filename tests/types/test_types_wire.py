"""Property tests of the wire types: dump/validate round trips in both ART payload styles, and the
strictness of the experimental RL config."""

from __future__ import annotations

import json
import math
from datetime import UTC
from typing import Any

import pydantic
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from support.art_payloads import ART_0_5_23_CONFIG
from toolkit.types import (
    Checkpoint,
    ExperimentalTrainingConfig,
    ListEnvelope,
    LogRequest,
    ModelCreate,
    Trajectory,
    TrajectoryGroup,
)
from toolkit.types.training import ChatMessage, Choice

settings.register_profile("wire", max_examples=60, deadline=None)
settings.load_profile("wire")

names = st.text(alphabet="abcdefghijklmnopqrstuvwxyz_", min_size=1, max_size=8)
finite = st.floats(allow_nan=False, allow_infinity=False, width=64)
numbers = st.one_of(st.integers(-(2**53), 2**53), finite, st.booleans())
scalars = st.one_of(st.none(), st.booleans(), st.integers(-(2**53), 2**53), finite, st.text(max_size=10))
texts = st.text(max_size=20)

messages = st.fixed_dictionaries(
    {"role": st.sampled_from(["system", "user", "assistant", "tool", "developer"]), "content": texts},
    optional={"name": names, "tool_call_id": names},
)
token_logprob = st.fixed_dictionaries(
    {"token": texts, "logprob": st.floats(max_value=0, allow_nan=False, allow_infinity=False)},
    optional={"bytes": st.lists(st.integers(0, 255), max_size=4), "top_logprobs": st.just([])},
)
choices = st.fixed_dictionaries(
    {"message": st.fixed_dictionaries({"role": st.just("assistant"), "content": st.none() | texts})},
    optional={
        "index": st.integers(0, 3),
        "finish_reason": st.sampled_from(["stop", "length", "tool_calls"]),
        "logprobs": st.fixed_dictionaries({"content": st.lists(token_logprob, max_size=3)}),
        "prompt_token_ids": st.lists(st.integers(0, 300), max_size=5),
        "token_ids": st.lists(st.integers(0, 300), max_size=5),
        "stop_reason": st.none() | st.integers(0, 300),
        "art_completion_tokens": st.integers(0, 10),
    },
)
tools = st.fixed_dictionaries(
    {
        "type": st.just("function"),
        "function": st.fixed_dictionaries({"name": names}, optional={"description": texts}),
    }
)
trajectories = st.fixed_dictionaries(
    {},
    optional={
        "messages_and_choices": st.lists(st.one_of(messages, choices), max_size=5),
        "reward": finite,
        "tools": st.none() | st.lists(tools, max_size=2),
        "additional_histories": st.lists(
            st.fixed_dictionaries(
                {"messages_and_choices": st.lists(st.one_of(messages, choices), max_size=3)}
            ),
            max_size=2,
        ),
        "initial_policy_version": st.none() | st.integers(0, 100),
        "final_policy_version": st.none() | st.integers(0, 100),
        "metrics": st.dictionaries(names, numbers, max_size=3),
        "metadata": st.dictionaries(names, scalars, max_size=3),
        "logs": st.lists(texts, max_size=2),
        "start_time": st.none()
        | st.datetimes(timezones=st.just(UTC)).map(lambda d: d.isoformat().replace("+00:00", "Z")),
    },
)
exceptions = st.fixed_dictionaries(
    {"type": st.just("<class 'ValueError'>"), "message": texts}, optional={"traceback": texts}
)
groups = st.fixed_dictionaries(
    {"trajectories": st.lists(trajectories, max_size=4)},
    optional={
        "exceptions": st.lists(exceptions, max_size=2),
        "metadata": st.dictionaries(names, scalars, max_size=3),
        "metrics": st.dictionaries(names, numbers, max_size=3),
        "logs": st.lists(texts, max_size=2),
    },
)


def kinds(group: TrajectoryGroup) -> list[list[str]]:
    return [[type(item).__name__ for item in t.messages_and_choices] for t in group.trajectories]


@given(groups)
def test_trajectory_group_round_trips(data: dict[str, Any]) -> None:
    group = TrajectoryGroup.model_validate(data)
    # Items with a "message" key are choices (model outputs), the rest chat messages.
    expected = [
        ["Choice" if "message" in item else "ChatMessage" for item in t.get("messages_and_choices", [])]
        for t in data["trajectories"]
    ]
    assert kinds(group) == expected

    for dumped in (
        group.model_dump(mode="json"),  # ART 0.5.18: every field explicit
        group.model_dump(mode="json", exclude_defaults=True),  # ART 0.5.23: defaults omitted
        group.model_dump(mode="json", exclude_unset=True),
    ):
        again = TrajectoryGroup.model_validate(dumped)
        assert again == group
        assert kinds(again) == expected
    assert TrajectoryGroup.model_validate_json(group.model_dump_json()) == group
    via_json = json.loads(json.dumps(group.model_dump(mode="json", exclude_unset=True)))
    assert via_json == json.loads(json.dumps(data))  # what was sent is what is dumped (extras kept)


@given(groups)
def test_choice_extras_ride_along(data: dict[str, Any]) -> None:
    group = TrajectoryGroup.model_validate(data)
    for sent, parsed in zip(data["trajectories"], group.trajectories, strict=True):
        for item, model in zip(
            sent.get("messages_and_choices", []), parsed.messages_and_choices, strict=True
        ):
            if isinstance(model, Choice):
                assert model.prompt_token_ids == item.get("prompt_token_ids")
                assert model.token_ids == item.get("token_ids")
                assert model.model_dump(mode="json").get("art_completion_tokens") == item.get(
                    "art_completion_tokens"
                )
            else:
                assert isinstance(model, ChatMessage)
                assert (model.role, model.content) == (item["role"], item["content"])


def test_defaults_of_omitted_fields() -> None:
    t = Trajectory.model_validate({})
    assert (t.messages_and_choices, t.reward, t.tools, t.additional_histories) == ([], 0.0, None, [])
    assert (t.metrics, t.metadata, t.logs, t.initial_policy_version) == ({}, {}, [], None)
    g = TrajectoryGroup.model_validate({"trajectories": [{}]})
    assert (g.exceptions, g.metadata, g.metrics, g.logs) == ([], {}, {}, [])
    with pytest.raises(pydantic.ValidationError):
        TrajectoryGroup.model_validate({})


@pytest.mark.parametrize("reward", [math.nan, math.inf, -math.inf])
def test_non_finite_rewards_are_rejected(reward: float) -> None:
    with pytest.raises(pydantic.ValidationError) as err:
        Trajectory.model_validate({"reward": reward})
    assert [e["loc"] for e in err.value.errors()] == [("reward",)]


def test_log_request_accepts_art_model_id() -> None:
    req = LogRequest.model_validate({"model_id": "m", "split": "val", "trajectory_groups": []})
    assert (req.split, req.trajectory_groups) == ("val", [])
    with pytest.raises(pydantic.ValidationError):
        LogRequest.model_validate({"split": "no spaces", "trajectory_groups": []})


# ----------------------------------------------------------------------------- experimental RL config

KNOWN = sorted(ExperimentalTrainingConfig.model_fields)
EXTENSIONS = {"num_iterations", "seed"}  # the local server's own keys (docs/interfaces.md)
ART_0_5_18 = {
    "advantage_balance": 0.0,
    "epsilon": None,
    "epsilon_high": None,
    "importance_sampling_level": "token",
    "kimi_k2_tau": None,
    "learning_rate": 5e-06,
    "mask_prob_ratio": False,
    "max_negative_advantage_importance_sampling_weight": None,
    "ppo": False,
    "precalculate_logprobs": False,
    "scale_rewards": True,
}


def test_art_configs_are_accepted_with_nulls_meaning_default() -> None:
    assert sorted({*ART_0_5_23_CONFIG, *EXTENSIONS}) == KNOWN
    for body in (ART_0_5_23_CONFIG, ART_0_5_18, {}):
        config = ExperimentalTrainingConfig.model_validate(body)
        assert config.model_dump(exclude_none=True) == {k: v for k, v in body.items() if v is not None}
        assert ExperimentalTrainingConfig.model_validate(config.model_dump()) == config


@given(st.sampled_from(KNOWN).flatmap(lambda k: st.tuples(st.just(k), names)))
def test_unknown_config_keys_are_kept_apart(pair: tuple[str, str]) -> None:
    """A newer ART's keys are accepted (the server names them in a warning) and set no known key."""
    known, suffix = pair
    unknown = f"{known}_{suffix}"
    config = ExperimentalTrainingConfig.model_validate({unknown: 1})
    assert config.model_extra == {unknown: 1}
    assert config.model_dump(exclude={unknown}) == ExperimentalTrainingConfig().model_dump()


@pytest.mark.parametrize("key", ["qwen_k2_tau", "model_k2_tau", "k2_tau", "learningRate"])
def test_only_the_wire_spelling_of_keys_is_known(key: str) -> None:
    config = ExperimentalTrainingConfig.model_validate({key: 0.1})
    assert (config.model_extra, config.kimi_k2_tau, config.learning_rate) == ({key: 0.1}, None, None)
    assert ExperimentalTrainingConfig.model_validate({"kimi_k2_tau": 0.1}).kimi_k2_tau == 0.1


@given(st.dictionaries(st.sampled_from(KNOWN), st.none()))
def test_any_subset_of_nulls_is_the_default_config(body: dict[str, None]) -> None:
    assert ExperimentalTrainingConfig.model_validate(body) == ExperimentalTrainingConfig()


@pytest.mark.parametrize(
    "body",
    [
        {"learning_rate": 0},
        {"learning_rate": -1e-5},
        {"loss_fn": "sft"},
        {"importance_sampling_level": "tokens"},
        {"logprob_calculation_chunk_size": 0},
        {"epsilon": "wide"},
        {"ppo": "maybe"},
    ],
)
def test_bad_config_values(body: dict[str, Any]) -> None:
    with pytest.raises(pydantic.ValidationError):
        ExperimentalTrainingConfig.model_validate(body)


# ----------------------------------------------------------------------------- other resources


checkpoints = st.fixed_dictionaries(
    {
        "id": st.uuids().map(str),
        "step": st.integers(0, 10**6),
        "metrics": st.dictionaries(names, finite, max_size=3),
    }
)


@given(st.lists(checkpoints, max_size=5), st.booleans())
def test_checkpoint_envelope_round_trips(items: list[dict[str, Any]], has_more: bool) -> None:
    body = {
        "object": "list",
        "data": items,
        "has_more": has_more,
        "first_id": items[0]["id"] if items else None,
        "last_id": items[-1]["id"] if items else None,
    }
    page = ListEnvelope[Checkpoint].model_validate(body)
    assert [c.step for c in page.data] == [c["step"] for c in items]
    assert ListEnvelope[Checkpoint].model_validate_json(page.model_dump_json()) == page
    assert page.model_dump(mode="json", exclude_unset=True) == body


@given(
    st.fixed_dictionaries(
        {"project": names, "name": names, "base_model": st.just("toolkit/tiny-chat-1m")},
        optional={"entity": st.none() | names, "return_existing": st.booleans()},
    )
)
def test_model_create_round_trips(body: dict[str, Any]) -> None:
    req = ModelCreate.model_validate(body)
    assert ModelCreate.model_validate(req.model_dump()) == req
    assert req.return_existing is body.get("return_existing", False)
