"""Trajectories from chat completions, and what an RL job needs of them.

An RL job trains on the sampled tokens and their logprobs: :func:`trajectory` warns
(:class:`MissingTokensWarning`) when the completion lacks them, and :func:`rl_untrainable` lists the
trajectories of some groups that an RL job would refuse for that reason.
"""

from __future__ import annotations

import warnings
from collections.abc import Mapping, Sequence
from typing import Any

from ..types.chat import ChatCompletion
from ..types.training import Choice, History, Tool, Trajectory, TrajectoryGroup

RL_NEEDS = "request logprobs=True and return_token_ids=True, or set allow_training_without_logprobs"


class MissingTokensWarning(UserWarning):
    """A trajectory was built from a completion without logprobs or token ids: RL cannot train on it."""


def lacks(choice: Choice) -> str | None:
    """``"no logprobs"``, ``"no token ids"``, both, or None when the choice has what RL trains on."""
    missing = [
        name
        for name, absent in (
            ("logprobs", choice.logprobs is None),
            ("token ids", choice.token_ids is None or choice.prompt_token_ids is None),
        )
        if absent
    ]
    return "no " + " and no ".join(missing) if missing else None


def missing_rl_data(trajectory: Trajectory) -> list[str]:
    """What the trainable choices of a trajectory lack for RL, one line each (``"message 1: no
    logprobs"``): the sampler's logprobs, and the prompt and completion token ids."""
    problems = []
    histories: list[Trajectory | History] = [trajectory, *trajectory.additional_histories]
    for h, history in enumerate(histories):
        for position, item in enumerate(history.messages_and_choices):
            missing = lacks(item) if isinstance(item, Choice) else None
            if missing:
                problems.append(f"message {position}{f' of history {h}' if h else ''}: {missing}")
    return problems


def rl_untrainable(groups: Sequence[TrajectoryGroup]) -> list[str]:
    """The trajectories an RL job would refuse (unless ``allow_training_without_logprobs``), one line per
    choice: those that carry an advantage (their group's rewards vary and theirs is not the mean) and
    have a choice without logprobs or token ids."""
    problems = []
    for g, group in enumerate(groups):
        rewards = [t.reward for t in group.trajectories]
        if not rewards or max(rewards) == min(rewards):
            continue  # no advantage: the job skips the group
        mean = sum(rewards) / len(rewards)
        for t, traj in enumerate(group.trajectories):
            if traj.reward != mean:
                problems += [f"group {g}, trajectory {t}, {m}" for m in missing_rl_data(traj)]
    return problems


def choice_from_completion(completion: ChatCompletion, index: int = 0) -> Choice:
    """The trainable Choice of a completion: message (tool calls included), finish reason, logprobs and
    token ids (the prompt's token ids move onto the choice, where the training API reads them)."""
    choice = completion.choices[index].model_dump(mode="json")
    return Choice.model_validate(
        {
            "index": choice["index"],
            "message": choice["message"],
            "finish_reason": choice.get("finish_reason"),
            "logprobs": choice.get("logprobs"),
            "token_ids": choice.get("token_ids"),
            "prompt_token_ids": completion.prompt_token_ids,
        }
    )


def warn_if_untrainable(choice: Choice, stacklevel: int = 3) -> None:
    """Warn (:class:`MissingTokensWarning`) when ``choice`` lacks what an RL job trains on."""
    missing = lacks(choice)
    if missing:
        warnings.warn(
            f"the completion has {missing}: an RL job cannot train on this trajectory ({RL_NEEDS})",
            MissingTokensWarning,
            stacklevel=stacklevel,
        )


def trajectory(
    messages: Sequence[Mapping[str, Any]],
    completion: ChatCompletion,
    *,
    reward: float = 0.0,
    index: int = 0,
    tools: Sequence[Tool | Mapping[str, Any]] | None = None,
    metrics: Mapping[str, float | int | bool] | None = None,
    metadata: Mapping[str, float | int | str | bool | None] | None = None,
) -> Trajectory:
    """A trajectory of the prompt ``messages`` followed by the completion's choice ``index``; warns
    (:class:`MissingTokensWarning`) when the choice lacks the logprobs or token ids RL trains on."""
    choice = choice_from_completion(completion, index)
    fields: dict[str, Any] = {
        "messages_and_choices": [dict(m) for m in messages] + [choice],
        "reward": reward,
    }
    if tools:
        fields["tools"] = [Tool.model_validate(t) for t in tools]
    if metrics:
        fields["metrics"] = dict(metrics)
    if metadata:
        fields["metadata"] = dict(metadata)
    warn_if_untrainable(choice)
    return Trajectory.model_validate(fields)
