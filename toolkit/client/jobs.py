"""Handles of running training jobs: refresh, follow the events as they come, wait with a progress bar.

``client.training_jobs.create(...)`` and ``client.sft_training_jobs.create(...)`` return one; it is
also the ``{id}`` the server answered (a :class:`TrainingJobCreated`). ``wait()`` says what the user
must know in one line each: a :class:`TrainingJobWarning` per ``warning`` event (nothing trained, stale
groups), "queued behind N job(s)" on its progress line, and on an interrupt (Ctrl-C, a notebook's
stop button) a :class:`TrainingJobInterrupted` saying that the job keeps running and how to cancel it.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
import warnings
from collections.abc import AsyncIterator, Iterator, Sequence
from typing import Any

from pydantic import PrivateAttr

from .._progress import ProgressBar
from ..types.job_warnings import DUPLICATE_JOB_NAMES, STALE_GROUPS, group_versions, stale_groups
from ..types.training import TERMINAL_EVENTS, Checkpoint, TrainingJob, TrainingJobCreated, TrainingJobEvent
from ._errors import APIConnectionError, ConflictError, OneLine
from ._pagination import AsyncPaginator, CursorPage
from ._transport import AsyncTransport, SyncTransport
from .training_ops import op_cancel_job, op_checkpoint_page, op_event_page, op_get_job

PAGE = 100
RECONNECT_TIMEOUT = 120.0  # how long a followed job may be unreachable (e.g. a server restart)
LONG_POLL = 10.0  # how long a server with this toolkit's extensions may hold a followed job's empty page


def _long_poll(transport: SyncTransport | AsyncTransport, follow: bool) -> float | None:
    """The ``wait`` of each request while following a job on a deployment with the extensions."""
    return LONG_POLL if follow and transport.config.deployment.extensions else None


def _pause(wait: float | None, got_events: bool, seconds: float) -> bool:
    """Whether to sleep before the next request, after one that took ``seconds``: always when
    polling; after a long poll only when it came back early and empty (a deployment that ignores
    ``wait``, or a lost connection)."""
    return wait is None or not (got_events or seconds >= wait)


class TrainingJobFailed(RuntimeError):
    """A job ended with ``training_failed``; ``message`` is the server's ``error_message``."""

    def __init__(self, job_id: str, message: str) -> None:
        super().__init__(f"Training job {job_id} failed: {message}")
        self.job_id = job_id
        self.message = message


class TrainingJobWarning(UserWarning):
    """A training job's warning (its ``warning`` event, or the client's check at ``create``): the job
    runs, but not as the user probably expects (nothing trained, groups sampled from an older policy)."""


class TrainingJobInterrupted(OneLine, KeyboardInterrupt):
    """``wait()`` was interrupted; the job itself keeps running on the server. Shown as one line in
    IPython, without a traceback (the interrupt is the user's own, not an error of the toolkit)."""

    def __init__(self, job_id: str) -> None:
        super().__init__(
            f"Stopped waiting for training job {job_id}; it keeps running on the server. Cancel it with"
            f" handle.cancel() (or client.training_jobs.cancel({job_id!r})), or wait again with"
            " handle.wait()."
        )
        self.job_id = job_id


class DuplicateTrainingJob(ConflictError):
    """A create refused because job ``job_id`` of the same model, with this same request, is still
    queued or running (a re-run cell would train the model twice: docs/interfaces.md)."""

    def __init__(self, refused: ConflictError, job_id: str, status: str) -> None:
        super().__init__(
            f"training job {job_id} ({status}) has this same model and request; another would train"
            f" the model on it again. Follow it with client.training_jobs.handle({job_id!r}).wait(),"
            f" cancel it with client.training_jobs.cancel({job_id!r}), or pass allow_duplicate=True"
            " to start a second one.",
            response=refused.response,
            body=refused.body,
        )
        self.job_id = job_id


@contextlib.contextmanager
def refused_twin() -> Iterator[None]:
    """Around a job create: the server's 409 naming a queued or running twin, as a
    :class:`DuplicateTrainingJob`."""
    try:
        yield
    except ConflictError as refused:
        detail = refused.body.get("detail") if isinstance(refused.body, dict) else None
        twin = DUPLICATE_JOB_NAMES.match(detail) if isinstance(detail, str) else None
        if twin is None:
            raise
        raise DuplicateTrainingJob(refused, twin["job_id"], twin["status"]) from None


def _warn(job_id: str, message: str, stacklevel: int = 3) -> None:
    """One warning line, attributed to the user's call (``wait()``, or ``create`` with stacklevel 4)."""
    warnings.warn(f"training job {job_id}: {message}", TrainingJobWarning, stacklevel=stacklevel)


