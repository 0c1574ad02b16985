"""RL jobs that train nothing, over loopback HTTP: every rollout failed, no Choice where the rewards
differ, or failed and flat groups together. Each still ends with a new step (as ART's backend), and
says why in a ``warning`` event, ``training_ended {trained: false}``, the checkpoint's ``trained``
and one ``TrainingJobWarning`` from ``wait()`` (sync and async); the new step has no files of its own
beyond its parent's. (Every group's rewards equal: test_training_jobs.py.)"""

from __future__ import annotations

from typing import Any

import pytest

import toolkit as tk
from conftest import LocalServer
from support.training_helpers import job_events, new_model
from toolkit.tasks import reverse

FAILED = {
    "trajectories": [],
    "exceptions": [{"type": "<class 'ValueError'>", "message": "no such tool: get", "traceback": ""}] * 2,
}


def plain(reward: float) -> dict[str, Any]:
    """A trajectory of plain messages: the answer is context, not a Choice the model sampled."""
    messages = [{"role": "user", "content": "reverse cat"}, {"role": "assistant", "content": "tac"}]
    return {"messages_and_choices": messages, "reward": reward}


CASES = [
    (
        [FAILED, FAILED],
        "every rollout failed (train/exception_rate 1.0; 4 exceptions, first ValueError: no such tool: get)",
    ),
    (
        [{"trajectories": [plain(1.0), plain(0.0)]}],
        "no trajectory of the 1 group whose rewards differ has a Choice (model output) to train on",
    ),
    (
        [FAILED, {"trajectories": [plain(1.0), plain(1.0)]}],
        "no group's rewards differ (1 with equal rewards, 1 with only failed rollouts: 2 exceptions,"
        " first ValueError: no such tool: get), so every advantage is 0",
    ),
]


@pytest.mark.parametrize(("groups", "reason"), CASES)
def test_a_job_that_trains_nothing_says_why(
    server: LocalServer, groups: list[dict[str, Any]], reason: str
) -> None:
    client = server.client()
    model = new_model(client, "untrained")
    job = client.training_jobs.create(model_id=model.id, trajectory_groups=groups)
    with pytest.warns(tk.TrainingJobWarning) as told:
        checkpoint = job.wait(progress=False)
    message = (
        f"Nothing trained: {reason}. Step 1 is step 0's model unchanged (its checkpoint says trained: false)."
    )
    assert [str(w.message) for w in told if w.category is tk.TrainingJobWarning] == [
        f"training job {job.id}: {message}"
    ]
    events = job_events(client, job.id)
    assert [(e.type, e.data) for e in events[1:]] == [
        ("warning", {"code": "nothing_trained", "message": message}),
        ("training_ended", {"step": 1, "checkpoint_id": checkpoint.id, "trained": False}),
    ]
    assert (checkpoint.step, checkpoint.trained) == (1, False)
    assert checkpoint.metrics["data/step_num_gradient_steps"] == 0
    with server.http() as http:  # the base model unchanged: no files of its own, as step 0
        files = http.get(f"/v1/preview/models/{model.id}/checkpoints/1/files")
    assert files.status_code == 404


async def test_an_untrained_step_shares_its_parents_files_and_async_wait_warns(server: LocalServer) -> None:
    client = server.client()
    model = new_model(client, "untrained-after")
    sft = client.sft_training_jobs.create_from_data(model_id=model.id, data=[reverse.conversation("cat")])
    assert sft.wait(progress=False).trained is True
    async with server.async_client() as aclient:
        job = await aclient.training_jobs.create(model_id=model.id, trajectory_groups=[FAILED])
        with pytest.warns(tk.TrainingJobWarning, match=r"Nothing trained: every rollout failed"):
            checkpoint = await job.wait(progress=False)
    assert (checkpoint.step, checkpoint.trained) == (2, False)
    with server.http() as http:
        step1, step2 = (http.get(f"/v1/preview/models/{model.id}/checkpoints/{s}/files") for s in (1, 2))
    assert step1.status_code == step2.status_code == 200
    assert step2.json()["files"] == step1.json()["files"]  # the same names, sizes and digests
