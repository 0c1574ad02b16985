"""``POST /v1/preview/models/{id}/log`` with ART 0.5.18 and 0.5.23 payloads, metrics checked by hand."""

from __future__ import annotations

import math
from collections.abc import Iterator
from typing import Any

import httpx
import pytest

from support.reliability_support import create_model
from toolkit.server.store.db import Database
from toolkit.server.store.migrations import MIGRATIONS
from toolkit.server.store.models import Models

LOG_KEYS = {"model_id", "split", "step", "checkpoint_id", "num_groups", "num_trajectories", "metrics"}
ROW_KEYS = {"id", "group_id", "split", "step", "reward", "trajectory"}  # and the stored facts:
ROW_KEYS |= {"model_id", "index", "advantage", "prompt_tokens", "completion_tokens", "truncated", "error"}
ROW_KEYS |= {"prompt_key", "trace_call_id", "trained_step", "job_id"}
EXCEPTION = {
    "type": "<class 'ValueError'>",
    "message": "rollout crashed",
    "traceback": "Traceback (most recent call last):\nValueError: rollout crashed\n",
}
TOOL = {
    "type": "function",
    "function": {
        "name": "search",
        "description": "Search",
        "parameters": {"type": "object", "properties": {"q": {"type": "string"}}},
        "strict": None,
    },
}


# ------------------------------------------------------------------------- ART 0.5.18: every field explicit


def choice_18(text: str) -> dict[str, Any]:
    """``openai.types.chat.chat_completion.Choice.model_dump()`` as 0.5.18 sends it."""
    return {
        "finish_reason": "stop",
        "index": 0,
        "logprobs": None,
        "message": {
            "content": text,
            "refusal": None,
            "role": "assistant",
            "annotations": None,
            "audio": None,
            "function_call": None,
            "tool_calls": None,
        },
    }


def trajectory_18(reward: float, metrics: dict[str, Any], answer: str) -> dict[str, Any]:
    return {
        "messages_and_choices": [
            {"role": "system", "content": "You are helpful."},
            {"role": "user", "content": "What is 2+2?"},
            choice_18(answer),
        ],
        "tools": [TOOL],
        "additional_histories": [],
        "reward": reward,
        "initial_policy_version": None,
        "final_policy_version": None,
        "metrics": metrics,
        "metadata": {"scenario_id": "s1", "difficulty": None},
        "logs": [],
    }


def group_18(
    trajectories: list[dict[str, Any]], metrics: dict[str, Any], exceptions: int = 0
) -> dict[str, Any]:
    return {
        "trajectories": trajectories,
        "exceptions": [EXCEPTION] * exceptions,
        "metadata": {},
        "metrics": metrics,
        "logs": [],
    }


# Three groups, metrics computed by hand:
#   A: rewards 1.0, 0.0, 0.5; correct 1, 0, True; len 10, 20, 30; group difficulty 2
#   B: rewards 0.2, 0.6; len 5 on the first only; one exception; group difficulty 4, flag True
#   C: reward 0.9 alone (no std for a single trajectory); two exceptions
GROUPS_18 = [
    group_18(
        [
            trajectory_18(1.0, {"correct": 1, "len": 10}, "4"),
            trajectory_18(0.0, {"correct": 0, "len": 20}, "5"),
            trajectory_18(0.5, {"correct": True, "len": 30}, "four"),
        ],
        {"difficulty": 2},
    ),
    group_18(
        [trajectory_18(0.2, {"len": 5}, "4."), trajectory_18(0.6, {}, "4!")],
        {"difficulty": 4, "flag": True},
        exceptions=1,
    ),
    group_18([trajectory_18(0.9, {}, "4")], {}, exceptions=2),
]
STD_A = math.sqrt(((1.0 - 0.5) ** 2 + (0.0 - 0.5) ** 2 + 0.0) / 3)  # population std, mean 0.5
STD_B = 0.2  # |0.2 - 0.4|
EXPECTED_18 = {
    "val/num_groups": 3.0,
    "val/num_trajectories": 6.0,
    "val/num_exceptions": 3.0,
    "val/exception_rate": 3 / 9,
    "val/reward": (1.0 + 0.0 + 0.5 + 0.2 + 0.6 + 0.9) / 6,
    "val/reward_std_dev": (STD_A + STD_B) / 2,
    "val/correct": 2 / 3,
    "val/len": (10 + 20 + 30 + 5) / 4,
    "val/group/difficulty": 3.0,
    "val/group/flag": 1.0,
}


