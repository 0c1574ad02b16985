"""One prepared request on the engine: its events, delivered on the caller's event loop."""

from __future__ import annotations

from collections.abc import AsyncIterator

from ..engine.engine import Engine
from ..engine.events import Event, Failed, Finished
from ..errors import NotFound
from .context import ChatContext
from .errors import EngineError
from .prepare import Prepared


async def generate(chat: ChatContext, prep: Prepared) -> AsyncIterator[Event]:
    """The engine's events of ``prep`` until every choice finished; the request is cancelled if the
    consumer stops early. A failure is raised: 404 if the checkpoint went away, else a 500."""
    engine: Engine = prep.engine
    queue = engine.submit(prep.job)
    remaining = len(prep.job.params)
    try:
        while remaining:
            event = await queue.get()
            prep.job.took()
            if isinstance(event, Failed):
                if isinstance(event.error, FileNotFoundError):  # checkpoint deleted since it was resolved
                    raise NotFound(f"The model `{prep.model}` does not exist.", param="model")
                raise EngineError("Internal server error")
            if isinstance(event, Finished):
                remaining = 0 if event.last else remaining - 1
            yield event
    finally:
        engine.release(prep.job, cancel=remaining > 0)
