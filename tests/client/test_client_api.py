"""``Client`` and ``AsyncClient`` against a real server: one test body runs both (the async client's
coroutines are run on a loop of the test's own), plus ``for`` / ``async for`` over cursor pages."""

from __future__ import annotations

import asyncio
import inspect
import uuid
from collections.abc import Iterator
from typing import Any

import pydantic
import pytest

import toolkit as tk
from toolkit.client import (
    AuthenticationError,
    ConflictError,
    CursorPage,
    NotFoundError,
    UnprocessableEntityError,
)
from toolkit.server.store.db import Database
from toolkit.server.store.migrations import MIGRATIONS
from toolkit.server.store.models import Models
from toolkit.types import (
    Artifact,
    Checkpoint,
    DeleteCheckpointsResponse,
    DeleteModelResponse,
    Health,
    LogResponse,
    Model,
    SystemCheck,
    Trajectory,
    TrajectoryGroup,
)

BUILTIN_NAME = "toolkit/tiny-chat-1m"
TRAIN = b'{"messages": [{"role": "user", "content": "q"}, {"role": "assistant", "content": "a"}]}\n'


class Blocking:
    """The async client seen through a sync lens: awaitables are run to completion on ``loop``.

    An ``AsyncPaginator`` is awaited to its first page; iterating a page walks every page.
    """

    def __init__(self, target: Any, loop: asyncio.AbstractEventLoop) -> None:
        self._target = target
        self._loop = loop

    def _wrap(self, value: Any) -> Any:
        if type(value).__module__.startswith("toolkit.client"):
            return Blocking(value, self._loop)
        return value

    def __getattr__(self, name: str) -> Any:
        value = getattr(self._target, name)
        if not callable(value):
            return self._wrap(value)

        def call(*args: Any, **kwargs: Any) -> Any:
            result = value(*args, **kwargs)
            if inspect.isawaitable(result):
                result = self._loop.run_until_complete(result)
            return self._wrap(result)

        return call

    def __iter__(self) -> Iterator[Any]:
        async def collect() -> list[Any]:
            return [item async for item in self._target]

        return iter(self._loop.run_until_complete(collect()))


@pytest.fixture(params=["sync", "async"])
def api(request: pytest.FixtureRequest, server: Any) -> Iterator[Any]:
    """A ``Client``, or an ``AsyncClient`` behind :class:`Blocking`."""
    if request.param == "sync":
        with server.client() as client:
            yield client
        return
    loop = asyncio.new_event_loop()
    client = server.async_client()
    try:
        yield Blocking(client, loop)
    finally:
        loop.run_until_complete(client.close())
        loop.close()


@pytest.fixture(scope="module")
def store(server: Any) -> Iterator[Models]:
    db = Database(server.data_dir / "toolkit.db", MIGRATIONS)
    yield Models(db)
    db.close()


@pytest.fixture(scope="module")
def thirty(server: Any, store: Models) -> str:
    """A model with checkpoints at steps 0..29."""
    with server.client() as client:
        model = client.models.create(
            project="client", name=f"m-{uuid.uuid4().hex[:8]}", base_model=BUILTIN_NAME
        )
    with store.db.write():
        for step in range(1, 30):
            store.add_checkpoint(model.id, step, None, {"val/reward": step / 10})
    return model.id


def name() -> str:
    return f"m-{uuid.uuid4().hex[:10]}"


# ----------------------------------------------------------------------------- one body, both clients


def test_service_calls(api: Any) -> None:
    health = api.health()
    assert isinstance(health, Health)
    assert (health.status, health.version) == ("ok", tk.__version__)
    check = api.system_check()
    assert isinstance(check, SystemCheck)
    assert (check.api, check.database.success, check.cpu_queue.success, check.gpu_queue.success) == (
        True,
        True,
        True,
        True,
    )


