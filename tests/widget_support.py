"""Helpers shared by the frame, widget and browser tests: models on the test server and small groups."""

from __future__ import annotations

import uuid

import toolkit as tk
from toolkit.types.training import Model, Trajectory, TrajectoryGroup


def base_model(client: tk.Client) -> str:
    """The first base model the server serves."""
    return client.served_models().data[0].id


def new_model(client: tk.Client, project: str = "widgets") -> Model:
    return client.models.create(
        project=project, name=f"m-{uuid.uuid4().hex[:8]}", base_model=base_model(client)
    )


def group(rewards: list[float], prompt: str = "2+2?") -> TrajectoryGroup:
    """A group of one-turn trajectories (trainable choices without logprobs) with the given rewards."""
    return TrajectoryGroup(
        trajectories=[
            Trajectory(
                messages_and_choices=[
                    {"role": "user", "content": prompt},
                    {"message": {"role": "assistant", "content": f"answer {r}"}, "finish_reason": "stop"},
                ],
                reward=r,
                metrics={"correct": r > 0},
                metadata={"task": "math"},
            )
            for r in rewards
        ]
    )
