"""Best of each group, and an SFT job on it in one call (rejection-sampling fine-tuning)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from ..client import Client
from ..client.jobs import TrainingJobHandle
from ..types.training import SFTTrainingConfig, TrajectoryGroup
from .records import GroupSource, as_groups


def best_of_groups(
    items: GroupSource,
    *,
    top_k: int = 1,
    min_reward: float | None = None,
    drop_zero_std: bool = False,
) -> list[TrajectoryGroup]:
    """Each group's ``top_k`` trajectories by reward (ties keep their order), those below
    ``min_reward`` left out; ``drop_zero_std`` leaves out groups whose rewards are all equal (nothing
    was better than the rest). Groups left empty are dropped; the input is not changed."""
    if top_k < 1:
        raise ValueError("top_k must be at least 1")
    best = []
    for group in as_groups(items):
        rewards = [t.reward for t in group.trajectories]
        if not rewards or (drop_zero_std and max(rewards) == min(rewards)):
            continue
        ranked = sorted(group.trajectories, key=lambda t: -t.reward)[:top_k]
        kept = [t.model_copy(deep=True) for t in ranked if min_reward is None or t.reward >= min_reward]
        if kept:
            best.append(group.model_copy(update={"trajectories": kept}, deep=True))
    return best


def sft_from_best(
    client: Client,
    model_id: str,
    items: GroupSource,
    *,
    top_k: int = 1,
    min_reward: float | None = None,
    drop_zero_std: bool = False,
    config: SFTTrainingConfig | Mapping[str, Any] | None = None,
    name: str | None = None,
) -> TrainingJobHandle:
    """Select with :func:`best_of_groups`, upload the kept trajectories as ``train.jsonl`` (messages
    and tools) and start an SFT job of ``model_id`` on them; the handle follows the job."""
    best = best_of_groups(items, top_k=top_k, min_reward=min_reward, drop_zero_std=drop_zero_std)
    trajectories = [t for g in best for t in g.trajectories]
    if not trajectories:
        raise ValueError("no trajectory passed the selection: nothing to train on")
    return client.sft_training_jobs.create_from_data(
        model_id=model_id, data=trajectories, config=config, name=name
    )