def approx(expected: dict[str, float]) -> Any:
    return pytest.approx(expected, rel=1e-12, abs=1e-12)


def test_log_art_0_5_18_payload(http: httpx.Client) -> None:
    model_id = create_model(http)["id"]
    body = {"model_id": model_id, "split": "val", "trajectory_groups": GROUPS_18}
    r = http.post(f"/v1/preview/models/{model_id}/log", json=body)
    assert r.status_code == 200, r.text
    result = r.json()
    assert set(result) == LOG_KEYS
    checkpoints = http.get(f"/v1/preview/models/{model_id}/checkpoints").json()["data"]
    assert [c["step"] for c in checkpoints] == [0]
    assert {k: v for k, v in result.items() if k != "metrics"} == {
        "model_id": model_id,
        "split": "val",
        "step": 0,
        "checkpoint_id": checkpoints[0]["id"],
        "num_groups": 3,
        "num_trajectories": 6,
    }
    assert sorted(result["metrics"]) == sorted(EXPECTED_18)
    assert result["metrics"] == approx(EXPECTED_18)
    assert checkpoints[0]["metrics"] == result["metrics"]

    rows = http.get(f"/v1/preview/models/{model_id}/trajectories").json()
    assert len(rows) == 6
    for row in rows:
        assert set(row) == ROW_KEYS
    assert [(r["split"], r["step"], r["reward"]) for r in rows] == [
        ("val", 0, reward) for reward in (1.0, 0.0, 0.5, 0.2, 0.6, 0.9)
    ]
    assert [len({r["group_id"] for r in rows[a:b]}) for a, b in ((0, 3), (3, 5), (5, 6))] == [1, 1, 1]
    stored = rows[0]["trajectory"]
    assert stored["messages_and_choices"][2]["message"]["content"] == "4"
    assert stored["tools"][0]["function"]["name"] == "search"
    assert stored["metadata"] == {"scenario_id": "s1", "difficulty": None}


# ------------------------------------------------------------------------- ART 0.5.23: defaults omitted


def choice_23(text: str, token_ids: list[int]) -> dict[str, Any]:
    """A vLLM choice dumped with its extras (``prompt_token_ids``, ``token_ids``), as 0.5.23 sends it."""
    return {
        "finish_reason": "stop",
        "index": 0,
        "logprobs": {
            "content": [
                {"token": f"token_id:{t}", "bytes": None, "logprob": -0.01, "top_logprobs": []}
                for t in token_ids
            ],
            "refusal": None,
        },
        "message": {
            "content": text,
            "refusal": None,
            "role": "assistant",
            "annotations": None,
            "audio": None,
            "function_call": None,
            "tool_calls": None,
        },
        "stop_reason": None,
        "prompt_token_ids": [1, 2, 3],
        "token_ids": token_ids,
    }


PROMPT = [{"role": "system", "content": "You are helpful."}, {"role": "user", "content": "Say hi"}]
GROUPS_23 = [
    {
        "trajectories": [
            {
                "messages_and_choices": [*PROMPT, choice_23("Hello", [9707])],
                "reward": 1.0,
                "metrics": {"correct": 1},
                "metadata": {"scenario_id": "s1"},
            },
            # reward 0.0 is the default, so 0.5.23 leaves it out
            {"messages_and_choices": [*PROMPT, choice_23("Bye", [3, 4])]},
        ],
        "exceptions": [EXCEPTION],
        "metadata": {"prompt_id": 7},
    },
    {"trajectories": [{"messages_and_choices": [*PROMPT, choice_23("Hi", [5])], "reward": 0.25}]},
]
EXPECTED_23 = {
    "train/num_groups": 2.0,
    "train/num_trajectories": 3.0,
    "train/num_exceptions": 1.0,
    "train/exception_rate": 1 / 4,
    "train/reward": (1.0 + 0.0 + 0.25) / 3,
    "train/reward_std_dev": 0.5,  # only the first group has 2+ trajectories: rewards 1 and 0
    "train/correct": 1.0,
}


