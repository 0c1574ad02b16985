"""Opt-in tracing of the toolkit's own work into the trace service.

Once :func:`enable` is called, every chat completion made through a toolkit client becomes a call
(inputs, output, ``summary.usage`` and latency), and :func:`call` / :func:`op` make parent calls,
so a rollout is the parent of its completions::

    from toolkit import tracing

    tracing.enable(client, "me/rl-runs")
    with tracing.call("rollout", inputs={"scenario": s}) as c:
        completion = client.chat.completions.create(messages=..., model=...)
        c.output = {"reward": 1.0}
    tracing.disable()  # sends what is left

Calls are sent whole (``/v2/{project}/calls/complete``) in batches by a background thread, so
tracing never blocks a rollout; a failed send is logged and dropped. With tracing disabled,
:func:`call` and :func:`op` cost nothing and record nothing.
"""

from __future__ import annotations

import functools
import inspect
import json
import logging
import threading
import traceback
from collections.abc import Awaitable, Callable, Iterator, Mapping
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any, TypeVar, cast

from pydantic_core import to_jsonable_python

from .client import _links
from .client._observe import set_observer
from .client._transport import SyncTransport
from .client.client import AsyncClient, Client
from .client.traces import Traces
from .types.chat import ChatCompletion
from .types.traces import CallsCompleteReq, CompletedCall, uuid7
from .types.training import Trajectory

log = logging.getLogger("toolkit.tracing")
F = TypeVar("F", bound=Callable[..., Any])
COMPLETION_OP = "chat.completions.create"
ROLLOUT_OP = "rollout"
_current: ContextVar[Call | None] = ContextVar("toolkit_current_call", default=None)
_tracer: Tracer | None = None


def _now() -> datetime:
    return datetime.now(UTC)


def _jsonable(value: Any) -> Any:
    return to_jsonable_python(value, fallback=repr)


def _add_usage(into: dict[str, Any], usage: Mapping[str, Any]) -> None:
    """Sum per-model token counts into ``into``."""
    for model, counts in usage.items():
        slot = into.setdefault(model, {})
        for key, value in counts.items():
            if isinstance(value, int | float) and not isinstance(value, bool):
                slot[key] = slot.get(key, 0) + value


@dataclass
class Call:
    """A call being recorded; set ``output`` (and ``summary`` keys, or ``error`` for a failure that
    was handled) before it ends."""

    op_name: str
    inputs: dict[str, Any]
    id: str
    trace_id: str
    parent: Call | None = None
    attributes: dict[str, Any] = field(default_factory=dict)
    display_name: str | None = None
    output: Any = None
    summary: dict[str, Any] = field(default_factory=dict)
    error: BaseException | None = None
    started_at: datetime = field(default_factory=_now)
    adoptable: bool = False  # a rollout call that gather opened; the rollout inside it may take it over
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False)

    def _child_done(self, child_summary: Mapping[str, Any]) -> None:
        with self._lock:
            _add_usage(self.summary.setdefault("usage", {}), child_summary.get("usage") or {})
            counts = self.summary.setdefault("status_counts", {"success": 0, "error": 0})
            for key, value in (child_summary.get("status_counts") or {}).items():
                counts[key] = counts.get(key, 0) + value
            if not self.summary["usage"]:
                del self.summary["usage"]


