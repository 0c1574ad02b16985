"""Gather rollouts into trajectory groups.

A rollout function takes one scenario and returns a scored :class:`Trajectory` (build it with
:func:`~toolkit.rollouts.trajectory`, or let an :class:`~toolkit.rollouts.Agent` run a multi-turn
episode). :func:`gather` runs it ``group_size`` times per scenario with bounded concurrency and a
progress bar; an exception inside a rollout is recorded in its group (as ART does) instead of
stopping the others. When every rollout failed, :class:`GatherError` is raised with the first
exception (``raise_on_all_failed=False``: the groups come back as they are); when some failed, one
:class:`GatherWarning` says how many. With tracing enabled (:func:`toolkit.tracing.enable`), each
rollout is a call and its chat completions (and an agent's tool calls) are its children.
"""

from __future__ import annotations

import asyncio
import contextvars
import os
import sys
import traceback
import warnings
from collections.abc import Awaitable, Callable, Iterable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any, TypeVar

from .. import seeding, tracing
from .._progress import ProgressBar
from ..types.training import PydanticException, Trajectory, TrajectoryGroup

S = TypeVar("S")
TrajectoryLike = Trajectory | Mapping[str, Any]
Outcome = Trajectory | BaseException


class GatherError(RuntimeError):
    """Every rollout of a gather failed; ``__cause__`` is the first exception, ``exceptions`` all."""

    def __init__(self, message: str, exceptions: Sequence[BaseException]) -> None:
        super().__init__(message)
        self.exceptions = list(exceptions)


class GatherWarning(UserWarning):
    """Some (not all) rollouts of a gather failed; their exceptions are in their groups."""


_PACKAGE = os.path.dirname(os.path.dirname(os.path.abspath(__file__))) + os.sep


def _caller_stacklevel() -> int:
    """The ``stacklevel`` that points a warning at the first frame outside the toolkit (the user's
    line, whether it called ``gather``, ``Agent.gather`` or ``evaluate``)."""
    frame, level = sys._getframe(1), 1
    while frame is not None and frame.f_code.co_filename.startswith(_PACKAGE):
        frame, level = frame.f_back, level + 1  # type: ignore[assignment]
    return level


def _first(exc: BaseException) -> str:
    """``ValueError: <the first line of its message>``."""
    lines = str(exc).strip().splitlines()
    return f"{type(exc).__name__}: {lines[0] if lines else ''}"


def exception_record(exc: BaseException) -> PydanticException:
    """An exception as the wire records it: ``{"type": "<class 'ValueError'>", message, traceback}``."""
    return PydanticException(
        type=str(type(exc)),
        message=str(exc),
        traceback="".join(traceback.format_exception(type(exc), exc, exc.__traceback__)),
    )


def _groups(
    outcomes: Sequence[Outcome],
    group_size: int,
    max_exceptions: int | float | None,
    raise_on_all_failed: bool,
) -> list[TrajectoryGroup]:
    errors = [o for o in outcomes if isinstance(o, BaseException)]
    if errors and len(errors) == len(outcomes) and raise_on_all_failed:
        message = f"all {len(errors)} rollouts failed; the first: {_first(errors[0])}"
        raise GatherError(message, errors) from errors[0]
    limit = (
        None
        if max_exceptions is None
        else max_exceptions * len(outcomes)
        if isinstance(max_exceptions, float)
        else max_exceptions
    )
    if limit is not None and len(errors) > limit:
        raise RuntimeError(f"{len(errors)} of {len(outcomes)} rollouts failed") from errors[0]
    if errors:
        message = f"{len(errors)} of {len(outcomes)} rollouts failed; the first: {_first(errors[0])}"
        warnings.warn(GatherWarning(message), stacklevel=_caller_stacklevel())
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


def _seeds(count: int, group_size: int, seed: int | None) -> list[int | None]:
    """The seed of each rollout: ``derive_seed(seed, group, member)`` (all None when unseeded)."""
    if seed is None:
        return [None] * count
    return [seeding.derive_seed(seed, i // group_size, i % group_size) for i in range(count)]


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
    raise_on_all_failed: bool = True,
    seed: int | None = None,
) -> list[TrajectoryGroup]:
    """One group per scenario, of ``group_size`` rollouts run on up to ``max_concurrency`` threads.

    ``seed`` seeds rollout ``r`` of group ``g`` with ``derive_seed(seed, g, r)``: its chat requests
    without a ``seed`` of their own sample the same tokens whatever order the rollouts run in
    (:mod:`toolkit.seeding`; default: the open experiment's seed, if any, else unseeded).

    ``max_exceptions`` (a count, or a fraction when a float) raises once more rollouts failed;
    by default every failure is recorded in its group, with one :class:`GatherWarning`, and
    :class:`GatherError` is raised when all failed (unless ``raise_on_all_failed=False``).
    """
    items = [s for s in scenarios for _ in range(group_size)]
    seeds = _seeds(len(items), group_size, seeding.resolve(seed, "gather"))
    bar = _Bar(len(items), progress, desc)

    def run(scenario: S, rollout_seed: int | None) -> Outcome:
        with seeding.rollout_seed(rollout_seed), tracing.gathered_rollout_call(scenario) as call:
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
            outcomes = list(pool.map(lambda ctx, s, r: ctx.run(run, s, r), contexts, items, seeds))
    finally:
        bar.close()
    return _groups(outcomes, group_size, max_exceptions, raise_on_all_failed)


async def gather_async(
    scenarios: Iterable[S],
    rollout: Callable[[S], Awaitable[TrajectoryLike]],
    *,
    group_size: int = 1,
    max_concurrency: int = 8,
    max_exceptions: int | float | None = None,
    progress: bool = True,
    desc: str = "rollouts",
    raise_on_all_failed: bool = True,
    seed: int | None = None,
) -> list[TrajectoryGroup]:
    """The async twin of :func:`gather`: rollouts are coroutines, at most ``max_concurrency`` at once."""
    items = [s for s in scenarios for _ in range(group_size)]
    seeds = _seeds(len(items), group_size, seeding.resolve(seed, "gather"))
    bar = _Bar(len(items), progress, desc)
    limit = asyncio.Semaphore(max(1, max_concurrency))

    async def run(scenario: S, rollout_seed: int | None) -> Outcome:
        async with limit:
            with seeding.rollout_seed(rollout_seed), tracing.gathered_rollout_call(scenario) as call:
                try:
                    outcome = _outcome(await rollout(scenario))
                except Exception as exc:
                    outcome = exc
                tracing.record_outcome(call, outcome)
        bar.done(outcome)
        return outcome

    try:
        outcomes = await asyncio.gather(*(run(s, r) for s, r in zip(items, seeds, strict=True)))
    finally:
        bar.close()
    return _groups(list(outcomes), group_size, max_exceptions, raise_on_all_failed)