def test_log_art_0_5_23_payload(http: httpx.Client) -> None:
    model_id = create_model(http)["id"]
    body = {"model_id": model_id, "trajectory_groups": GROUPS_23, "split": "train"}
    r = http.post(f"/v1/preview/models/{model_id}/log", json=body)
    assert r.status_code == 200, r.text
    result = r.json()
    assert (result["num_groups"], result["num_trajectories"], result["step"]) == (2, 3, 0)
    assert sorted(result["metrics"]) == sorted(EXPECTED_23)
    assert result["metrics"] == approx(EXPECTED_23)
    checkpoint = http.get(f"/v1/preview/models/{model_id}/checkpoints").json()["data"][0]
    assert checkpoint["metrics"] == result["metrics"]

    rows = http.get(f"/v1/preview/models/{model_id}/trajectories", params={"split": "train"}).json()
    assert [r["reward"] for r in rows] == [1.0, 0.0, 0.25]
    second = rows[1]["trajectory"]
    assert second["reward"] == 0.0
    choice = second["messages_and_choices"][2]
    assert (choice["prompt_token_ids"], choice["token_ids"], choice["stop_reason"]) == (
        [1, 2, 3],
        [3, 4],
        None,
    )
    assert choice["logprobs"]["content"][1]["token"] == "token_id:4"
    assert [(m["role"], m["content"]) for m in second["messages_and_choices"][:2]] == [
        ("system", "You are helpful."),
        ("user", "Say hi"),
    ]


# ----------------------------------------------------------------------------- metrics per split and step


@pytest.fixture(scope="module")
def store(server: Any) -> Iterator[Models]:
    db = Database(server.data_dir / "toolkit.db", MIGRATIONS)
    yield Models(db)
    db.close()


