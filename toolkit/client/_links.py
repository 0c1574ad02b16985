"""The hook through which an open experiment (:mod:`toolkit.experiments`) sees the models, jobs,
artifacts, trace projects and (not streamed) chat completions created in its context. The client
layer cannot import experiments (they sit above it), so the experiment sets itself here; with none
open nothing is recorded."""

from __future__ import annotations

import contextvars
from typing import Any, Literal, Protocol

Link = Literal["model", "rl_job", "sft_job", "artifact", "chat"]


class LinkSink(Protocol):
    def linked(self, link: Link, request: Any, result: Any, config: Any) -> None:
        """``request``: the operation's JSON body (an artifact's: ``{filename: bytes}``); ``config``:
        the transport's :class:`~toolkit.client._transport.Config`."""

    def trace_project(self, project: str) -> None: ...


active: contextvars.ContextVar[LinkSink | None] = contextvars.ContextVar("toolkit_experiment", default=None)


def saw(link: Link | None, json: Any, files: Any, result: Any, config: Any) -> None:
    """After an operation succeeded: tell the open experiment, if the operation is one it links
    (``json``: its body; ``files``: its multipart files)."""
    sink = active.get()
    if sink is None or link is None:
        return
    request = {name: data for _, (name, data, _) in files or []} if link == "artifact" else json
    sink.linked(link, request, result, config)


def trace_project(project: str) -> None:
    """Tracing into ``project`` started (``toolkit.tracing.enable``)."""
    sink = active.get()
    if sink is not None:
        sink.trace_project(project)
