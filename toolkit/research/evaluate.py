"""Evaluate checkpoints: a held-out scenario set against each checkpoint, concurrently, scored.

A task is a rollout factory ``rollout(client, model_name) -> (scenario -> Trajectory)``, the shape
the shipped tasks have (``toolkit.tasks.reverse.rollout``; for an agent task,
``lambda c, m: lookup.agent(c, m).rollout``); :func:`chat_task` makes one from your prompts and a
scorer. Each checkpoint is addressed by its unique name
``wandb-artifact:///<entity>/<project>/<name>:step<N>`` (step 0 is the base), so every trajectory
carries its step as ``initial_policy_version``/``final_policy_version``.
"""

from __future__ import annotations

import math
from collections.abc import Awaitable, Callable, Collection, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import pandas as pd
import plotly.graph_objects as go

from ..client import AsyncClient, Client
from ..rollouts import gather, gather_async, trajectory
from ..rollouts.gathering import TrajectoryLike
from ..types.training import Model, Trajectory, TrajectoryGroup
from .figures import evaluation as evaluation_figure

Rollout = Callable[[Any], TrajectoryLike]
Task = Callable[[Client, str], Rollout]
AsyncTask = Callable[[AsyncClient, str], Callable[[Any], Awaitable[TrajectoryLike]]]
Prompt = str | Sequence[Mapping[str, Any]]


def checkpoint_name(model: Model, step: int) -> str:
    """The chat-endpoint name of ``model``'s checkpoint at ``step``."""
    return f"wandb-artifact:///{model.entity}/{model.project}/{model.name}:step{step}"


def chat_task(score: Callable[[Trajectory], float], **request: Any) -> Task:
    """A task of your own: each scenario is a prompt (a string or a message list) answered in one
    turn with ``request``'s options (e.g. ``max_tokens``), scored by ``score(trajectory)``."""

    def task(client: Client, model: str) -> Rollout:
        def run(prompt: Prompt) -> Trajectory:
            messages = (
                [{"role": "user", "content": prompt}]
                if isinstance(prompt, str)
                else [dict(m) for m in prompt]
            )
            options = {"logprobs": True, "return_token_ids": True, **request}
            completion = client.chat.completions.create(model=model, messages=messages, **options)
            result = trajectory(messages, completion)
            result.reward = float(score(result))
            return result

        return run

    return task


@dataclass
class Evaluation:
    """What :func:`evaluate` measured: ``frame`` (``step``, ``score_mean``, ``score_std``, ``score_min``,
    ``score_max``, ``n``, ``errors``, ``logged``) and each step's groups."""

    frame: pd.DataFrame
    groups: dict[int, list[TrajectoryGroup]] = field(default_factory=dict)

    def figure(self) -> go.Figure:
        """Score versus step (mean ± std)."""
        return evaluation_figure(self.frame)

    def _repr_html_(self) -> str:
        return str(self.frame.to_html(index=False))


def _summary(step: int, groups: list[TrajectoryGroup], logged: bool) -> dict[str, Any]:
    rewards = [t.reward for g in groups for t in g.trajectories]
    mean = sum(rewards) / len(rewards) if rewards else math.nan
    std = math.sqrt(sum((r - mean) ** 2 for r in rewards) / len(rewards)) if rewards else math.nan
    errors = sum(len(g.exceptions) for g in groups)
    return {
        "step": step,
        "score_mean": mean,
        "score_std": std,
        "score_min": min(rewards, default=math.nan),
        "score_max": max(rewards, default=math.nan),
        "n": len(rewards),
        "errors": errors,
        "logged": logged,
    }


@dataclass
class _Plan:
    """One evaluation written once: which checkpoints, which rollouts, what to log, the result
    (carried out by :func:`evaluate` with threads and :func:`evaluate_async` with asyncio)."""

    model: Model
    latest: int  # the model's newest checkpoint, where the hosted API files logged groups
    steps: list[int]
    scenarios: Sequence[Any]

    @classmethod
    def of(
        cls, model: Model, checkpoints: Sequence[int], steps: Sequence[int] | None, scenarios: Sequence[Any]
    ) -> _Plan:
        steps = checkpoints if steps is None else steps
        if not steps or not scenarios:
            raise ValueError("nothing to evaluate: give at least one step and one scenario")
        return cls(model, max(checkpoints, default=0), sorted(set(steps)), scenarios)

    def names(self) -> dict[int, str]:
        return {step: checkpoint_name(self.model, step) for step in self.steps}

    def items(self) -> list[tuple[int, Any]]:
        return [(step, s) for step in self.steps for s in self.scenarios]

    @staticmethod
    def pinned(step: int, outcome: TrajectoryLike) -> Trajectory:
        result = Trajectory.model_validate(outcome)
        result.initial_policy_version = result.final_policy_version = step
        return result

    def by_step(self, groups: list[TrajectoryGroup]) -> dict[int, list[TrajectoryGroup]]:
        n = len(self.scenarios)
        return {step: groups[i * n : (i + 1) * n] for i, step in enumerate(self.steps)}

    def logged_steps(self, log: bool, extensions: bool) -> dict[int, int | None]:
        """The steps whose groups go to ``/log``, each with the ``step`` field to send: every step at
        its own where the deployment takes that field (an extension), else only the model's current
        step, if evaluated, without it (the hosted API files groups at the current step)."""
        if not log:
            return {}
        if extensions:
            return {s: s for s in self.steps}
        return {s: None for s in self.steps if s == self.latest}

    def result(self, by_step: dict[int, list[TrajectoryGroup]], logged: Collection[int]) -> Evaluation:
        rows = [_summary(step, groups, step in logged) for step, groups in by_step.items()]
        return Evaluation(pd.DataFrame(rows), by_step)