def test_metrics_roll_up_per_split_at_the_current_step(http: httpx.Client, store: Models) -> None:
    model_id = create_model(http)["id"]
    path = f"/v1/preview/models/{model_id}/log"

    def log(split: str, rewards: list[float], exceptions: int = 0) -> dict[str, float]:
        group = {
            "trajectories": [{"reward": r} for r in rewards],
            "exceptions": [EXCEPTION] * exceptions,
        }
        r = http.post(path, json={"split": split, "trajectory_groups": [group]})
        assert r.status_code == 200, r.text
        metrics: dict[str, float] = r.json()["metrics"]
        return metrics

    assert log("val", [1.0, 0.0]) == approx(
        {
            "val/num_groups": 1.0,
            "val/num_trajectories": 2.0,
            "val/num_exceptions": 0.0,
            "val/exception_rate": 0.0,
            "val/reward": 0.5,
            "val/reward_std_dev": 0.5,
        }
    )
    # A second call at the same step and split: metrics over everything logged there.
    assert log("val", [0.5], exceptions=1) == approx(
        {
            "val/num_groups": 2.0,
            "val/num_trajectories": 3.0,
            "val/num_exceptions": 1.0,
            "val/exception_rate": 0.25,
            "val/reward": 0.5,
            "val/reward_std_dev": 0.5,
        }
    )
    assert log("test", [0.3]) == approx(
        {
            "test/num_groups": 1.0,
            "test/num_trajectories": 1.0,
            "test/num_exceptions": 0.0,
            "test/exception_rate": 0.0,
            "test/reward": 0.3,
        }
    )
    step0 = http.get(f"{path[:-4]}/checkpoints").json()["data"][0]["metrics"]
    assert sorted(step0) == sorted(
        [f"val/{k}" for k in ("num_groups", "num_trajectories", "num_exceptions", "exception_rate")]
        + ["val/reward", "val/reward_std_dev"]
        + [f"test/{k}" for k in ("num_groups", "num_trajectories", "num_exceptions", "exception_rate")]
        + ["test/reward"]
    )

    # A new checkpoint (what a training job adds): /log now lands on step 1; step 0 keeps its metrics.
    store.add_checkpoint(model_id, 1, None, {"loss/train": 0.7})
    r = http.post(path, json={"split": "val", "trajectory_groups": [{"trajectories": [{"reward": 0.8}]}]})
    assert r.json()["step"] == 1
    pages = http.get(f"{path[:-4]}/checkpoints").json()["data"]
    assert [c["step"] for c in pages] == [0, 1]
    assert pages[0]["metrics"] == step0
    assert pages[1]["metrics"] == approx(
        {
            "loss/train": 0.7,
            "val/num_groups": 1.0,
            "val/num_trajectories": 1.0,
            "val/num_exceptions": 0.0,
            "val/exception_rate": 0.0,
            "val/reward": 0.8,
        }
    )
    assert pages[1]["id"] == r.json()["checkpoint_id"]
    steps = http.get(f"{path[:-4]}/trajectories", params={"split": "val"}).json()
    assert [(row["step"], row["reward"]) for row in steps] == [(1, 0.8), (0, 1.0), (0, 0.0), (0, 0.5)]
    only_step0 = http.get(f"{path[:-4]}/trajectories", params={"split": "val", "step": 0, "limit": 2}).json()
    assert [row["reward"] for row in only_step0] == [1.0, 0.0]
    paged = http.get(f"{path[:-4]}/trajectories", params={"step": 0, "limit": 2, "offset": 2}).json()
    assert [(row["split"], row["reward"]) for row in paged] == [("val", 0.5), ("test", 0.3)]


def test_log_at_an_older_step_rolls_up_there_and_a_missing_step_changes_nothing(
    http: httpx.Client, store: Models
) -> None:
    """Extension ``step``: groups of an evaluation of an older checkpoint land at that step."""
    model_id = create_model(http)["id"]
    path = f"/v1/preview/models/{model_id}/log"
    store.add_checkpoint(model_id, 1, None, {"loss/train": 0.7})
    r = http.post(
        path, json={"split": "val", "step": 0, "trajectory_groups": [{"trajectories": [{"reward": 0.25}]}]}
    )
    assert r.status_code == 200 and (r.json()["step"], r.json()["metrics"]["val/reward"]) == (0, 0.25)
    pages = http.get(f"{path[:-4]}/checkpoints").json()["data"]
    assert pages[0]["metrics"]["val/reward"] == 0.25 and "val/reward" not in pages[1]["metrics"]
    missing = http.post(
        path, json={"split": "val", "step": 7, "trajectory_groups": [{"trajectories": [{"reward": 1}]}]}
    )
    assert missing.status_code == 422 and "no checkpoint at step 7" in missing.text
    assert missing.json()["detail"][0]["loc"] == ["body", "step"]
    rows = http.get(f"{path[:-4]}/trajectories").json()
    assert [(row["step"], row["reward"]) for row in rows] == [(0, 0.25)]


def test_log_with_no_groups_returns_the_steps_metrics(http: httpx.Client) -> None:
    model_id = create_model(http)["id"]
    r = http.post(f"/v1/preview/models/{model_id}/log", json={"split": "val", "trajectory_groups": []})
    assert r.status_code == 200
    assert (r.json()["num_groups"], r.json()["num_trajectories"]) == (0, 0)
    assert r.json()["metrics"] == {
        "val/num_groups": 0.0,
        "val/num_trajectories": 0.0,
        "val/num_exceptions": 0.0,
        "val/exception_rate": 0.0,
    }
