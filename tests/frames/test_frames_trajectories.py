"""``tk.frames.trajectories`` and ``tk.frames.turns`` read from the real server: the column contract,
one row per trajectory (every page) and one row per message."""

from __future__ import annotations

import json

import pandas as pd
import pytest

import toolkit as tk
from conftest import LocalServer
from support.training_helpers import answer_trajectory, new_model, served
from toolkit.types.trajectories import prompt_key

TRAJECTORY_COLUMNS = [
    "id",
    "model_id",
    "step",
    "split",
    "group",
    "index",
    "reward",
    "advantage",
    "num_messages",
    "num_turns",
    "prompt_tokens",
    "completion_tokens",
    "truncated",
    "error",
    "prompt_key",
    "last_content",
    "finish_reason",
    "trace_call_id",
    "trained_step",
]
TURN_COLUMNS = [
    "trajectory_id",
    "step",
    "group",
    "index",
    "position",
    "role",
    "content",
    "tool_calls",
    "tool_call_id",
    "finish_reason",
    "num_tokens",
    "mean_logprob",
]
CALL = {"id": "c1", "type": "function", "function": {"name": "lookup", "arguments": '{"key": "owl"}'}}


@pytest.fixture(scope="module")
def logged(server: LocalServer) -> tuple[tk.Client, str]:
    """A model with one RL step on two answers, then a logged agent trajectory (tool call, tool
    result, final answer) at step 1."""
    client = server.client()
    model = new_model(client, "frames")
    base = served(model, 0)
    group = {
        "trajectories": [answer_trajectory(client, base, "cat", a, r) for a, r in (("tac", 1.0), ("x", 0.0))]
    }
    client.training_jobs.create(model_id=model.id, trajectory_groups=[group]).wait(progress=False)
    final = answer_trajectory(client, served(model, 1), "owl", "lwo", 1.0)["messages_and_choices"][-1]
    agent = {
        "messages_and_choices": [
            {"role": "user", "content": "reverse owl"},
            {"role": "assistant", "content": None, "tool_calls": [CALL]},
            {"role": "tool", "tool_call_id": "c1", "content": "owl"},
            final,
        ],
        "reward": 1.0,
        "metrics": {"tool_calls": 1},
        "metadata": {"trace_call_id": "call-7", "word": "owl"},
    }
    client.models.log(model.id, split="val", trajectory_groups=[{"trajectories": [agent]}])
    return client, model.id


def test_trajectories_frame_columns_and_rows(logged: tuple[tk.Client, str]) -> None:
    client, model_id = logged
    df = tk.frames.trajectories(client, model_id, page=1)  # every page, one trajectory each
    assert list(df.columns[: len(TRAJECTORY_COLUMNS)]) == TRAJECTORY_COLUMNS
    assert set(df.columns[len(TRAJECTORY_COLUMNS) :]) == {
        "metric/tool_calls",
        "meta/trace_call_id",
        "meta/word",
    }
    assert df["step"].tolist() == [1, 0, 0] and df["split"].tolist() == ["val", "train", "train"]
    agent, right, wrong = (df.iloc[i] for i in range(3))
    assert (agent["num_messages"], agent["num_turns"], agent["trace_call_id"]) == (4, 2, "call-7")
    assert pd.isna(agent["advantage"]) and pd.isna(agent["trained_step"]) and agent["last_content"] == "lwo"
    assert agent["metric/tool_calls"] == 1.0 and agent["prompt_key"] == prompt_key(
        [{"role": "user", "content": "reverse owl"}]
    )
    assert (
        agent["completion_tokens"] == len("lwo") + 1
    )  # the choice's; the plain tool-call message is context
    assert right["advantage"] == pytest.approx(1.0, abs=1e-5) and wrong["advantage"] == pytest.approx(
        -1.0, abs=1e-5
    )
    assert right["trained_step"] == 1 and right["index"] == 0 and wrong["index"] == 1
    assert right["group"] == wrong["group"] != agent["group"]
    assert right["completion_tokens"] == len("tac") + 1 and right["prompt_tokens"] > 0
    assert not right["truncated"] and right["finish_reason"] == "stop" and pd.isna(right["error"])
    assert str(df["truncated"].dtype) == "boolean" and str(df["trained_step"].dtype) == "Int64"
    only_val = tk.frames.trajectories(client, model_id, split="val")
    assert only_val["id"].tolist() == [agent["id"]]


def test_turns_one_row_per_message(logged: tuple[tk.Client, str]) -> None:
    client, model_id = logged
    df = tk.frames.turns(client, model_id, split="val")
    assert list(df.columns) == TURN_COLUMNS
    assert df["position"].tolist() == [0, 1, 2, 3]
    assert df["role"].tolist() == ["user", "assistant", "tool", "assistant"]
    assert json.loads(df["tool_calls"].iloc[1]) == [CALL] and df["tool_call_id"].iloc[2] == "c1"
    assert pd.isna(df["num_tokens"].iloc[1])  # a plain message carries no tokens
    last = df.iloc[3]
    assert (last["content"], last["finish_reason"], last["num_tokens"]) == ("lwo", "stop", len("lwo") + 1)
    assert last["mean_logprob"] < 0


def test_turns_of_a_frame_or_of_records(logged: tuple[tk.Client, str]) -> None:
    client, model_id = logged
    every = tk.frames.turns(client, model_id)
    trained = tk.frames.trajectories(client, model_id, split="train")
    of_frame = tk.frames.turns(trained, client=client)
    assert set(of_frame["trajectory_id"]) == set(trained["id"]) and len(of_frame) == 4
    assert len(every) == 8
    records = list(client.models.trajectories(model_id, split="train"))
    pd.testing.assert_frame_equal(tk.frames.turns(records), of_frame)
    pd.testing.assert_frame_equal(tk.frames.trajectories([r.model_dump() for r in records]), trained)
    with pytest.raises(TypeError, match="client="):
        tk.frames.turns(trained)
