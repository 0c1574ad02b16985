"""The services one server process holds, reachable from every route as ``request.app.state.services``."""

from __future__ import annotations

from dataclasses import dataclass

from fastapi import Request

from .engine.engine import Engine
from .engine.model import BaseModelSpec
from .settings import Settings
from .store.artifacts import Artifacts
from .store.db import Database
from .store.logs import TrajectoryLogs
from .store.models import Models
from .store.usage import ChatUsage
from .store.users import Users
from .traces.service import TraceService
from .training.job_worker import JobWorker
from .training.runner import TrainingRunner


@dataclass(frozen=True)
class Services:
    """Everything a request may use; all of it is built and started before the first request."""

    settings: Settings
    db: Database
    users: Users
    models: Models
    logs: TrajectoryLogs
    artifacts: Artifacts
    usage: ChatUsage  # chat usage per team/project and model
    base_models: dict[str, BaseModelSpec]
    engine: Engine
    job_worker: JobWorker
    trainer: TrainingRunner
    traces: TraceService


def services(request: Request) -> Services:
    svc: Services = request.app.state.services
    return svc
