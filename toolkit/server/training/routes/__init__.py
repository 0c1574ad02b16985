"""The training API's routes, one module per resource."""

from fastapi import APIRouter

from . import artifacts, checkpoints, jobs, models, records, trajectories

router = APIRouter()
for module in (models, checkpoints, records, trajectories, artifacts, jobs):
    router.include_router(module.router)