class Tracer:
    """Records calls into ``project`` (``entity/project``) of the client's trace service."""

    def __init__(
        self, client: Client | AsyncClient, project: str, *, batch_size: int = 200, interval: float = 0.5
    ) -> None:
        self.project = project if "/" in project else f"toolkit/{project}"
        self._transport = SyncTransport(client.config)
        self._traces = Traces(self._transport)
        self._pending: list[CompletedCall] = []
        self._batch_size = batch_size
        self._interval = interval
        self._cond = threading.Condition()
        self._send_lock = threading.Lock()
        self._closed = False
        self._thread = threading.Thread(target=self._run, name="toolkit-tracing", daemon=True)
        self._thread.start()

    # ------------------------------------------------------------------ recording

    @contextmanager
    def call(
        self,
        op_name: str,
        inputs: Mapping[str, Any] | None = None,
        *,
        attributes: Mapping[str, Any] | None = None,
        display_name: str | None = None,
    ) -> Iterator[Call]:
        """A call around the block, child of the current call; an exception marks it failed."""
        parent = _current.get()
        call_id = uuid7()
        current = Call(
            op_name=op_name,
            inputs=_jsonable(dict(inputs or {})),
            id=call_id,
            trace_id=parent.trace_id if parent else call_id,
            parent=parent,
            attributes=_jsonable(dict(attributes or {})),
            display_name=display_name,
        )
        token = _current.set(current)
        error: BaseException | None = None
        try:
            yield current
        except BaseException as exc:
            error = exc
            raise
        finally:
            _current.reset(token)
            self._finish(current, error or current.error)

    def _finish(self, c: Call, error: BaseException | None) -> None:
        counts = c.summary.setdefault("status_counts", {"success": 0, "error": 0})
        counts["error" if error else "success"] = counts.get("error" if error else "success", 0) + 1
        exception = None
        if error is not None:
            exception = json.dumps(
                {
                    "type": type(error).__name__,
                    "message": str(error),
                    "traceback": traceback.format_exception(type(error), error, error.__traceback__)[-5:],
                }
            )
        record = CompletedCall(
            project_id=self.project,
            id=c.id,
            trace_id=c.trace_id,
            parent_id=c.parent.id if c.parent else None,
            op_name=c.op_name,
            display_name=c.display_name,
            started_at=c.started_at,
            ended_at=_now(),
            attributes=c.attributes,
            inputs=c.inputs,
            output=_jsonable(c.output),
            summary=_jsonable(c.summary),
            exception=exception,
        )
        if c.parent is not None:
            c.parent._child_done(c.summary)
        with self._cond:
            self._pending.append(record)
            if len(self._pending) >= self._batch_size or c.parent is None:
                self._cond.notify()

    def op(self, fn: F | None = None, *, name: str | None = None) -> Any:
        """Decorate a function (sync or async) so each call of it is a traced call."""

        def wrap(f: F) -> F:
            op_name = name or f.__qualname__
            signature = inspect.signature(f)

            def inputs(args: tuple[Any, ...], kwargs: dict[str, Any]) -> dict[str, Any]:
                try:
                    bound = signature.bind(*args, **kwargs)
                except TypeError:
                    return {"args": list(args), **kwargs}
                return {k: v for k, v in bound.arguments.items() if k != "self"}

            if inspect.iscoroutinefunction(f):

                @functools.wraps(f)
                async def awrapper(*args: Any, **kwargs: Any) -> Any:
                    with self.call(op_name, inputs(args, kwargs)) as c:
                        c.output = await f(*args, **kwargs)
                        return c.output

                return cast(F, awrapper)

            @functools.wraps(f)
            def wrapper(*args: Any, **kwargs: Any) -> Any:
                with self.call(op_name, inputs(args, kwargs)) as c:
                    c.output = f(*args, **kwargs)
                    return c.output

            return cast(F, wrapper)

        return wrap(fn) if fn is not None else wrap

    # ------------------------------------------------------------------ chat completions

    def _completion_done(self, c: Call, completion: ChatCompletion) -> None:
        c.output = completion.model_dump(mode="json", exclude_none=True)
        usage = completion.usage
        if usage is not None:
            c.summary["usage"] = {
                completion.model: {
                    "requests": 1,
                    "prompt_tokens": usage.prompt_tokens,
                    "completion_tokens": usage.completion_tokens,
                    "total_tokens": usage.total_tokens,
                }
            }

    def observe(self, request: dict[str, Any], run: Callable[[], ChatCompletion]) -> ChatCompletion:
        with self.call(COMPLETION_OP, request) as c:
            completion = run()
            self._completion_done(c, completion)
            return completion

    async def aobserve(self, request: dict[str, Any], run: Awaitable[ChatCompletion]) -> ChatCompletion:
        with self.call(COMPLETION_OP, request) as c:
            completion = await run
            self._completion_done(c, completion)
            return completion

    # ------------------------------------------------------------------ sending

    def _run(self) -> None:
        while True:
            with self._cond:
                if not self._pending and not self._closed:
                    self._cond.wait(self._interval)
                if self._closed and not self._pending:
                    return
            self.flush()

    def flush(self) -> None:
        """Send every finished call now."""
        with self._send_lock:
            with self._cond:
                batch, self._pending = self._pending, []
            for start in range(0, len(batch), self._batch_size):
                chunk = batch[start : start + self._batch_size]
                try:
                    self._traces.calls_complete(CallsCompleteReq(batch=chunk))
                except Exception:
                    log.warning("dropped %d traced calls", len(chunk), exc_info=True)

    def close(self) -> None:
        """Send what is left and stop the sender."""
        with self._cond:
            self._closed = True
            self._cond.notify()
        self._thread.join(timeout=30)
        self.flush()
        self._transport.close()


