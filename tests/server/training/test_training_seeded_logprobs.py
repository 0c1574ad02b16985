"""A seeded RL job recomputes its old logprobs unless told otherwise, over HTTP: the sampler's logprobs
of the same seeded tokens differ in their last bits with the batch each request shared, and a seeded
job must give the same checkpoint whatever they were. The same groups with every logprob moved by
1e-6 (the size docs/training.md measured) train byte-identical checkpoints with a seed and nothing
else, and other checkpoints with ``precalculate_logprobs: false`` or without a seed."""

from __future__ import annotations

import uuid
from typing import Any

from conftest import LocalServer
from toolkit.rollouts import gather
from toolkit.tasks import reverse

BASE = "toolkit/tiny-random-1m"  # spread-out samples: the groups' rewards differ, every step trains
SHIFT = 1e-6


def shaped(groups: list[Any]) -> list[dict[str, Any]]:
    """The groups as sent, each rollout rewarded by its answer's length."""
    out = []
    for group in groups:
        trajectories = []
        for t in group.trajectories:
            answer = t.choices()[-1].message.content or ""
            trajectories.append(t.model_copy(update={"reward": len(answer) / reverse.MAX_TOKENS}))
        out.append({"trajectories": [t.model_dump(mode="json", exclude_unset=True) for t in trajectories]})
    return out


def shifted(groups: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """``groups`` with every sampled token's logprob moved by :data:`SHIFT` (the same tokens)."""
    out = []
    for group in groups:
        trajectories = []
        for t in group["trajectories"]:
            items = []
            for item in t["messages_and_choices"]:
                if item.get("logprobs"):
                    content = [{**c, "logprob": c["logprob"] - SHIFT} for c in item["logprobs"]["content"]]
                    item = {**item, "logprobs": {**item["logprobs"], "content": content}}
                items.append(item)
            trajectories.append({**t, "messages_and_choices": items})
        out.append({"trajectories": trajectories})
    return out


def test_a_seeded_step_depends_on_the_tokens_not_on_the_sampler_logprobs(server: LocalServer) -> None:
    client = server.client()
    rollout = reverse.rollout(client, BASE)
    groups = shaped(gather(reverse.sample_words(2, seed=3), rollout, group_size=4, progress=False, seed=3))
    moved = shifted(groups)
    assert moved != groups

    def digest(sent: list[dict[str, Any]], **config: Any) -> str | None:
        model = client.models.create(
            project="tests-seeded", name=f"m-{uuid.uuid4().hex[:8]}", base_model=BASE
        )
        job = client.training_jobs.create(
            model_id=model.id, trajectory_groups=sent, experimental_config={"learning_rate": 1e-3, **config}
        )
        checkpoint = job.wait(progress=False)
        assert checkpoint.trained is True
        return client.models.checkpoints.record(model.id, checkpoint.step).checkpoint_digest

    seeded = digest(groups, seed=5)
    assert seeded is not None and digest(moved, seed=5) == seeded  # no flag: the default recomputes
    assert digest(moved, seed=5, precalculate_logprobs=False) != digest(
        groups, seed=5, precalculate_logprobs=False
    )
    assert digest(moved) != digest(groups)  # no seed: the sampler's logprobs, as before seeds
