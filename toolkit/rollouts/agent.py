"""The agent loop: multi-turn rollouts in which the model calls tools.

A researcher writes an :class:`Environment` (``reset`` opens an episode for a scenario and returns the
opening messages, ``tools`` are plain Python functions, ``reward`` scores the finished trajectory) and
an :class:`Agent` runs episodes against a chat-completion endpoint: each turn asks the model with the
tools' schemas, runs the tool calls it makes, appends their results as ``tool`` messages, and stops
when the model answers without calling a tool or after ``max_turns`` turns. Every assistant turn keeps
its :class:`~toolkit.types.training.Choice` with logprobs and token ids, so the result is an ART-shaped
trajectory that ``models.log`` and RL jobs take as it is::

    agent = Agent(client, "toolkit/tiny-chat-1m", MyEnvironment, temperature=1.0, max_tokens=64)
    groups = agent.gather(scenarios, group_size=8)

A tool that raises, times out, is unknown or gets arguments that do not fit becomes a ``tool`` message
starting with ``error:`` and counts in the trajectory's ``tool_errors`` metric; it never fails the
rollout. An exception of ``reset`` or ``reward``, a failed model call, or a rollout past its
``timeout`` fails that rollout only (``gather`` records it in its group). With tracing enabled each
rollout is a call whose children are its model calls and tool calls (``tool.<name>``).

The loop is written once as a generator of effects (a model call, or a user function to run); a sync
driver (:class:`Agent`, threads) and an async one (:class:`AsyncAgent`, asyncio) carry them out.
"""

from __future__ import annotations

import asyncio
import contextlib
import re
import time
from collections.abc import Awaitable, Callable, Generator, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Generic, TypeVar

from .. import tracing
from ..client import AsyncClient, Client
from ..types.chat import ChatCompletion
from ..types.training import ChatMessage, Choice, Tool, ToolCall, Trajectory, TrajectoryGroup, as_message
from ._timeouts import call_async, call_in_thread, call_sync
from .gathering import gather, gather_async
from .tools import FunctionTool, ToolArgumentsError, tool, tool_content
from .trajectories import choice_from_completion, warn_if_untrainable

S = TypeVar("S")
ToolChoice = str | Mapping[str, Any]
_STEP = re.compile(r":step(\d+)$")


class RolloutTimeout(TimeoutError):
    """A rollout ran past its ``timeout``."""


class Environment(Generic[S]):
    """The world of one rollout. The agent makes a fresh one per rollout (it calls the class, or the
    factory it was given), so an episode may keep its state on ``self``.

    Override :meth:`reset` (the opening messages of an episode), :meth:`tools` (the functions the model
    may call: plain functions, bound methods or :func:`~toolkit.rollouts.tool` objects, sync or async)
    and :meth:`reward` (the score of the finished trajectory; it may also add to
    ``trajectory.metrics``). Each of them may be ``async``.
    """

    def reset(self, scenario: S) -> Sequence[Mapping[str, Any]] | Awaitable[Sequence[Mapping[str, Any]]]:
        raise NotImplementedError("an Environment must define reset(scenario) -> opening messages")

    def tools(self) -> Sequence[Callable[..., Any]]:
        return []

    def reward(self, trajectory: Trajectory) -> float | Awaitable[float]:
        return 0.0


# ----------------------------------------------------------------------------- effects


@dataclass
class ModelCall:
    """Ask the model for the next turn."""

    request: dict[str, Any]


@dataclass
class Invoke:
    """Run a user function (``reset``, a tool, ``reward``); a tool call is traced as ``op``."""

    fn: Callable[..., Any]
    args: tuple[Any, ...] = ()
    kwargs: dict[str, Any] = field(default_factory=dict)
    timeout: float | None = None
    op: str | None = None


Effect = ModelCall | Invoke
Episode = Generator[Effect, Any, Trajectory]


def policy_version(model: str) -> int | None:
    """The checkpoint step a model name pins (``name:step3``, ``wandb-artifact:///e/p/n:step3``)."""
    match = _STEP.search(model)
    return int(match[1]) if match else None


