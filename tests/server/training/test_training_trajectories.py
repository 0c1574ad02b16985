"""Every trajectory kept and queryable, over loopback HTTP: after real RL steps on the reverse task,
each trajectory of each step comes back with the advantage its job used; filters, cursor pages and
the rejection of bad filters (which change nothing)."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import pytest

import toolkit as tk
from conftest import LocalServer
from support.training_helpers import answer_trajectory, choice, new_model, scored_answer, served
from toolkit.server.training.loss import group_advantages
from toolkit.tasks import reverse
from toolkit.types.trajectories import StoredTrajectory, prompt_key

TOOL_CALL = {
    "id": "call_1",
    "type": "function",
    "function": {"name": "lookup", "arguments": '{"key": "zebra"}'},
}


@dataclass
class Run:
    model: tk.types.Model
    jobs: list[Any]  # the finished job of each step
    trained: list[list[dict[str, Any]]]  # the groups each job trained on (as sent)
    logged_train_ids: list[int]  # the rows /log stored for step 0's train groups, before its job


def rollout_groups(client: tk.Client, model: str, words: list[str]) -> list[dict[str, Any]]:
    """One group per word: three sampled answers of the served model, scored by the task's reward,
    and the right answer (so that each group's rewards vary)."""
    run = reverse.rollout(client, model, temperature=1.0)
    groups = []
    for word in words:
        sampled = [run(word).model_dump(mode="json") for _ in range(3)]
        right = answer_trajectory(client, model, word, word[::-1], reverse.reward(word, word[::-1], "stop"))
        groups.append({"trajectories": [*sampled, right]})
    return groups


def crafted_val_groups(client: tk.Client, model: str) -> list[dict[str, Any]]:
    """Groups with what the filters look for: equal rewards, a cut turn, an error, a tool call."""
    head, ids, lps = scored_answer(client, model, "cat", "ta")
    cut = choice(head, ids, lps, "ta") | {"finish_reason": "length"}
    tool_turn = {"role": "assistant", "content": None, "tool_calls": [TOOL_CALL]}
    tool_result = {"role": "tool", "tool_call_id": "call_1", "content": "zebra is a striped animal"}
    return [
        {"trajectories": [answer_trajectory(client, model, "cat", "tac", 0.5) for _ in range(2)]},
        {
            "trajectories": [
                {"messages_and_choices": [*reverse.prompt("cat"), cut], "reward": 0.0},
                {
                    "messages_and_choices": [*reverse.prompt("owl"), tool_turn, tool_result],
                    "reward": 1.0,
                    "metadata": {"trace_call_id": "0191-call"},
                },
            ]
        },
        {
            "trajectories": [{"messages_and_choices": reverse.prompt("bee"), "reward": 0.25}],
            "exceptions": [
                {"type": "<class 'TimeoutError'>", "message": "rollout timed out", "traceback": ""}
            ],
        },
    ]


@pytest.fixture(scope="module")
def run(server: LocalServer) -> Run:
    """Two RL steps: step 0's groups are logged as ``train`` first (as ART does), step 1's are not."""
    client = server.client()
    model = new_model(client, "kept")
    client.models.log(model.id, split="val", trajectory_groups=crafted_val_groups(client, served(model, 0)))
    jobs, trained, logged_ids = [], [], []
    for step, words in enumerate((["cat", "dog"], ["sun", "owl"])):
        groups = rollout_groups(client, served(model, step), words)
        if step == 0:
            client.models.log(model.id, split="train", trajectory_groups=groups)
            logged_ids = [t.id for t in client.models.trajectories(model.id, split="train")]
        handle = client.training_jobs.create(
            model_id=model.id, trajectory_groups=groups, experimental_config={"learning_rate": 1e-4}
        )
        handle.wait(progress=False)
        jobs.append(handle.refresh())
        trained.append(groups)
    client.models.log(model.id, split="val", trajectory_groups=crafted_val_groups(client, served(model, 2)))
    return Run(model, jobs, trained, logged_ids)


def everything(client: tk.Client, model_id: str, **filters: Any) -> list[StoredTrajectory]:
    return list(client.models.trajectories(model_id, limit=1000, **filters))


def independent_advantages(rewards: list[float]) -> list[float]:
    """ART's group advantage with scale_rewards (the default): (r - mean) / (population std + 1e-6)."""
    mean = sum(rewards) / len(rewards)
    std = math.sqrt(sum((r - mean) ** 2 for r in rewards) / len(rewards))
    return [0.0 if std == 0 else (r - mean) / (std + 1e-6) for r in rewards]


def test_every_trajectory_of_every_step_has_the_advantage_its_job_used(server: LocalServer, run: Run) -> None:
    client = server.client()
    train = everything(client, run.model.id, split="train")
    assert len(train) == sum(len(g["trajectories"]) for groups in run.trained for g in groups)
    for step, (job, groups) in enumerate(zip(run.jobs, run.trained, strict=True)):
        assert (job.status, job.base_step, job.result_step) == ("succeeded", step, step + 1)
        rows = [r for r in train if r.job_id == job.id]
        assert {r.step for r in rows} == {step} and {r.trained_step for r in rows} == {step + 1}
        by_group: dict[int, list[StoredTrajectory]] = {}
        for r in rows:
            by_group.setdefault(r.group_id, []).append(r)
        assert len(by_group) == len(groups)
        for stored, sent in zip(sorted(by_group.values(), key=lambda g: g[0].id), groups, strict=True):
            rewards = [t["reward"] for t in sent["trajectories"]]
            assert [r.index for r in stored] == list(range(len(rewards)))
            assert [r.reward for r in stored] == rewards
            advantages = [r.advantage for r in stored]
            assert advantages == pytest.approx(independent_advantages(rewards), abs=1e-9)
            assert advantages == pytest.approx(group_advantages(rewards, scale_rewards=True), abs=1e-12)
            assert any(a != 0 for a in advantages)  # the right answer makes each group vary


def test_logged_train_rows_are_linked_not_copied(server: LocalServer, run: Run) -> None:
    client = server.client()
    step0 = everything(client, run.model.id, split="train", step=0)
    assert sorted(r.id for r in step0) == sorted(run.logged_train_ids)
    assert all(r.job_id == run.jobs[0].id and r.advantage is not None for r in step0)
    (checkpoint0, *_) = client.models.checkpoints.list(run.model.id).data
    assert checkpoint0.metrics["train/num_trajectories"] == len(
        run.logged_train_ids
    )  # /log metrics unchanged


def test_stored_facts_of_each_trajectory(server: LocalServer, run: Run) -> None:
    client = server.client()
    rows = everything(client, run.model.id)
    for r in rows:
        choices = r.trajectory.choices()
        assert r.model_id == run.model.id
        assert r.truncated == any(c.finish_reason == "length" for c in choices)
        if choices and all(c.token_ids is not None and c.prompt_token_ids is not None for c in choices):
            assert r.completion_tokens == sum(len(c.token_ids or []) for c in choices)
            assert r.prompt_tokens == sum(len(c.prompt_token_ids or []) for c in choices)
        asked = r.trajectory.messages()[0]["content"]  # every prompt here is one user message
        assert r.prompt_key == prompt_key([{"role": "user", "content": asked}])
    (tool,) = [r for r in rows if r.trace_call_id == "0191-call" and r.step == 0]
    assert tool.completion_tokens is None  # its assistant turn is a plain message: no token ids
    errors = [r for r in rows if r.error is not None]
    assert {r.step for r in errors} == {0, 2}
    assert all("TimeoutError" in (r.error or "") and "rollout timed out" in (r.error or "") for r in errors)
    val = [r for r in rows if r.split == "val"]
    assert all(r.advantage is None and r.trained_step is None for r in val)  # logged only


def _ids(rows: list[StoredTrajectory]) -> list[int]:
    return [r.id for r in rows]


def test_filters_match_what_the_trajectories_hold(server: LocalServer, run: Run) -> None:
    client = server.client()
    rows = everything(client, run.model.id)
    mid = run.model.id
    assert _ids(everything(client, mid, step_min=1, step_max=2)) == _ids(
        [r for r in rows if 1 <= r.step <= 2]
    )
    assert _ids(everything(client, mid, step=1)) == _ids([r for r in rows if r.step == 1])
    assert _ids(everything(client, mid, split="val")) == _ids([r for r in rows if r.split == "val"])
    assert _ids(everything(client, mid, reward_min=0.25, reward_max=0.5)) == _ids(
        [r for r in rows if 0.25 <= r.reward <= 0.5]
    )
    groups: dict[int, list[float]] = {}
    for r in rows:
        groups.setdefault(r.group_id, []).append(r.reward)
    zero_std = [r for r in rows if len(set(groups[r.group_id])) == 1]
    assert zero_std and _ids(everything(client, mid, zero_std_only=True)) == _ids(zero_std)
    cut = [r for r in rows if any(c.finish_reason == "length" for c in r.trajectory.choices())]
    assert len(cut) >= 2 and _ids(everything(client, mid, truncated_only=True)) == _ids(cut)
    failed = [r for r in rows if r.trajectory.messages()[0]["content"] == "reverse bee"]  # its group raised
    assert len(failed) == 2 and _ids(everything(client, mid, errors_only=True)) == _ids(failed)
    striped = [
        r for r in rows if any("STRIPED" in (m.get("content") or "").upper() for m in r.trajectory.messages())
    ]
    assert len(striped) == 2 and _ids(everything(client, mid, search="Striped")) == _ids(striped)
    assert _ids(everything(client, mid, search='"zebra"')) == _ids(striped)  # tool-call arguments too
    assert everything(client, mid, search="100%_") == []  # LIKE wildcards are literal
    owl = prompt_key(reverse.prompt("owl"))
    same_prompt = everything(client, mid, prompt_key=owl)
    assert {r.step for r in same_prompt} >= {0, 1, 2}  # the prompt over time: val at 0 and 2, train at 1
    assert _ids(same_prompt) == _ids([r for r in rows if r.prompt_key == owl])
    both = everything(client, mid, split="val", zero_std_only=True, step_max=0)
    assert _ids(both) == _ids([r for r in zero_std if r.split == "val" and r.step == 0])


def test_cursor_pages_walk_every_trajectory_once_in_order(server: LocalServer, run: Run) -> None:
    client = server.client()
    rows = everything(client, run.model.id)
    assert [(-r.step, r.id) for r in rows] == sorted((-r.step, r.id) for r in rows)
    page = client.models.trajectories(run.model.id, limit=3)
    assert len(page.data) == 3 and page.has_more and page.last_id == str(page.data[-1].id)
    assert _ids(list(page)) == _ids(rows)
    pages = list(page.iter_pages())
    assert len(pages) == math.ceil(len(rows) / 3) + (len(rows) % 3 == 0)
    second = client.models.trajectories(run.model.id, limit=3, after=page.last_id)
    assert _ids(second.data) == _ids(rows[3:6])
    filtered = client.models.trajectories(run.model.id, limit=2, split="train", step_min=1)
    assert _ids(list(filtered)) == _ids([r for r in rows if r.split == "train" and r.step >= 1])
    with server.http() as http:  # the raw route: a JSON array; offset still works
        path = f"/v1/preview/models/{run.model.id}/trajectories"
        assert [r["id"] for r in http.get(path, params={"limit": 2, "offset": 4}).json()] == _ids(rows[4:6])
        after = http.get(path, params={"after": rows[1].id, "limit": 2}).json()
        assert [r["id"] for r in after] == _ids(rows[2:4])


async def test_async_pages_and_filters(server: LocalServer, run: Run) -> None:
    async with server.async_client() as client:
        first = await client.models.trajectories(run.model.id, limit=4, split="val")
        assert len(first.data) == 4 and all(isinstance(r, StoredTrajectory) for r in first.data)
        walked = [r.id async for r in client.models.trajectories(run.model.id, limit=4, split="val")]
    assert walked == _ids(everything(server.client(), run.model.id, split="val"))


BAD_FILTERS = [
    ({"step_min": 3, "step_max": 1}, ["query", "step_min"]),
    ({"reward_min": 1, "reward_max": 0}, ["query", "reward_min"]),
    ({"reward_min": "nan"}, ["query", "reward_min"]),
    ({"reward_max": "inf"}, ["query", "reward_max"]),
    ({"step_min": -1}, ["query", "step_min"]),
    ({"zero_std_only": "maybe"}, ["query", "zero_std_only"]),
    ({"truncated_only": "2"}, ["query", "truncated_only"]),
    ({"errors_only": "x"}, ["query", "errors_only"]),
    ({"search": ""}, ["query", "search"]),
    ({"prompt_key": "not-a-key"}, ["query", "prompt_key"]),
    ({"after": "abc"}, ["query", "after"]),
    ({"after": "99999999999"}, ["query", "after"]),
    ({"after": str(2**70)}, ["query", "after"]),
]


@pytest.mark.parametrize(("params", "loc"), BAD_FILTERS)
def test_bad_filters_are_422_and_change_nothing(
    server: LocalServer, run: Run, params: dict, loc: list
) -> None:
    client = server.client()
    before = [r.model_dump() for r in everything(client, run.model.id)]
    with server.http() as http:
        r = http.get(f"/v1/preview/models/{run.model.id}/trajectories", params=params)
    assert r.status_code == 422, r.text
    (detail,) = r.json()["detail"]
    assert detail["loc"] == loc and detail["msg"] and detail["type"]
    assert [r.model_dump() for r in everything(client, run.model.id)] == before


def test_a_trajectory_of_another_model_is_no_cursor(server: LocalServer, run: Run) -> None:
    client = server.client()
    other = new_model(client, "other")
    client.models.log(other.id, split="val", trajectory_groups=[{"trajectories": [{"reward": 1.0}]}])
    (row,) = everything(client, other.id)
    with server.http() as http:
        r = http.get(f"/v1/preview/models/{run.model.id}/trajectories", params={"after": row.id})
    assert r.status_code == 422 and r.json()["detail"][0]["loc"] == ["query", "after"]


def test_what_was_acknowledged_survives_kill_9(fresh_server: LocalServer) -> None:
    """A job's rows are committed with its checkpoint, a /log's before its answer: once the job reads
    succeeded (or /log answered), a server killed without shutdown still has them."""
    client = fresh_server.client()
    model = new_model(client, "ack")
    base = served(model, 0)
    answers = (("tac", 1.0), ("xy", 0.0))
    group = {"trajectories": [answer_trajectory(client, base, "cat", a, r) for a, r in answers]}
    job = client.training_jobs.create(model_id=model.id, trajectory_groups=[group])
    job.wait(progress=False)
    client.models.log(model.id, split="val", trajectory_groups=crafted_val_groups(client, served(model, 1)))
    before = [r.model_dump() for r in everything(client, model.id)]
    fresh_server.kill()
    fresh_server.start()
    after = everything(fresh_server.client(), model.id)
    assert [r.model_dump() for r in after] == before
    trained = [r for r in after if r.split == "train"]
    assert [(r.step, r.trained_step, r.job_id) for r in trained] == [(0, 1, job.id)] * 2
    assert [r.advantage for r in trained] == pytest.approx(independent_advantages([1.0, 0.0]))
    assert len(after) == 2 + 5
