"""Training again on groups sampled from an older checkpoint (a re-run training cell) warns in one
line: the client at ``create`` (sync and async), and the server in a ``stale_groups`` warning event,
which ``wait()`` does not repeat when ``create`` already said it."""

from __future__ import annotations

import warnings
from typing import Any

import pytest

import toolkit as tk
from conftest import LocalServer
from support.training_helpers import job_events, new_model, rewarded_group, served


def sampled_at(group: dict[str, Any], step: int) -> dict[str, Any]:
    """The group as the toolkit's agents record it: each trajectory carries the step that sampled it."""
    versions = {"initial_policy_version": step, "final_policy_version": step}
    return {"trajectories": [{**t, **versions} for t in group["trajectories"]]}


def told(caught: list[warnings.WarningMessage]) -> list[str]:
    return [str(w.message) for w in caught if w.category is tk.TrainingJobWarning]


async def test_training_twice_on_the_same_groups_warns_once(server: LocalServer) -> None:
    client = server.client()
    model = new_model(client, "stale")
    groups = [sampled_at(rewarded_group(client, served(model, 0)), 0)]
    config = {"learning_rate": 1e-4}
    with warnings.catch_warnings(record=True) as fresh:
        warnings.simplefilter("always")
        first = client.training_jobs.create(
            model_id=model.id, trajectory_groups=groups, experimental_config=config
        )
        assert first.wait(progress=False).trained is True
    assert told(fresh) == []
    assert "warning" not in [e.type for e in job_events(client, first.id)]

    message = (
        "1 of 1 trajectory group(s) were sampled from step 0, older than the model's latest checkpoint"
        " (step 1): training on them again trains the model twice on the same groups (a re-run training"
        " cell?); gather new groups from the latest step."
    )
    with warnings.catch_warnings(record=True) as at_create:
        warnings.simplefilter("always")
        again = client.training_jobs.create(
            model_id=model.id, trajectory_groups=groups, experimental_config=config
        )
    assert told(at_create) == [f"training job {again.id}: {message}"]
    with warnings.catch_warnings(record=True) as at_wait:
        warnings.simplefilter("always")
        assert again.wait(progress=False).step == 2
    assert told(at_wait) == []  # said once, at create
    warned = [e.data for e in job_events(client, again.id) if e.type == "warning"]
    assert warned == [{"code": "stale_groups", "message": message}]  # the server's, for every client

    async with server.async_client() as aclient:
        with pytest.warns(tk.TrainingJobWarning, match=r"sampled from step 0, .* \(step 2\)"):
            job = await aclient.training_jobs.create(model_id=model.id, trajectory_groups=groups)
        await job.wait(progress=False)