class _AgentBase(Generic[S]):
    def __init__(
        self,
        model: str,
        environment: Callable[[], Environment[S]],
        *,
        max_turns: int = 4,
        tool_choice: ToolChoice = "auto",
        parallel_tool_calls: bool | None = None,
        tool_timeout: float | None = 30.0,
        timeout: float | None = 300.0,
        version: int | None = None,
        **sampling: Any,
    ) -> None:
        if max_turns < 1:
            raise ValueError("max_turns must be at least 1")
        if sampling.get("n", 1) != 1 or sampling.get("stream"):
            raise ValueError("an agent samples one answer per turn, not streamed: leave out n and stream")
        self.model = model
        self.environment = environment
        self.max_turns = max_turns
        self.tool_choice = tool_choice
        self.parallel_tool_calls = parallel_tool_calls
        self.tool_timeout = tool_timeout
        self.timeout = timeout
        self.version = version if version is not None else policy_version(model)
        self.sampling = sampling

    def _request(self, items: Sequence[Mapping[str, Any] | Choice], tools: list[Tool]) -> dict[str, Any]:
        request: dict[str, Any] = {
            **self.sampling,
            "model": self.model,
            "messages": [as_message(i) if isinstance(i, Choice) else dict(i) for i in items],
            "logprobs": True,
            "return_token_ids": True,
        }
        if tools:
            request["tools"] = [t.model_dump(mode="json", exclude_none=True) for t in tools]
            request["tool_choice"] = self.tool_choice
            if self.parallel_tool_calls is not None:
                request["parallel_tool_calls"] = self.parallel_tool_calls
        return request

    def _tool_turn(
        self, call: ToolCall, tools: Mapping[str, FunctionTool], metrics: dict[str, int]
    ) -> Generator[Effect, Any, dict[str, Any]]:
        """Run one tool call; the ``tool`` message of its result, or of what went wrong."""
        metrics["tool_calls"] += 1
        name = call.function.name
        try:
            fn = tools.get(name)
            if fn is None:
                raise LookupError(f"unknown tool {name!r} (known: {', '.join(tools) or 'none'})")
            kwargs = fn.parse(call.function.arguments)
            result = yield Invoke(fn.fn, kwargs=kwargs, timeout=self.tool_timeout, op=f"tool.{name}")
            content = tool_content(result)
        except TimeoutError:
            metrics["tool_errors"] += 1
            metrics["tool_timeouts"] += 1
            content = f"error: {name} did not answer within {self.tool_timeout} s"
        except (LookupError, ToolArgumentsError) as exc:
            metrics["tool_errors"] += 1
            content = f"error: {exc}"
        except Exception as exc:
            metrics["tool_errors"] += 1
            content = f"error: {type(exc).__name__}: {exc}"
        message: dict[str, Any] = {"role": "tool", "content": content}
        if call.id is not None:
            message["tool_call_id"] = call.id
        return message

    def _episode(self, scenario: S) -> Episode:
        env = self.environment()
        opening = yield Invoke(env.reset, (scenario,))
        tools = {t.name: t for t in (tool(fn) for fn in env.tools())}
        specs = [t.spec for t in tools.values()]
        items: list[Any] = [ChatMessage.model_validate(m).model_dump(exclude_none=True) for m in opening]
        metrics = {"turns": 0, "tool_calls": 0, "tool_errors": 0, "tool_timeouts": 0}
        answered = False
        for _ in range(self.max_turns):
            completion: ChatCompletion = yield ModelCall(self._request(items, specs))
            choice = choice_from_completion(completion)
            warn_if_untrainable(choice)
            items.append(choice)
            metrics["turns"] += 1
            if not choice.message.tool_calls:
                answered = True
                break
            for call in choice.message.tool_calls:
                items.append((yield from self._tool_turn(call, tools, metrics)))
        current = tracing.current_call()
        trajectory = Trajectory(
            messages_and_choices=items,
            tools=specs or None,
            metrics={**metrics, "answered": answered},
            metadata={"model": self.model, **({"trace_call_id": current.id} if current else {})},
            initial_policy_version=self.version,
            final_policy_version=self.version,
        )
        trajectory.reward = float((yield Invoke(env.reward, (trajectory,))))
        return trajectory

    def _trace_attributes(self) -> dict[str, Any]:
        return {"model": self.model, "policy_version": self.version}


