"""The services one server process holds, reachable from every route as ``request.app.state.services``."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from fastapi import Request

from .engine.model import BaseModelSpec
from .settings import Settings
from .store.artifacts import Artifacts
from .store.db import Database
from .store.logs import TrajectoryLogs
from .store.models import Models
from .store.users import Users
from .training.job_worker import JobWorker


@dataclass
class Services:
    settings: Settings
    db: Database
    users: Users
    models: Models
    logs: TrajectoryLogs
    artifacts: Artifacts
    jobs: JobWorker
    base_models: dict[str, BaseModelSpec]
    # Filled in by the engine, trainer and trace service when they start.
    engine: Any = None
    trainer: Any = None
    traces: Any = None
    usage: Any = None  # chat usage per team/project and model (store.usage.ChatUsage)

    @property
    def checkpoints_dir(self) -> Path:
        return self.settings.data_dir / "checkpoints"


def services(request: Request) -> Services:
    svc: Services = request.app.state.services
    return svc