def stale(transport: SyncTransport, model_id: str, groups: Sequence[Any]) -> str | None:
    """Before an RL job is created: the stale-groups line when its groups (wire JSON) were sampled from
    a step older than the model's latest checkpoint (one request, made only when the trajectories
    record their step)."""
    versions = group_versions(groups)
    if all(v is None for v in versions):
        return None
    latest = CursorPage.first(transport, op_checkpoint_page(model_id, 1, "desc")).data
    return stale_groups(versions, latest[0].step) if latest else None


async def stale_async(transport: AsyncTransport, model_id: str, groups: Sequence[Any]) -> str | None:
    versions = group_versions(groups)
    if all(v is None for v in versions):
        return None
    latest = (await AsyncPaginator(transport, op_checkpoint_page(model_id, 1, "desc"))).data
    return stale_groups(versions, latest[0].step) if latest else None


def _failure(job_id: str, event: TrainingJobEvent) -> TrainingJobFailed:
    return TrainingJobFailed(job_id, str(event.data.get("error_message") or "unknown error"))


def _unlisted(job_id: str, checkpoint_id: str) -> TrainingJobFailed:
    return TrainingJobFailed(job_id, f"checkpoint {checkpoint_id} is not listed (deleted?)")


def _model_of(job_id: str, model_id: str | None) -> str:
    if model_id is None:  # the hosted API's job record is only ``{id}``
        raise ValueError(f"job {job_id}: the deployment does not say its model; pass model_id to handle()")
    return model_id


class _Progress:
    """A tqdm.auto bar over the job's gradient steps: "queued behind N job(s)" while the job waits
    (from its ``queued`` events), then sized when ``training_started`` arrives."""

    def __init__(self, enabled: bool, job_id: str) -> None:
        self.enabled = enabled
        self.job_id = job_id
        self.bar: Any = None

    def update(self, event: TrainingJobEvent) -> None:
        if not self.enabled:
            return
        desc = f"train {self.job_id[:8]}"
        if event.type == "queued":
            self.bar = self.bar or ProgressBar(0, desc, "step")
            self.bar.bar.set_description(f"{desc} queued behind {event.data.get('ahead')} job(s)")
        elif event.type == "training_started":
            total = int(event.data.get("num_sequences", 0))
            if self.bar is None:
                self.bar = ProgressBar(total, desc, "step")
            else:
                self.bar.bar.reset(total=total)
                self.bar.bar.set_description(desc)
        elif event.type == "gradient_step" and self.bar is not None:
            shown = {k: event.data[k] for k in ("loss", "reward") if k in event.data}
            self.bar.update(1, **{k: f"{float(v):.4g}" for k, v in shown.items()})
        elif event.type in TERMINAL_EVENTS:
            self.close()

    def close(self) -> None:
        if self.bar is not None:
            self.bar.close()
            self.bar = None


class TrainingJobHandle(TrainingJobCreated):
    """A training job being run by the server (sync)."""

    _t: SyncTransport = PrivateAttr()
    _model_id: str | None = PrivateAttr(default=None)
    _warned: set[str] = PrivateAttr(default_factory=set)  # warning codes already told at create

    @classmethod
    def bind(cls, job_id: str, transport: SyncTransport, model_id: str | None = None) -> TrainingJobHandle:
        handle = cls(id=job_id)
        handle._t, handle._model_id = transport, model_id
        return handle

    def refresh(self) -> TrainingJob:
        """The job's current state (status, steps, error)."""
        job = self._t.run(op_get_job(self.id))
        self._model_id = job.model_id or self._model_id  # the hosted record is only {id}
        return job

    def cancel(self) -> TrainingJob:
        return self._t.run(op_cancel_job(self.id))

    def told_stale(self, message: str) -> None:
        """At ``create``: warn that the groups are stale; ``wait()`` then leaves the server's warning out."""
        self._warned.add(STALE_GROUPS)
        _warn(self.id, message, stacklevel=4)

    def events(
        self,
        *,
        after: str | None = None,
        poll_interval: float = 0.5,
        follow: bool = True,
        reconnect_timeout: float = RECONNECT_TIMEOUT,
    ) -> Iterator[TrainingJobEvent]:
        """Every event after ``after``, as it arrives; ends after the terminal event (or, without
        ``follow``, when no more events are available now). Following the local server (or any
        deployment with this toolkit's extensions), each request waits there for the next event (a
        long poll), so an event arrives as soon as it is written; elsewhere the events are polled every
        ``poll_interval`` seconds. While following, a lost connection is retried for up to
        ``reconnect_timeout`` seconds and polling resumes from the last event."""
        wait = _long_poll(self._t, follow)
        lost_since: float | None = None
        while True:
            asked, got = time.monotonic(), False
            try:
                for page in CursorPage.first(self._t, op_event_page(self.id, PAGE, wait), after).iter_pages():
                    lost_since = None
                    for event in page.data:
                        after, got = event.id, True
                        yield event
                        if event.type in TERMINAL_EVENTS:
                            return
            except APIConnectionError:
                lost_since = lost_since or time.monotonic()
                if not follow or time.monotonic() - lost_since > reconnect_timeout:
                    raise
            else:
                if not follow:
                    return
            if _pause(wait, got, time.monotonic() - asked):
                time.sleep(poll_interval)

    def wait(self, *, progress: bool = True, poll_interval: float = 0.5) -> Checkpoint:
        """Follow the job to its end; returns the new checkpoint, raises :class:`TrainingJobFailed`,
        warns (:class:`TrainingJobWarning`) once per ``warning`` event, and on an interrupt raises
        :class:`TrainingJobInterrupted` (the job keeps running)."""
        bar = _Progress(progress, self.id)
        try:
            for event in self.events(poll_interval=poll_interval):
                bar.update(event)
                if event.type == "warning" and event.data.get("code") not in self._warned:
                    _warn(self.id, str(event.data.get("message")))
                if event.type == "training_failed":
                    raise _failure(self.id, event)
                if event.type == "training_ended":
                    return self._checkpoint(str(event.data["checkpoint_id"]))
        except KeyboardInterrupt:
            raise TrainingJobInterrupted(self.id) from None
        finally:
            bar.close()
        raise TrainingJobFailed(self.id, "the event stream ended without a terminal event")

    def _checkpoint(self, checkpoint_id: str) -> Checkpoint:
        model_id = _model_of(self.id, self._model_id or self.refresh().model_id)
        for checkpoint in CursorPage.first(self._t, op_checkpoint_page(model_id, PAGE, "desc")):
            if checkpoint.id == checkpoint_id:
                return checkpoint
        raise _unlisted(self.id, checkpoint_id)


