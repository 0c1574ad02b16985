"""Warnings a training job reports: in its first event (``training_started``, key ``warnings``), what
it was asked that this server ignores and settings known to ruin the model; in ``warning`` events,
why an RL step trained nothing (:func:`nothing_trained`).

Learning rates for RL (docs/training.md, "Learning rates"): the built-in tiny model, fully
fine-tuned, trained stably at 1e-4 to 2e-4 and collapsed at 3e-4 and above in measurements on this
server's RL loop; full fine-tuning of any other base commonly uses 1e-6 to 1e-5, so more than 1e-4
is far above that range; a LoRA adapter takes about ten times the full fine-tuning rate (TRL's
guidance; ART's default for its adapters is 5e-6), so more than 1e-3 is far above its range.
"""

from __future__ import annotations

from collections.abc import Sequence

from pydantic import BaseModel

from ...types.training import TrajectoryGroup
from ..engine.model import BUILTIN_NAMES

BUILTIN_RL_STABLE = "1e-4 to 2e-4"
BUILTIN_RL_HARMFUL = 3e-4  # and above: the built-in model collapsed
FULL_FINE_TUNING_RL_USUAL = "1e-6 to 1e-5"
FULL_FINE_TUNING_RL_WARN_ABOVE = 1e-4
LORA_RL_USUAL = "1e-6 to 1e-4"
LORA_RL_WARN_ABOVE = 1e-3


def unknown_keys(config: BaseModel | None) -> list[str]:
    """A warning naming the ``experimental_config`` keys this server does not know (and ignored)."""
    extra = config.model_extra if config is not None else None
    if not extra:
        return []
    names = ", ".join(sorted(extra))
    return [f"experimental_config keys this server does not know were ignored: {names}."]


def rl_learning_rate(base_model: str, learning_rate: float, *, lora: bool) -> list[str]:
    """A warning when the largest learning rate of an RL job's steps is far above the range known
    to work for the model and the way it trains (a ``lora`` adapter, or every weight)."""
    if lora:
        if learning_rate <= LORA_RL_WARN_ABOVE:
            return []
        return [
            f"The learning rate of this job reaches {learning_rate:g}, far above the range known to work"
            f" for RL with a LoRA adapter on {base_model}: {LORA_RL_USUAL} is usual (ART's default is"
            f" 5e-6). Use {LORA_RL_USUAL}."
        ]
    if base_model in BUILTIN_NAMES:
        if learning_rate < BUILTIN_RL_HARMFUL:
            return []
        return [
            f"The learning rate of this job reaches {learning_rate:g}, far above the range known to work"
            f" for RL on {base_model}: {BUILTIN_RL_STABLE} trained stably, {BUILTIN_RL_HARMFUL:g} and more"
            f" collapsed the model in measurements. Use {BUILTIN_RL_STABLE}."
        ]
    if learning_rate <= FULL_FINE_TUNING_RL_WARN_ABOVE:
        return []
    return [
        f"The learning rate of this job reaches {learning_rate:g}, far above the range known to work"
        f" for RL with full fine-tuning of {base_model}: {FULL_FINE_TUNING_RL_USUAL} is usual (ART's"
        f" default is 5e-6). Use {FULL_FINE_TUNING_RL_USUAL}."
    ]


# ----------------------------------------------------------------------------- RL steps with nothing to train


def _exception(group: TrajectoryGroup) -> str:
    first = group.exceptions[0]
    kind = first.type.removeprefix("<class '").removesuffix("'>")
    return f"{kind}: {first.message}"


def _counted(n: int, what: str) -> str:
    return f"{n} {what}" if n == 1 else f"{n} {what}s"


def nothing_trained(groups: Sequence[TrajectoryGroup], packed_sequence_length: int, base_step: int) -> str:
    """The one line of an RL step over ``groups`` that had no trainable token: why, and that its new
    checkpoint is the model of ``base_step`` unchanged (ART's backend advances the step this way too)."""
    reason = _why_nothing(groups, packed_sequence_length)
    return (
        f"Nothing trained: {reason}. Step {base_step + 1} is step {base_step}'s model unchanged"
        " (its checkpoint says trained: false)."
    )


def _why_nothing(groups: Sequence[TrajectoryGroup], packed_sequence_length: int) -> str:
    if not groups:
        return "the job has no trajectory groups"
    failed = [g for g in groups if not g.trajectories]
    flat = [g for g in groups if g.trajectories and len({t.reward for t in g.trajectories}) == 1]
    varied = [g for g in groups if len({t.reward for t in g.trajectories}) > 1]
    exceptions = sum(len(g.exceptions) for g in failed)
    first = next((_exception(g) for g in failed if g.exceptions), None)
    rollouts = f"{_counted(exceptions, 'exception')}, first {first}" if first else "no exception recorded"
    if len(failed) == len(groups):
        return f"every rollout failed (train/exception_rate 1.0; {rollouts})"
    if len(flat) == len(groups):
        return f"every group's rewards are equal ({_counted(len(groups), 'group')}), so every advantage is 0"
    if not varied:
        return (
            f"no group's rewards differ ({len(flat)} with equal rewards, {len(failed)} with only failed"
            f" rollouts: {rollouts}), so every advantage is 0"
        )
    if any(t.choices() for g in varied for t in g.trajectories):
        cut = f"cut to packed_sequence_length={packed_sequence_length}"
        return f"no sampled token is left to train on (empty completions, or {cut})"
    differ = f"the {_counted(len(varied), 'group')} whose rewards differ"
    parts = [f"no trajectory of {differ} has a Choice (model output) to train on"]
    if flat:
        parts.append(f"{len(flat)} have equal rewards")
    if failed:
        parts.append(f"{len(failed)} hold only failed rollouts ({rollouts})")
    return "; ".join(parts)
