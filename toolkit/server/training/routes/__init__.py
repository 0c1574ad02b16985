"""The training API's routes, one module per resource."""

from fastapi import APIRouter

from . import artifacts, checkpoints, jobs, models, trajectories

router = APIRouter()
for module in (models, checkpoints, trajectories, artifacts, jobs):
    router.include_router(module.router)
