"""A create that would start a job of one model with the same request as a job still queued or
running (a cell run again after interrupting ``wait()``) is refused: one line in IPython naming that
job, how to follow it and how to cancel it, and nothing created. ``allow_duplicate=True`` starts a
second one; another request, or the same one after the first ended, is no twin. Over loopback HTTP
against the real server, whose worker a long job of another model keeps busy."""

from __future__ import annotations

import asyncio
import re
from collections.abc import Iterator
from typing import Any

import httpx
import pytest
from IPython.core.interactiveshell import InteractiveShell
from IPython.utils.capture import capture_output

import toolkit as tk
from conftest import LocalServer
from support.training_helpers import (
    long_sft_job,
    new_model,
    rewarded_group,
    served,
    wait_for_event,
    wait_job,
)
from toolkit.types.training import Model

CREATE = (
    "job = client.training_jobs.create(model_id=model.id, trajectory_groups=[group],"
    " experimental_config={'learning_rate': 1e-4})"
)


def refusal(job_id: str, status: str) -> str:
    return (
        f"training job {job_id} ({status}) has this same model and request; another would train the"
        f" model on it again. Follow it with client.training_jobs.handle('{job_id}').wait(), cancel it"
        f" with client.training_jobs.cancel('{job_id}'), or pass allow_duplicate=True to start a"
        " second one."
    )


@pytest.fixture(scope="module")
def busy(server: LocalServer) -> Iterator[tuple[tk.Client, Model, str]]:
    """A client, a model and the id of a long SFT job of that model, running: the jobs created while
    it runs stay queued. Cancelled (and ended) after the module."""
    client = server.client()
    model = new_model(client, "twins-busy")
    running = long_sft_job(client, model.id, seed=17)
    wait_for_event(client, running.id, "gradient_step")
    yield client, model, running.id
    client.training_jobs.cancel(running.id)
    assert wait_job(client, running.id).status == "cancelled"


def model_jobs(client: tk.Client, model: Model) -> list[tuple[str, str | None]]:
    return [(j.id, j.status) for j in client.training_jobs.list(model_id=model.id)]


def test_a_cell_run_again_is_refused_in_one_line_and_creates_nothing(
    busy: tuple[tk.Client, Model, str],
) -> None:
    client, _, _ = busy
    model = new_model(client, "twins-rl")
    group = rewarded_group(client, served(model, 0))
    shell = InteractiveShell.instance()
    shell.user_ns.update(client=client, model=model, group=group)
    with capture_output() as first_run:
        shell.run_cell(CREATE)
    first = shell.user_ns["job"]
    assert first_run.stdout == "" and model_jobs(client, model) == [(first.id, "queued")]
    with capture_output() as again:  # the cell, run again while its job waits
        shell.run_cell(CREATE)
    assert again.stdout.strip() == f"DuplicateTrainingJob: {refusal(first.id, 'queued')}"
    assert shell.user_ns["job"] is first and model_jobs(client, model) == [(first.id, "queued")]

    with pytest.raises(tk.DuplicateTrainingJob) as refused:
        client.training_jobs.create(
            model_id=model.id, trajectory_groups=[group], experimental_config={"learning_rate": 1e-4}
        )
    assert refused.value.job_id == first.id and refused.value.status_code == 409
    other = client.training_jobs.create(  # another request: no twin
        model_id=model.id, trajectory_groups=[group], experimental_config={"learning_rate": 2e-4}
    )
    second = client.training_jobs.create(
        model_id=model.id,
        trajectory_groups=[group],
        experimental_config={"learning_rate": 1e-4},
        allow_duplicate=True,
    )
    assert model_jobs(client, model) == [(first.id, "queued"), (other.id, "queued"), (second.id, "queued")]
    for job in (first, other, second):
        job.cancel()
    again_after_end = client.training_jobs.create(  # its twins ended: the same request runs again
        model_id=model.id, trajectory_groups=[group], experimental_config={"learning_rate": 1e-4}
    )
    assert model_jobs(client, model)[-1] == (again_after_end.id, "queued")
    again_after_end.cancel()


def test_the_same_data_uploaded_again_is_a_twin_of_a_running_sft_job(
    busy: tuple[tk.Client, Model, str],
) -> None:
    client, model, running = busy
    before = model_jobs(client, model)
    with pytest.raises(tk.DuplicateTrainingJob, match=f"^{re.escape(refusal(running, 'running'))}$"):
        long_sft_job(client, model.id, seed=17)  # its data uploaded again: another URL, the same bytes
    assert model_jobs(client, model) == before
    queued = long_sft_job(client, model.id, seed=18)  # other data
    assert model_jobs(client, model) == [*before, (queued.id, "queued")]
    queued.cancel()


def test_the_refusal_is_a_409_naming_the_job_and_the_async_client_raises_it_too(
    server: LocalServer, busy: tuple[tk.Client, Model, str]
) -> None:
    client, _, _ = busy
    model = new_model(client, "twins-http")
    body: dict[str, Any] = {
        "model_id": model.id,
        "trajectory_groups": [rewarded_group(client, served(model, 0))],
    }
    url = f"{server.url}/v1/preview/training-jobs"
    headers = {"Authorization": f"Bearer {server.key}"}
    first = httpx.post(url, json=body, headers=headers, timeout=30)
    assert first.status_code == 200
    job_id = first.json()["id"]
    twin = httpx.post(url, json=body, headers=headers, timeout=30)
    assert twin.status_code == 409
    assert twin.json() == {  # FastAPI's shape, as every error of the training API
        "detail": f"training job {job_id} (queued) of model {model.id} has this same request: another"
        " would train the model on it again. Follow or cancel that job, or pass allow_duplicate=true to"
        " start a second one"
    }

    async def create_again() -> None:
        async with server.async_client() as aclient:
            with pytest.raises(tk.DuplicateTrainingJob, match=job_id):
                await aclient.training_jobs.create(**body)
            second = await aclient.training_jobs.create(**body, allow_duplicate=True)
            await second.cancel()

    asyncio.run(create_again())
    assert [status for _, status in model_jobs(client, model)] == ["queued", "cancelled"]
    client.training_jobs.cancel(job_id)
    assert [status for _, status in model_jobs(client, model)] == ["cancelled", "cancelled"]
