"""Training API: trajectory logging (``/log``, metrics per split and step) and the stored
trajectories (an extension: filters and cursor pages, docs/interfaces.md)."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Query, Response

from ....types.training import LogRequest, LogResponse
from ....types.trajectories import StoredTrajectory
from ...auth import CurrentUser
from ...errors import Unprocessable
from ...store.logs import TrajectoryFilter
from ..context import Training

router = APIRouter(prefix="/v1/preview/models")
SQLITE_INT_MAX = 2**63 - 1  # larger query integers would overflow SQLite's INTEGER (a 500)
Step = Annotated[int | None, Query(ge=0, le=SQLITE_INT_MAX)]
Reward = Annotated[float | None, Query(allow_inf_nan=False)]
Flag = Annotated[bool, Query()]


@router.post("/{model_id}/log", response_model=LogResponse)
def log_trajectories(
    model_id: str,
    req: LogRequest,
    training: Training,
    user: CurrentUser,
) -> LogResponse:
    training.models.get(user, model_id)
    return training.logs.log(model_id, req)


def _range(low: float | None, high: float | None, name: str) -> None:
    if low is not None and high is not None and low > high:
        raise Unprocessable(["query", f"{name}_min"], f"{name}_min ({low}) is above {name}_max ({high})")


@router.get("/{model_id}/trajectories", response_model=list[StoredTrajectory])
def list_trajectories(
    model_id: str,
    training: Training,
    user: CurrentUser,
    split: str | None = None,
    step: Step = None,
    step_min: Step = None,
    step_max: Step = None,
    reward_min: Reward = None,
    reward_max: Reward = None,
    zero_std_only: Flag = False,
    truncated_only: Flag = False,
    errors_only: Flag = False,
    search: Annotated[str | None, Query(min_length=1, max_length=500)] = None,
    prompt_key: Annotated[str | None, Query(pattern=r"^[0-9a-f]{32}$")] = None,
    after: Annotated[str | None, Query(description="id of the last trajectory of the previous page")] = None,
    limit: Annotated[int, Query(ge=1, le=1000)] = 100,
    offset: Annotated[int, Query(ge=0, le=SQLITE_INT_MAX)] = 0,
) -> Response:
    """Extension: stored trajectories, newest step first, then in the order they were stored. A page
    is a JSON array; the next page starts ``after`` the last item's id (shorter than ``limit``: the
    last page)."""
    training.models.get(user, model_id)
    _range(step_min, step_max, "step")
    _range(reward_min, reward_max, "reward")
    cursor = None
    if after is not None:
        position = (
            training.logs.step_of(model_id, int(after)) if after.isdigit() and len(after) < 19 else None
        )
        if position is None:
            raise Unprocessable(["query", "after"], f"{after!r} is not the id of a trajectory of this model")
        cursor = (position, int(after))
    where = TrajectoryFilter(
        split=split,
        step=step,
        step_min=step_min,
        step_max=step_max,
        reward_min=reward_min,
        reward_max=reward_max,
        zero_std_only=zero_std_only,
        truncated_only=truncated_only,
        errors_only=errors_only,
        search=search,
        prompt_key=prompt_key,
    )
    page = training.logs.query_json(model_id, where, limit=limit, offset=offset, after=cursor)
    return Response(page, media_type="application/json")