class Agent(_AgentBase[S]):
    """Runs multi-turn tool-calling episodes with a sync :class:`~toolkit.Client`.

    ``environment`` makes one :class:`Environment` per rollout (pass the class). Every other keyword
    (``temperature``, ``max_tokens``, ``top_p``, ...) goes into each chat request, which always asks for
    logprobs and token ids. ``tool_timeout`` bounds each tool call and ``timeout`` the whole rollout
    (seconds; ``None``: unbounded). ``version`` is the policy version recorded on the trajectory
    (default: the step a ``name:step<N>`` model name pins).
    """

    def __init__(
        self, client: Client, model: str, environment: Callable[[], Environment[S]], **options: Any
    ) -> None:
        super().__init__(model, environment, **options)
        self.client = client

    def rollout(self, scenario: S) -> Trajectory:
        """One episode of ``scenario``, scored."""
        with tracing.rollout_call(scenario, attributes=self._trace_attributes()) as call:
            trajectory = self._drive(self._episode(scenario))
            tracing.record_outcome(call, trajectory)
            return trajectory

    def gather(
        self,
        scenarios: Iterable[S],
        *,
        group_size: int = 1,
        max_concurrency: int = 8,
        max_exceptions: int | float | None = None,
        progress: bool = True,
        desc: str = "agent rollouts",
        raise_on_all_failed: bool = True,
        seed: int | None = None,
    ) -> list[TrajectoryGroup]:
        """One group of ``group_size`` episodes per scenario (see :func:`~toolkit.rollouts.gather`)."""
        return gather(
            scenarios,
            self.rollout,
            group_size=group_size,
            max_concurrency=max_concurrency,
            max_exceptions=max_exceptions,
            progress=progress,
            desc=desc,
            raise_on_all_failed=raise_on_all_failed,
            seed=seed,
        )

    def _drive(self, episode: Episode) -> Trajectory:
        deadline = None if self.timeout is None else time.monotonic() + self.timeout
        value: Any = None
        error: BaseException | None = None
        while True:
            try:
                effect = episode.send(value) if error is None else episode.throw(error)
            except StopIteration as stop:
                return stop.value
            value, error = None, None
            remaining = None if deadline is None else deadline - time.monotonic()
            try:
                value = self._run(effect, remaining)
            except RolloutTimeout:
                episode.close()
                raise
            except Exception as exc:
                error = exc

    def _run(self, effect: Effect, remaining: float | None) -> Any:
        late = RolloutTimeout(f"the rollout took longer than {self.timeout} s")
        if remaining is not None and remaining <= 0:
            raise late
        if isinstance(effect, ModelCall):
            try:
                return call_in_thread(
                    lambda: self.client.chat.completions.create(**effect.request), remaining
                )
            except TimeoutError:
                raise late from None
        limits = [t for t in (effect.timeout, remaining) if t is not None]
        with _traced(effect) as call:
            try:
                result = call_sync(effect.fn, effect.args, effect.kwargs, min(limits) if limits else None)
            except TimeoutError:
                if effect.timeout is None or (remaining is not None and remaining < effect.timeout):
                    raise late from None
                raise
            if call is not None:
                call.output = result
        return result


class AsyncAgent(_AgentBase[S]):
    """The async twin of :class:`Agent`, with a :class:`~toolkit.AsyncClient`: ``await agent.rollout(s)``
    and ``await agent.gather(scenarios, group_size=8)``; sync tools run in threads."""

    def __init__(
        self, client: AsyncClient, model: str, environment: Callable[[], Environment[S]], **options: Any
    ) -> None:
        super().__init__(model, environment, **options)
        self.client = client

    async def rollout(self, scenario: S) -> Trajectory:
        """One episode of ``scenario``, scored."""
        with tracing.rollout_call(scenario, attributes=self._trace_attributes()) as call:
            try:
                async with asyncio.timeout(self.timeout) as limit:
                    trajectory = await self._drive(self._episode(scenario))
            except TimeoutError:
                if limit.expired():
                    raise RolloutTimeout(f"the rollout took longer than {self.timeout} s") from None
                raise
            tracing.record_outcome(call, trajectory)
            return trajectory

    async def gather(
        self,
        scenarios: Iterable[S],
        *,
        group_size: int = 1,
        max_concurrency: int = 8,
        max_exceptions: int | float | None = None,
        progress: bool = True,
        desc: str = "agent rollouts",
        raise_on_all_failed: bool = True,
        seed: int | None = None,
    ) -> list[TrajectoryGroup]:
        """One group of ``group_size`` episodes per scenario (see :func:`~toolkit.rollouts.gather_async`)."""
        return await gather_async(
            scenarios,
            self.rollout,
            group_size=group_size,
            max_concurrency=max_concurrency,
            max_exceptions=max_exceptions,
            progress=progress,
            desc=desc,
            raise_on_all_failed=raise_on_all_failed,
            seed=seed,
        )

    async def _drive(self, episode: Episode) -> Trajectory:
        value: Any = None
        error: BaseException | None = None
        while True:
            try:
                effect = episode.send(value) if error is None else episode.throw(error)
            except StopIteration as stop:
                return stop.value
            value, error = None, None
            try:
                value = await self._run(effect)
            except asyncio.CancelledError:
                episode.close()
                raise
            except Exception as exc:
                error = exc

    async def _run(self, effect: Effect) -> Any:
        if isinstance(effect, ModelCall):
            return await self.client.chat.completions.create(**effect.request)
        with _traced(effect) as call:
            result = await call_async(
                effect.fn, effect.args, effect.kwargs, effect.timeout, thread=bool(effect.op)
            )
            if call is not None:
                call.output = result
        return result


@contextlib.contextmanager
def _traced(effect: Invoke) -> Iterator[tracing.Call | None]:
    """A trace call around a tool call (nothing for ``reset`` and ``reward``, or with tracing off)."""
    if effect.op is None:
        yield None
        return
    with tracing.call(effect.op, effect.kwargs, attributes={"kind": "tool"}) as call:
        yield call