def test_model_lifecycle(api: Any) -> None:
    n = name()
    model = api.models.create(project="client", name=n, base_model=BUILTIN_NAME)
    assert isinstance(model, Model)
    assert (model.entity, model.project, model.name, model.base_model, model.latest_step) == (
        "local",
        "client",
        n,
        BUILTIN_NAME,
        0,
    )
    assert api.models.create(project="client", name=n, base_model=BUILTIN_NAME) == model  # idempotent
    with pytest.raises(ConflictError) as conflict:
        api.models.create(project="client", name=n, base_model=BUILTIN_NAME, return_existing=False)
    assert conflict.value.status_code == 409
    assert conflict.value.detail == []
    assert str(conflict.value) == f"Error code: 409 - Model local/client/{n} already exists"
    assert api.models.retrieve(model.id) == model
    assert model in api.models.list()

    deleted = api.models.delete(model.id)
    assert isinstance(deleted, DeleteModelResponse)
    assert deleted == DeleteModelResponse(
        model_id=model.id,
        deleted_checkpoints=1,
        deleted_run=True,
        deleted_artifacts=0,
        deleted_trajectories=0,
    )
    with pytest.raises(NotFoundError) as missing:
        api.models.retrieve(model.id)
    assert (missing.value.status_code, missing.value.detail) == (404, [])
    assert missing.value.body == {"detail": f"Model {model.id} not found"}


def test_log_with_typed_and_plain_groups(api: Any) -> None:
    model = api.models.create(project="client", name=name(), base_model=BUILTIN_NAME)
    typed = TrajectoryGroup(
        trajectories=[
            Trajectory(
                messages_and_choices=[
                    {"role": "user", "content": "hi"},
                    {"message": {"role": "assistant", "content": "hello"}, "token_ids": [1, 2]},
                ],
                reward=1.0,
                metrics={"len": 2},
            ),
            Trajectory(reward=0.0, metrics={"len": 4}),
        ]
    )
    plain = {"trajectories": [{"reward": 0.5}], "exceptions": [{"type": "ValueError", "message": "boom"}]}
    result = api.models.log(model.id, split="val", trajectory_groups=[typed, plain])
    assert isinstance(result, LogResponse)
    assert (result.model_id, result.split, result.step, result.num_groups, result.num_trajectories) == (
        model.id,
        "val",
        0,
        2,
        3,
    )
    assert result.metrics == pytest.approx(
        {
            "val/num_groups": 2.0,
            "val/num_trajectories": 3.0,
            "val/num_exceptions": 1.0,
            "val/exception_rate": 0.25,
            "val/reward": 0.5,
            "val/reward_std_dev": 0.5,
            "val/len": 3.0,
        }
    )
    rows = api.models.trajectories(model.id, split="val").data
    assert [r.reward for r in rows] == [1.0, 0.0, 0.5]
    assert rows[0].trajectory.choices()[0].token_ids == [1, 2]
    assert api.models.trajectories(model.id, split="val", limit=1, offset=2).data[0].reward == 0.5
    (checkpoint,) = api.models.checkpoints.list(model.id).data
    assert checkpoint.metrics == result.metrics

    with pytest.raises(pydantic.ValidationError):  # checked before it is sent
        api.models.log(model.id, split="val", trajectory_groups=[{"trajectories": [{"reward": "x"}]}])
    with pytest.raises(UnprocessableEntityError) as bad:
        api.models.log(model.id, split="a/b", trajectory_groups=[])
    assert [(d.loc, d.type) for d in bad.value.detail] == [(["body", "split"], "string_pattern_mismatch")]


def test_checkpoint_pages(api: Any, thirty: str) -> None:
    page = api.models.checkpoints.list(thirty, limit=7)
    assert [c.step for c in page.data] == list(range(7))
    assert all(isinstance(c, Checkpoint) for c in page.data)
    assert (page.has_more, page.first_id, page.last_id) == (True, page.data[0].id, page.data[-1].id)
    second = page.next_page()
    assert [c.step for c in second.data] == list(range(7, 14))
    walked = list(api.models.checkpoints.list(thirty, limit=7, order="desc"))
    assert [c.step for c in walked] == list(range(29, -1, -1))
    assert walked[0].metrics == {"val/reward": 2.9}
    assert len({c.id for c in walked}) == 30
    tail = api.models.checkpoints.list(thirty, after=page.data[-1].id, limit=100)
    assert ([c.step for c in tail.data], tail.has_more) == (list(range(7, 30)), False)
    assert tail.next_page() is None
    latest = api.models.checkpoints.list(thirty, limit=1, order="desc")
    assert [c.step for c in latest.data] == [29]