# ----------------------------------------------------------------------------- module API


def enable(client: Client | AsyncClient, project: str, **options: Any) -> Tracer:
    """Trace every chat completion of every toolkit client, and :func:`call` blocks, into ``project``."""
    global _tracer
    disable()
    _tracer = Tracer(client, project, **options)
    set_observer(_tracer)
    _links.trace_project(_tracer.project)  # an open tk.experiment links the project
    return _tracer


def disable() -> None:
    """Stop tracing (pending calls are sent first)."""
    global _tracer
    tracer, _tracer = _tracer, None
    if tracer is not None:
        set_observer(None)
        tracer.close()


def current_tracer() -> Tracer | None:
    return _tracer


def current_call() -> Call | None:
    """The innermost call being recorded in this context, if any."""
    return _current.get()


@contextmanager
def call(
    op_name: str,
    inputs: Mapping[str, Any] | None = None,
    *,
    attributes: Mapping[str, Any] | None = None,
    display_name: str | None = None,
) -> Iterator[Call | None]:
    """A call around the block when tracing is enabled (``None`` and no cost otherwise)."""
    tracer = _tracer
    if tracer is None:
        yield None
        return
    with tracer.call(op_name, inputs, attributes=attributes, display_name=display_name) as c:
        yield c


@contextmanager
def rollout_call(scenario: Any, *, attributes: Mapping[str, Any] | None = None) -> Iterator[Call | None]:
    """The call of one rollout (``None`` with tracing off). :func:`~toolkit.rollouts.gather` opens one
    around each rollout; a rollout that opens its own inside it (an agent's) takes that one over,
    adding its ``attributes``, instead of nesting a second rollout call."""
    current = _current.get()
    if current is not None and current.adoptable:
        current.adoptable = False
        current.attributes.update(_jsonable(dict(attributes or {})))
        yield current
        return
    with call(ROLLOUT_OP, inputs={"scenario": scenario}, attributes=attributes) as opened:
        yield opened


@contextmanager
def gathered_rollout_call(scenario: Any) -> Iterator[Call | None]:
    """The rollout call :func:`~toolkit.rollouts.gather` opens around one rollout function."""
    with call(ROLLOUT_OP, inputs={"scenario": scenario}) as opened:
        if opened is not None:
            opened.adoptable = True
        yield opened


def record_outcome(call: Call | None, outcome: Any) -> None:
    """What a rollout call ends with: a trajectory's reward and metrics, or the exception it raised
    (a no-op when ``call`` is ``None``, i.e. tracing is off)."""
    if call is None:
        return
    if isinstance(outcome, BaseException):
        call.error = outcome
    elif isinstance(outcome, Trajectory):
        call.output = {"reward": outcome.reward, "metrics": dict(outcome.metrics)}
    else:
        call.output = outcome


def op(fn: F | None = None, *, name: str | None = None) -> Any:
    """Decorator: each call of the function is a traced call while tracing is enabled."""

    def wrap(f: F) -> F:
        op_name = name or f.__qualname__
        if inspect.iscoroutinefunction(f):

            @functools.wraps(f)
            async def awrapper(*args: Any, **kwargs: Any) -> Any:
                tracer = _tracer
                if tracer is None:
                    return await f(*args, **kwargs)
                return await tracer.op(f, name=op_name)(*args, **kwargs)

            return cast(F, awrapper)

        @functools.wraps(f)
        def wrapper(*args: Any, **kwargs: Any) -> Any:
            tracer = _tracer
            return f(*args, **kwargs) if tracer is None else tracer.op(f, name=op_name)(*args, **kwargs)

        return cast(F, wrapper)

    return wrap(fn) if fn is not None else wrap
