"""``client.traces``: every operation of the Weave trace-server contract on one object, sync or async."""

from __future__ import annotations

from .calls import AsyncCalls, Calls
from .completions import AsyncCompletions, Completions
from .costs import AsyncCosts, Costs
from .feedback import AsyncFeedback, Feedback
from .files import AsyncFiles, Files
from .objects import AsyncObjects, Objects
from .otel import AsyncOtel, Otel
from .refs import AsyncRefs, Refs
from .service import AsyncService, Service
from .tables import AsyncTables, Tables
from .threads import AsyncThreads, Threads


class Traces(Service, Calls, Objects, Tables, Refs, Files, Costs, Feedback, Threads, Completions, Otel):
    """The trace service at ``trace_url`` (``<base_url>/traces``)."""


class AsyncTraces(
    AsyncService,
    AsyncCalls,
    AsyncObjects,
    AsyncTables,
    AsyncRefs,
    AsyncFiles,
    AsyncCosts,
    AsyncFeedback,
    AsyncThreads,
    AsyncCompletions,
    AsyncOtel,
):
    """The asynchronous twin of :class:`Traces`."""
