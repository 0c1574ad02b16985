"""The client against a fake of the hosted W&B Training API (tests/support/hosted_fake.py, in front of the
real local server): the training loop works, every extension says plainly that it is absent."""

from __future__ import annotations

import asyncio
import json
import uuid
from collections.abc import Callable, Iterator
from typing import Any

import pytest

import toolkit as tk
from support.hosted_fake import HostedFake, serve_hosted_fake
from support.training_helpers import BASE, answer_trajectory, served
from toolkit.client import NotFoundError, UnsupportedOperation
from toolkit.types.training import LogResponse, TrainingJob

HOSTED = "the hosted W&B Training API has no"
QA = [{"role": "user", "content": "q"}, {"role": "assistant", "content": "a"}]
TRAIN = json.dumps({"messages": QA}).encode() + b"\n"
ARTIFACT = (
    "log train.jsonl as a W&B Artifact (wandb.Artifact) and pass its wandb-artifact:/// URL to "
    "sft_training_jobs.create(training_data_url=...)"
)


@pytest.fixture(scope="module")
def fake(server: Any) -> Iterator[tuple[str, HostedFake]]:
    with serve_hosted_fake(server.url) as served_fake:
        yield served_fake


@pytest.fixture
def hosted(fake: tuple[str, HostedFake], server: Any) -> Iterator[tk.Client]:
    """A client made as a user on the hosted services makes it: the ``wandb`` preset (URLs: the fake)."""
    url = fake[0]
    with tk.connect(
        url, server.key, preset="wandb", inference_url=f"{url}/v1", trace_url=f"{url}/traces"
    ) as c:
        yield c


def test_every_extension_says_it_is_absent_without_being_sent(
    hosted: tk.Client, fake: tuple[str, HostedFake]
) -> None:
    assert (hosted.deployment.name, hosted.deployment.extensions) == ("wandb", False)
    model_id = str(uuid.uuid4())
    calls: dict[str, Callable[[], Any]] = {
        "model listing": hosted.models.list,
        "model retrieval": lambda: hosted.models.retrieve(model_id),
        "logged-trajectory queries": lambda: hosted.models.trajectories(model_id),
        "artifact upload": lambda: hosted.artifacts.upload(project="p", files={"train.jsonl": TRAIN}),
        "artifact listing": hosted.artifacts.list,
        "job listing": hosted.training_jobs.list,
        "job cancel": lambda: hosted.training_jobs.cancel(model_id),
        "chat usage report": hosted.chat.usage,
        "SFT from in-memory data (it uploads train.jsonl as an artifact)": lambda: (
            hosted.sft_training_jobs.create_from_data(model_id=model_id, data=[QA])
        ),
        "checkpoint download": lambda: hosted.models.checkpoints.download(model_id, 1, "never-written"),
        "choice of LoRA settings or full fine-tuning at model creation": lambda: hosted.models.create(
            project="p", name="n", base_model=BASE, lora_config={"rank": 16}
        ),
    }
    before = len(fake[1].requests)
    messages = {}
    for what, call in calls.items():
        with pytest.raises(UnsupportedOperation) as err:
            call()
        messages[what] = str(err.value)
        assert messages[what].startswith(f"{HOSTED} {what} (a local-server extension)")
    assert fake[1].requests[before:] == []
    keep = "keep the Model that models.create returns (with return_existing=True, an existing one)"
    assert messages["model listing"] == f"{HOSTED} model listing (a local-server extension); {keep}"
    assert messages["artifact upload"] == f"{HOSTED} artifact upload (a local-server extension); {ARTIFACT}"
    assert (
        messages["job cancel"] == f"{HOSTED} job cancel (a local-server extension); the job runs to its end"
    )
    assert messages["chat usage report"] == f"{HOSTED} chat usage report (a local-server extension)"
    assert messages["checkpoint download"] == (
        f"{HOSTED} checkpoint download (a local-server extension); download the checkpoint's W&B artifact"
        " of type 'lora': wandb.Api().artifact('<entity>/<project>/<name>:step<N>', type='lora')"
        ".download(root=path)"
    )


def test_the_training_loop_works_on_the_hosted_surface(
    hosted: tk.Client, fake: tuple[str, HostedFake]
) -> None:
    assert hosted.health().status == "ok"
    model = hosted.models.create(project="hosted", name=f"h-{uuid.uuid4().hex[:8]}", base_model=BASE)
    assert hosted.models.create(project="hosted", name=model.name, base_model=BASE) == model

    logged = hosted.models.log(
        model.id, split="val", trajectory_groups=[{"trajectories": [{"reward": 0.25}]}]
    )
    assert logged == LogResponse()  # the hosted body is empty ...
    (step0,) = hosted.models.checkpoints.list(model.id)
    assert step0.metrics["val/reward"] == 0.25  # ... yet the groups were logged

    base = served(model, 0)
    group = {
        "trajectories": [
            answer_trajectory(hosted, base, "ab", "ba", 1.0),
            answer_trajectory(hosted, base, "ab", "aa", 0.0),
        ]
    }
    job = hosted.training_jobs.create(model_id=model.id, trajectory_groups=[group])
    assert job.refresh() == TrainingJob(id=job.id)  # the hosted record is only the id
    with pytest.raises(UnsupportedOperation, match="has no job cancel"):
        job.cancel()
    checkpoint = job.wait(progress=False)
    assert checkpoint.step == 1
    assert [c.step for c in hosted.models.checkpoints.list(model.id, order="desc")] == [1, 0]
    types = [e.type for e in hosted.training_jobs.events.list(job.id, limit=100)]
    assert (types[0], types[-1]) == ("training_started", "training_ended")

    reply = hosted.chat.completions.create(
        model=served(model, 1), messages=[{"role": "user", "content": "hi"}]
    )
    assert reply.model == served(model, 1) and reply.choices[0].message.role == "assistant"
    assert ("GET", "/v1/preview/models") not in fake[1].requests


def test_a_custom_url_finds_out_which_extensions_are_absent(
    fake: tuple[str, HostedFake], server: Any
) -> None:
    url, app = fake
    with tk.Client(url, server.key) as client:
        assert (client.deployment.name, client.deployment.extensions) == ("custom", True)
        with pytest.raises(NotFoundError, match="not found"):  # a missing model, not a missing route
            client.models.checkpoints.list(str(uuid.uuid4()))
        assert client.deployment.extensions is True
        with pytest.raises(UnsupportedOperation) as err:
            client.models.list()
        assert str(err.value).startswith(f"the deployment at {url} has no model listing")
        assert client.deployment.extensions is False
        before = len(app.requests)
        with pytest.raises(UnsupportedOperation, match="has no job cancel"):
            client.training_jobs.cancel(str(uuid.uuid4()))
        assert app.requests[before:] == []


def test_the_async_client_behaves_the_same(fake: tuple[str, HostedFake], server: Any) -> None:
    url, app = fake

    async def go() -> tuple[str, bool]:
        async with tk.AsyncClient(url, server.key) as client:
            with pytest.raises(UnsupportedOperation, match="has no job listing"):
                await client.training_jobs.list()
            with pytest.raises(UnsupportedOperation, match="has no logged-trajectory queries"):
                await client.models.trajectories(str(uuid.uuid4()))
            return str(await client.system_check()), client.deployment.extensions

    check, extensions = asyncio.run(go())
    assert extensions is False and "api=True" in check
    assert ("GET", "/v1/preview/training-jobs") in app.requests
    assert not any(path.endswith("/trajectories") for _, path in app.requests)
