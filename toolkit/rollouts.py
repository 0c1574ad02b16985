"""The rollout loop: turn chat completions into trajectories and gather them into groups.

A rollout function takes one scenario and returns a scored :class:`Trajectory` (build it with
:func:`trajectory` from the conversation and the completion, requested with ``logprobs=True`` and
``return_token_ids=True`` so that it can be trained). :func:`gather` runs it ``group_size`` times
per scenario with bounded concurrency and a progress bar; an exception inside a rollout is
recorded in its group (as ART does) instead of stopping the others. With tracing enabled
(:func:`toolkit.tracing.enable`), each rollout is a call and its chat completions are its children.

An RL job trains on the sampled tokens and their logprobs: :func:`trajectory` warns
(:class:`MissingTokensWarning`) when the completion lacks them, and :func:`rl_untrainable` lists the
trajectories of some groups that an RL job would refuse for that reason.
"""

from __future__ import annotations

import asyncio
import contextvars
import traceback
import warnings
from collections.abc import Awaitable, Callable, Iterable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any, TypeVar

from . import tracing
from ._progress import ProgressBar
from .types.chat import ChatCompletion
from .types.training import Choice, History, PydanticException, Tool, Trajectory, TrajectoryGroup

S = TypeVar("S")
TrajectoryLike = Trajectory | Mapping[str, Any]
Outcome = Trajectory | BaseException

__all__ = [
    "MissingTokensWarning",
    "choice_from_completion",
    "exception_record",
    "gather",
    "gather_async",
    "missing_rl_data",
    "rl_untrainable",
    "trajectory",
]
RL_NEEDS = "request logprobs=True and return_token_ids=True, or set allow_training_without_logprobs"


class MissingTokensWarning(UserWarning):
    """A trajectory was built from a completion without logprobs or token ids: RL cannot train on it."""


def _lacks(choice: Choice) -> str | None:
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
            lacks = _lacks(item) if isinstance(item, Choice) else None
            if lacks:
                problems.append(f"message {position}{f' of history {h}' if h else ''}: {lacks}")
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
    """The trainable Choice of a completion: message, finish reason, logprobs and token ids
    (the prompt's token ids move onto the choice, where the training API reads them)."""
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
    fields: dict[str, Any] = {
        "messages_and_choices": [dict(m) for m in messages] + [choice_from_completion(completion, index)],
        "reward": reward,
    }
    if tools:
        fields["tools"] = [Tool.model_validate(t) for t in tools]
    if metrics:
        fields["metrics"] = dict(metrics)
    if metadata:
        fields["metadata"] = dict(metadata)
    lacks = _lacks(fields["messages_and_choices"][-1])
    if lacks:
        warnings.warn(
            f"the completion has {lacks}: an RL job cannot train on this trajectory ({RL_NEEDS})",
            MissingTokensWarning,
            stacklevel=2,
        )
    return Trajectory.model_validate(fields)


def exception_record(exc: BaseException) -> PydanticException:
    """An exception as the wire records it: ``{"type": "<class 'ValueError'>", message, traceback}``."""
    return PydanticException(
        type=str(type(exc)),
        message=str(exc),
        traceback="".join(traceback.format_exception(type(exc), exc, exc.__traceback__)),
    )


def _groups(
    outcomes: Sequence[Outcome], group_size: int, max_exceptions: int | float | None
) -> list[TrajectoryGroup]:
    errors = [o for o in outcomes if isinstance(o, BaseException)]
    limit = (
        None
        if max_exceptions is None
        else max_exceptions * len(outcomes)
        if isinstance(max_exceptions, float)
        else max_exceptions
    )
    if limit is not None and len(errors) > limit:
        raise RuntimeError(f"{len(errors)} of {len(outcomes)} rollouts failed") from errors[0]
    groups = []
    for start in range(0, len(outcomes), group_size):
        members = outcomes[start : start + group_size]
        groups.append(
            TrajectoryGroup(
                trajectories=[m for m in members if isinstance(m, Trajectory)],
                exceptions=[exception_record(m) for m in members if isinstance(m, BaseException)],
            )
        )
    return groups


class _Bar:
    def __init__(self, total: int, enabled: bool, desc: str) -> None:
        self.bar = ProgressBar(total, desc, "rollout") if enabled else None
        self.rewards: list[float] = []
        self.errors = 0

    def done(self, outcome: Outcome) -> None:
        if self.bar is None:
            return
        if isinstance(outcome, Trajectory):
            self.rewards.append(outcome.reward)
        else:
            self.errors += 1
        mean = sum(self.rewards) / len(self.rewards) if self.rewards else float("nan")
        self.bar.update(1, reward=f"{mean:.3f}", exceptions=self.errors)

    def close(self) -> None:
        if self.bar is not None:
            self.bar.close()


def _outcome(value: Any) -> Outcome:
    return value if isinstance(value, Trajectory | BaseException) else Trajectory.model_validate(value)


def gather(
    scenarios: Iterable[S],
    rollout: Callable[[S], TrajectoryLike],
    *,
    group_size: int = 1,
    max_concurrency: int = 8,
    max_exceptions: int | float | None = None,
    progress: bool = True,
    desc: str = "rollouts",
) -> list[TrajectoryGroup]:
    """One group per scenario, of ``group_size`` rollouts run on up to ``max_concurrency`` threads.

    ``max_exceptions`` (a count, or a fraction when a float) raises once more rollouts failed;
    by default every failure is only recorded in its group.
    """
    items = [s for s in scenarios for _ in range(group_size)]
    bar = _Bar(len(items), progress, desc)

    def run(scenario: S) -> Outcome:
        with tracing.call("rollout", inputs={"scenario": scenario}) as call:
            try:
                outcome = _outcome(rollout(scenario))
            except Exception as exc:
                outcome = exc
            tracing.record_outcome(call, outcome)
        bar.done(outcome)
        return outcome

    try:
        with ThreadPoolExecutor(max_workers=max(1, max_concurrency)) as pool:
            # each rollout runs in a copy of the caller's context (so a traced parent call is seen)
            contexts = [contextvars.copy_context() for _ in items]
            outcomes = list(pool.map(lambda ctx, scenario: ctx.run(run, scenario), contexts, items))
    finally:
        bar.close()
    return _groups(outcomes, group_size, max_exceptions)


async def gather_async(
    scenarios: Iterable[S],
    rollout: Callable[[S], Awaitable[TrajectoryLike]],
    *,
    group_size: int = 1,
    max_concurrency: int = 8,
    max_exceptions: int | float | None = None,
    progress: bool = True,
    desc: str = "rollouts",
) -> list[TrajectoryGroup]:
    """The async twin of :func:`gather`: rollouts are coroutines, at most ``max_concurrency`` at once."""
    items = [s for s in scenarios for _ in range(group_size)]
    bar = _Bar(len(items), progress, desc)
    limit = asyncio.Semaphore(max(1, max_concurrency))

    async def run(scenario: S) -> Outcome:
        async with limit:
            with tracing.call("rollout", inputs={"scenario": scenario}) as call:
                try:
                    outcome = _outcome(await rollout(scenario))
                except Exception as exc:
                    outcome = exc
                tracing.record_outcome(call, outcome)
        bar.done(outcome)
        return outcome

    try:
        outcomes = await asyncio.gather(*(run(s) for s in items))
    finally:
        bar.close()
    return _groups(list(outcomes), group_size, max_exceptions)
