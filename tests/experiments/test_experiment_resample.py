"""``tk.replay(..., resample=True)``: the seeded chat completions of an experiment are recorded, sent
again to the replayed checkpoints they came from, and give the same tokens; a record whose sampled
tokens were altered diverges at the step they came from."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

import toolkit as tk
from conftest import LocalServer
from support.training_helpers import BASE, new_model, served
from toolkit.tasks import reverse

WORDS = ("cat", "dog", "sun", "map")


def seeded_group(client: tk.Client, model: str, word: str, seed: int) -> dict[str, Any]:
    """Four seeded samples of ``reverse <word>`` from ``model``, rewarded 0 to 3 by their place in
    the group (the mechanics under test need a job that trains, not a good reward)."""
    trajectories = []
    for member in range(4):
        completion = client.chat.completions.create(
            model=model,
            messages=reverse.prompt(word),
            temperature=1.0,
            max_tokens=reverse.MAX_TOKENS,
            logprobs=True,
            return_token_ids=True,
            seed=seed * 100 + member,
        )
        choice = completion.trainable_choice(0)
        trajectories.append(
            {
                "messages_and_choices": [*reverse.prompt(word), choice.model_dump(mode="json")],
                "reward": float(member),
            }
        )
    return {"trajectories": trajectories}


@pytest.fixture(scope="module")
def exported(server: LocalServer, tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    path = tmp_path_factory.mktemp("resample") / "run.json"
    with server.client() as client, tk.experiment("resample", seed=4) as exp:
        model = new_model(client, "resample")
        sft = client.sft_training_jobs.create_from_data(
            model_id=model.id,
            data=[reverse.conversation(w) for w in WORDS * 2],
            config={"batch_size": 4, "learning_rate": 1e-3},
        )
        sft.wait(progress=False)
        groups = [seeded_group(client, served(model, 1), w, seed) for seed, w in enumerate(WORDS)]
        rl = client.training_jobs.create(
            model_id=model.id, trajectory_groups=groups, experimental_config={"learning_rate": 1e-3}
        )
        rl.wait(progress=False)
        client.chat.completions.create(model=served(model, 2), messages=reverse.prompt("cat"), max_tokens=3)
        exp.export(path)
    return {"path": path, "jobs": [sft.id, rl.id]}


def test_seeded_samples_are_recorded_and_sampled_again_alike(
    server: LocalServer, exported: dict[str, Any]
) -> None:
    record = tk.load_experiment(exported["path"])
    assert len(record.samples) == 16 and record.unseeded_requests == 1
    assert {s.request["seed"] for s in record.samples} == {g * 100 + m for g in range(4) for m in range(4)}
    with server.client() as client:
        report = tk.replay(record, client, resample=True)
    assert report.ok, report
    assert record.models[0].records[2].metrics["data/step_num_gradient_steps"] > 0
    sft, rl = exported["jobs"]
    assert [(r.step, r.job_id, r.kind) for r in report.rows] == [
        (1, sft, "sft"),
        (1, sft, "samples"),
        (2, rl, "rl"),
    ]
    assert report.rows[1].recorded_digest == report.rows[1].replayed_digest
    assert any("1 chat completions had no seed" in n for n in report.notes)


def test_altered_samples_diverge_at_the_step_they_came_from(
    server: LocalServer, exported: dict[str, Any], tmp_path: Path
) -> None:
    record = tk.load_experiment(exported["path"])
    choice = record.samples[5].choices[0]
    choice["token_ids"] = [*choice["token_ids"][:-1], choice["token_ids"][-1] + 1]
    with server.client() as client:
        report = tk.replay(record, client, resample=True)
    first = report.first_divergence
    assert first is not None and (first.step, first.job_id) == (1, exported["jobs"][0])
    assert first.what.startswith("sample 6 of 16 sampled other tokens (token_ids: recorded ")
    assert [r.match for r in report.rows] == [True, False, True]  # the jobs train on the recorded groups


def test_a_sample_of_a_checkpoint_outside_the_experiment_is_not_re_derivable(server: LocalServer) -> None:
    """A seeded sample from a model trained before the experiment is never sent again under its name
    (that would sample the original weights twice and call it a match); one from a base model is."""
    with server.client() as client:
        earlier = new_model(client, "earlier")
        data = [reverse.conversation(w) for w in WORDS]
        client.sft_training_jobs.create_from_data(
            model_id=earlier.id, data=data, config={"batch_size": 4}
        ).wait(progress=False)
        with tk.experiment("outside", seed=5) as exp:
            for model in (served(earlier, 1), BASE):
                client.chat.completions.create(
                    model=model, messages=reverse.prompt("cat"), max_tokens=4, return_token_ids=True, seed=1
                )
        report = tk.replay(exp.record(), client, resample=True)
    assert [(r.job_id, r.kind, r.match) for r in report.rows] == [("base model", "samples", True)]
    assert (
        f"1 samples came from {served(earlier, 1)}, neither a model of the experiment nor a base model:"
        " not re-derivable, not sent again"
    ) in report.notes
