"""What the training API works with, published by the app as ``app.state.training``."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Annotated

from fastapi import Depends, Request

from ..engine.model import BaseModelSpec
from ..store.artifacts import Artifacts
from ..store.logs import TrajectoryLogs
from ..store.models import Models
from .runner import TrainingRunner


@dataclass(frozen=True)
class TrainingContext:
    models: Models
    logs: TrajectoryLogs
    artifacts: Artifacts
    runner: TrainingRunner
    base_models: dict[str, BaseModelSpec]
    # called when checkpoints' weights are deleted: (model id, steps; None: the whole model)
    on_checkpoints_deleted: Callable[[str, list[int] | None], None] = lambda model_id, steps: None

    def checkpoints_deleted(self, model_id: str, steps: list[int] | None) -> None:
        if steps != []:
            self.on_checkpoints_deleted(model_id, steps)


def training_context(request: Request) -> TrainingContext:
    """The app's training context (a FastAPI dependency)."""
    ctx: TrainingContext = request.app.state.training
    return ctx


Training = Annotated[TrainingContext, Depends(training_context)]
