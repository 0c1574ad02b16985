"""Everything one server process holds, built by the app before the first request.

The app publishes each room's part on ``app.state`` (``users``, ``chat``, ``training``, ``traces``,
``max_body_bytes``) and each room reads only its own part through its accessor (``chat_context``,
``training_context``, the trace routes' ``store``, ``auth.current_user``), so no room imports this
module: only the app and the service routes, which sit above the rooms, do.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from fastapi import Request

from .chat.context import ChatContext
from .settings import Settings
from .store.db import Database
from .store.users import Users
from .traces.service import TraceService
from .training.context import TrainingContext
from .training.job_worker import JobWorker
from .watchdog import Watchdog


@dataclass(frozen=True)
class Services:
    settings: Settings
    db: Database
    users: Users
    chat: ChatContext
    training: TrainingContext
    job_worker: JobWorker
    traces: TraceService
    watchdog: Watchdog

    def publish(self, state: Any) -> None:
        """Put each room's part on the app's ``state`` (a starlette ``State``)."""
        state.services = self
        state.users = self.users
        state.chat = self.chat
        state.training = self.training
        state.traces = self.traces
        state.max_body_bytes = self.settings.max_body_bytes


def services(request: Request) -> Services:
    """All of it (a FastAPI dependency of the service routes)."""
    svc: Services = request.app.state.services
    return svc