def evaluate(
    client: Client,
    model: Model | str,
    scenarios: Sequence[Any],
    task: Task,
    *,
    steps: Sequence[int] | None = None,
    group_size: int = 1,
    max_concurrency: int = 8,
    log: bool = True,
    split: str = "val",
    progress: bool = True,
    seed: int | None = None,
) -> Evaluation:
    """Run ``scenarios`` (``group_size`` rollouts each) against ``model``'s checkpoints at ``steps``
    (default: every checkpoint), all at once on up to ``max_concurrency`` threads, and score them.
    ``seed`` seeds the rollouts as :func:`~toolkit.rollouts.gather` does (group ``g`` is scenario
    ``g % len(scenarios)`` of the ``g // len(scenarios)``-th step), so the evaluation repeats exactly.
    ``model`` is a :class:`Model` or its id (read back with ``models.retrieve``, which only the local
    server has: on the hosted API pass the ``Model`` that ``models.create`` returned).

    With ``log``, each step's groups are logged as ``split`` at that step (``models.log(step=...)``,
    an extension); on a deployment without extensions (the hosted API files groups at the current
    step only) only the current step's are, and older steps' scores stay in the result."""
    if isinstance(model, str):
        model = client.models.retrieve(model)
    checkpoints = [c.step for c in client.models.checkpoints.list(model.id)]
    plan = _Plan.of(model, checkpoints, steps, scenarios)
    runs = {step: task(client, name) for step, name in plan.names().items()}

    def run(item: tuple[int, Any]) -> TrajectoryLike:
        return plan.pinned(item[0], runs[item[0]](item[1]))

    groups = gather(
        plan.items(),
        run,
        group_size=group_size,
        max_concurrency=max_concurrency,
        progress=progress,
        desc="evaluate",
        seed=seed,
    )
    by_step, logged = plan.by_step(groups), plan.logged_steps(log, client.deployment.extensions)
    for step, at_step in logged.items():
        client.models.log(model.id, split=split, trajectory_groups=by_step[step], step=at_step)
    return plan.result(by_step, logged)


async def evaluate_async(
    client: AsyncClient,
    model: Model | str,
    scenarios: Sequence[Any],
    task: AsyncTask,
    *,
    steps: Sequence[int] | None = None,
    group_size: int = 1,
    max_concurrency: int = 8,
    log: bool = True,
    split: str = "val",
    progress: bool = True,
    seed: int | None = None,
) -> Evaluation:
    """:func:`evaluate` on an :class:`~toolkit.AsyncClient`, with an async task
    (``reverse.async_rollout``, ``lambda c, m: AsyncAgent(c, m, ...).rollout``); rollouts run on
    asyncio, up to ``max_concurrency`` at once."""
    if isinstance(model, str):
        model = await client.models.retrieve(model)
    checkpoints = [c.step async for c in client.models.checkpoints.list(model.id)]
    plan = _Plan.of(model, checkpoints, steps, scenarios)
    runs = {step: task(client, name) for step, name in plan.names().items()}

    async def run(item: tuple[int, Any]) -> TrajectoryLike:
        return plan.pinned(item[0], await runs[item[0]](item[1]))

    groups = await gather_async(
        plan.items(),
        run,
        group_size=group_size,
        max_concurrency=max_concurrency,
        progress=progress,
        desc="evaluate",
        seed=seed,
    )
    by_step, logged = plan.by_step(groups), plan.logged_steps(log, client.deployment.extensions)
    for step, at_step in logged.items():
        await client.models.log(model.id, split=split, trajectory_groups=by_step[step], step=at_step)
    return plan.result(by_step, logged)
