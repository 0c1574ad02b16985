"""Training API: trajectory logging (``/log``, metrics per split and step) and the logged trajectories."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Query

from ....types.training import LogRequest, LogResponse
from ...auth import CurrentUser
from ..context import Training

router = APIRouter(prefix="/v1/preview/models")
SQLITE_INT_MAX = 2**63 - 1  # larger query integers would overflow SQLite's INTEGER (a 500)


@router.post("/{model_id}/log", response_model=LogResponse)
def log_trajectories(
    model_id: str,
    req: LogRequest,
    training: Training,
    user: CurrentUser,
) -> LogResponse:
    training.models.get(user, model_id)
    return training.logs.log(model_id, req)


@router.get("/{model_id}/trajectories")
def list_trajectories(
    model_id: str,
    training: Training,
    user: CurrentUser,
    split: str | None = None,
    step: Annotated[int | None, Query(ge=0, le=SQLITE_INT_MAX)] = None,
    limit: Annotated[int, Query(ge=1, le=1000)] = 100,
    offset: Annotated[int, Query(ge=0, le=SQLITE_INT_MAX)] = 0,
) -> list[dict[str, object]]:
    """Extension: logged trajectories, newest step first."""
    training.models.get(user, model_id)
    return training.logs.query(model_id, split=split, step=step, limit=limit, offset=offset)
