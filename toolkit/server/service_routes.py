"""Health, system check and the servable-model list."""

from __future__ import annotations

import time
from datetime import datetime

from fastapi import APIRouter, Depends
from fastapi.responses import JSONResponse

from .._version import __version__
from ..types.chat import ModelCard, ModelCardList
from ..types.training import ComponentCheck, Health, SystemCheck
from .auth import current_user
from .state import Services, services
from .store.users import User

router = APIRouter()


@router.get("/v1/health", response_model=Health)
def health(_: User = Depends(current_user)) -> Health:
    return Health(version=__version__)


@router.get("/v1/system-check", response_model=SystemCheck, responses={503: {"model": SystemCheck}})
def system_check(svc: Services = Depends(services), _: User = Depends(current_user)) -> JSONResponse:
    start = time.perf_counter()
    try:
        ok = svc.db.integrity_ok()
        database = ComponentCheck(success=ok, error=None if ok else "integrity_check failed")
    except Exception as exc:  # a broken database is what this endpoint reports
        database = ComponentCheck(success=False, error=str(exc))
    database.duration_ms = (time.perf_counter() - start) * 1000
    probe = svc.jobs.probe()
    cpu = ComponentCheck(success=probe.success, duration_ms=probe.duration_ms, error=probe.error)
    gpu = ComponentCheck(success=True, error=None)
    result = SystemCheck(api=True, database=database, cpu_queue=cpu, gpu_queue=gpu)
    status = 200 if database.success and cpu.success else 503
    return JSONResponse(result.model_dump(mode="json"), status_code=status)


@router.get("/v1/models", response_model=ModelCardList)
def list_models(svc: Services = Depends(services), user: User = Depends(current_user)) -> ModelCardList:
    """Base models, then each of the user's models (latest) and every checkpoint as ``name:step<N>``."""
    started = int(svc.settings.data_dir.stat().st_mtime)
    cards = [
        ModelCard(id=name, created=started, root=name, max_model_len=spec.max_model_len)
        for name, spec in svc.base_models.items()
    ]
    rows = svc.db.conn.execute(
        "SELECT m.name, m.base_model, m.created_at, c.step, c.created_at AS c_created FROM models m"
        " JOIN checkpoints c ON c.model_id = m.id WHERE m.user_id = ? ORDER BY m.created_at, c.step",
        (user.id,),
    ).fetchall()
    seen: set[str] = set()
    for row in rows:
        created = int(datetime.fromisoformat(row["c_created"]).timestamp())
        max_len = (
            svc.base_models[row["base_model"]].max_model_len if row["base_model"] in svc.base_models else None
        )
        if row["name"] not in seen:
            seen.add(row["name"])
            cards.append(
                ModelCard(
                    id=row["name"],
                    created=created,
                    root=row["base_model"],
                    parent=row["base_model"],
                    max_model_len=max_len,
                )
            )
        cards.append(
            ModelCard(
                id=f"{row['name']}:step{row['step']}",
                created=created,
                root=row["base_model"],
                parent=row["name"],
                max_model_len=max_len,
            )
        )
    return ModelCardList(data=cards)