def test_checkpoint_delete_and_errors(api: Any, store: Models) -> None:
    model = api.models.create(project="client", name=name(), base_model=BUILTIN_NAME)
    for step in (1, 2, 3):
        store.add_checkpoint(model.id, step, None, {})
    result = api.models.checkpoints.delete(model.id, [1, 2, 8])
    assert result == DeleteCheckpointsResponse(deleted_count=2, not_found_steps=[8])
    assert [c.step for c in api.models.checkpoints.list(model.id)] == [0, 3]
    kept = api.models.checkpoints.delete(model.id, [3])  # the current step stays
    assert kept == DeleteCheckpointsResponse(deleted_count=0, not_found_steps=[], kept_steps=[3])
    for limit in (0, 101):
        with pytest.raises(UnprocessableEntityError) as bad:
            api.models.checkpoints.list(model.id, limit=limit)
        assert bad.value.status_code == 422
        assert [d.loc for d in bad.value.detail] == [["query", "limit"]]
    with pytest.raises(NotFoundError):
        api.models.checkpoints.list(str(uuid.uuid4()))
    with pytest.raises(NotFoundError):
        api.models.checkpoints.delete(str(uuid.uuid4()), [1])


def test_job_listing_is_one_cursor_page(api: Any) -> None:
    model = api.models.create(project="client", name=name(), base_model=BUILTIN_NAME)
    assert list(api.training_jobs.list(model_id=model.id)) == []
    group = {"trajectories": [{"reward": 1.0}, {"reward": 0.0}]}
    job = api.training_jobs.create(model_id=model.id, trajectory_groups=[group])
    page = api.training_jobs.list(model_id=model.id)
    assert ([j.id for j in page.data], [j.model_id for j in page.data], page.has_more) == (
        [job.id],
        [model.id],
        False,
    )
    assert [j.id for j in page] == [job.id]


def test_artifact_upload(api: Any) -> None:
    art = api.artifacts.upload(project="client", files={"train.jsonl": TRAIN}, name="client-data")
    assert isinstance(art, Artifact)
    assert (art.entity, art.project, art.files, art.num_records) == ("local", "client", ["train.jsonl"], 1)
    assert art.url == f"wandb-artifact:///local/client/client-data:v{art.version}"
    assert art in api.artifacts.list()
    with pytest.raises(UnprocessableEntityError) as bad:
        api.artifacts.upload(project="client", files={"train.jsonl": TRAIN + b"{oops\n"})
    assert [(d.loc, d.msg) for d in bad.value.detail] == [
        (["body", "train.jsonl", 2], "invalid JSON (Expecting property name enclosed in double quotes)")
    ]


def test_wrong_key_raises_authentication_error(server: Any, api: Any) -> None:
    if isinstance(api, Blocking):
        loop = asyncio.new_event_loop()
        client = server.async_client("tk-wrong")
        try:
            with pytest.raises(AuthenticationError) as err:
                loop.run_until_complete(client.health())
        finally:
            loop.run_until_complete(client.close())
            loop.close()
    else:
        with server.client("tk-wrong") as client, pytest.raises(AuthenticationError) as err:
            client.health()
    assert (err.value.status_code, err.value.body, err.value.detail) == (
        401,
        {"detail": "Invalid API key"},
        [],
    )


# --------------------------------------------------------------------- iteration, each client its own way


def test_sync_for_walks_every_page(server: Any, thirty: str) -> None:
    with server.client() as client:
        page = client.models.checkpoints.list(thirty, limit=7)
        assert isinstance(page, CursorPage)
        assert [c.step for c in page] == list(range(30))
        assert [len(p.data) for p in page.iter_pages()] == [7, 7, 7, 7, 2]
        desc = [c.step for c in client.models.checkpoints.list(thirty, limit=100, order="desc")]
        assert desc == list(range(29, -1, -1))


async def test_async_for_walks_every_page(server: Any, thirty: str) -> None:
    async with server.async_client() as client:
        steps = [c.step async for c in client.models.checkpoints.list(thirty, limit=7)]
        assert steps == list(range(30))
        page = await client.models.checkpoints.list(thirty, limit=7, order="desc")
        assert [c.step for c in page.data] == list(range(29, 22, -1))
        sizes = [len(p.data) async for p in page.iter_pages()]
        assert sizes == [7, 7, 7, 7, 2]
        assert [c.step async for c in page] == list(range(29, -1, -1))
        results = await asyncio.gather(*(client.models.retrieve(thirty) for _ in range(5)))
        assert {m.latest_step for m in results} == {29}
