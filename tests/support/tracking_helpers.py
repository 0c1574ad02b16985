"""Helpers of the reproducibility tests (sweeps, lineage, tracking): tiny seeded RL runs on the real
local server, a few seconds each."""

from __future__ import annotations

import uuid

import toolkit as tk
from toolkit.rollouts import trajectory
from toolkit.tasks import reverse
from toolkit.types.training import Model, TrajectoryGroup

RANDOM_BASE = "toolkit/tiny-random-1m"  # spread-out samples: every group has advantages


def new_model(client: tk.Client, prefix: str, base: str = RANDOM_BASE) -> Model:
    return client.models.create(
        project="tests-tracking", name=f"{prefix}-{uuid.uuid4().hex[:8]}", base_model=base
    )


def rl_steps(
    client: tk.Client,
    model: Model,
    steps: int,
    seed: int,
    learning_rate: float = 1e-4,
    job_seed: int | None = None,
) -> None:
    """``steps`` RL steps on ``model``, each of 2 words x 4 samples seeded from ``seed``, rewarded by
    the answer's length (so groups differ and each step trains); ``job_seed``: each job's seed."""
    for _ in range(steps):
        step = client.models.retrieve(model.id).latest_step or 0
        served = tk.research.checkpoint_name(model, step)
        groups = []
        for i, word in enumerate(reverse.sample_words(2, seed=seed * 100 + step)):
            samples = []
            for k in range(4):
                messages = reverse.prompt(word)
                out = client.chat.completions.create(
                    model=served,
                    messages=messages,
                    max_tokens=reverse.MAX_TOKENS,
                    temperature=1.0,
                    logprobs=True,
                    return_token_ids=True,
                    seed=seed * 1000 + step * 100 + i * 10 + k,
                )
                score = len(out.choices[0].message.content or "") / reverse.MAX_TOKENS
                samples.append(trajectory(messages, out, reward=score))
            groups.append(TrajectoryGroup(trajectories=samples))
        config: dict[str, float | int] = {"learning_rate": learning_rate}
        if job_seed is not None:
            config["seed"] = job_seed
        job = client.training_jobs.create(
            model_id=model.id, trajectory_groups=groups, experimental_config=config
        )
        job.wait(progress=False, poll_interval=0.1)