class AsyncTrainingJobHandle(TrainingJobCreated):
    """A training job being run by the server (async twin of :class:`TrainingJobHandle`)."""

    _t: AsyncTransport = PrivateAttr()
    _model_id: str | None = PrivateAttr(default=None)
    _warned: set[str] = PrivateAttr(default_factory=set)

    @classmethod
    def bind(
        cls, job_id: str, transport: AsyncTransport, model_id: str | None = None
    ) -> AsyncTrainingJobHandle:
        handle = cls(id=job_id)
        handle._t, handle._model_id = transport, model_id
        return handle

    async def refresh(self) -> TrainingJob:
        job = await self._t.run(op_get_job(self.id))
        self._model_id = job.model_id or self._model_id  # the hosted record is only {id}
        return job

    async def cancel(self) -> TrainingJob:
        return await self._t.run(op_cancel_job(self.id))

    def told_stale(self, message: str) -> None:
        self._warned.add(STALE_GROUPS)
        _warn(self.id, message, stacklevel=4)

    async def events(
        self,
        *,
        after: str | None = None,
        poll_interval: float = 0.5,
        follow: bool = True,
        reconnect_timeout: float = RECONNECT_TIMEOUT,
    ) -> AsyncIterator[TrainingJobEvent]:
        wait = _long_poll(self._t, follow)
        lost_since: float | None = None
        while True:
            asked, got = time.monotonic(), False
            try:
                first = await AsyncPaginator(self._t, op_event_page(self.id, PAGE, wait), after)
                async for page in first.iter_pages():
                    lost_since = None
                    for event in page.data:
                        after, got = event.id, True
                        yield event
                        if event.type in TERMINAL_EVENTS:
                            return
            except APIConnectionError:
                lost_since = lost_since or time.monotonic()
                if not follow or time.monotonic() - lost_since > reconnect_timeout:
                    raise
            else:
                if not follow:
                    return
            if _pause(wait, got, time.monotonic() - asked):
                await asyncio.sleep(poll_interval)

    async def wait(self, *, progress: bool = True, poll_interval: float = 0.5) -> Checkpoint:
        bar = _Progress(progress, self.id)
        try:
            async for event in self.events(poll_interval=poll_interval):
                bar.update(event)
                if event.type == "warning" and event.data.get("code") not in self._warned:
                    _warn(self.id, str(event.data.get("message")))
                if event.type == "training_failed":
                    raise _failure(self.id, event)
                if event.type == "training_ended":
                    return await self._checkpoint(str(event.data["checkpoint_id"]))
        except KeyboardInterrupt:
            raise TrainingJobInterrupted(self.id) from None
        finally:
            bar.close()
        raise TrainingJobFailed(self.id, "the event stream ended without a terminal event")

    async def _checkpoint(self, checkpoint_id: str) -> Checkpoint:
        model_id = _model_of(self.id, self._model_id or (await self.refresh()).model_id)
        async for checkpoint in AsyncPaginator(self._t, op_checkpoint_page(model_id, PAGE, "desc")):
            if checkpoint.id == checkpoint_id:
                return checkpoint
        raise _unlisted(self.id, checkpoint_id)
