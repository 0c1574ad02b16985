"""Service routes: health (with the served base models and what their engines hold), the system check
and the servable-model list (``/v1/models``)."""

from __future__ import annotations

import dataclasses
import time

import torch
from fastapi import APIRouter, Depends
from fastapi.responses import JSONResponse

from .._version import __version__
from ..types.chat import ModelCard, ModelCardList
from ..types.service import AcceleratorCheck, ComponentCheck, Health, ServedBaseModel, SystemCheck
from .auth import current_user
from .state import Services, services
from .store.users import User

router = APIRouter()


@router.get("/v1/health", response_model=Health)
def health(svc: Services = Depends(services), _: User = Depends(current_user)) -> Health:
    """Up, the version, each base model (loaded or not, on which device, its memory) and the stalls
    the watchdog saw."""
    models = [
        ServedBaseModel(
            name=base.spec.name,
            aliases=list(base.spec.aliases),
            source=base.spec.source,
            **dataclasses.asdict(base.engine),
        )
        for base in svc.chat.served.status()
    ]
    return Health(version=__version__, models=models, stalls=svc.watchdog.stalls)


@router.get("/v1/system-check", response_model=SystemCheck, responses={503: {"model": SystemCheck}})
def system_check(svc: Services = Depends(services), _: User = Depends(current_user)) -> JSONResponse:
    """The database's integrity, the training job worker (``cpu_queue``) and the device the engines
    run on (``gpu_queue``); 503 when one of them fails."""
    probe = svc.job_worker.probe()
    cpu = ComponentCheck(success=probe.success, duration_ms=probe.duration_ms, error=probe.error)
    result = SystemCheck(
        api=True,
        database=database_check(svc),
        cpu_queue=cpu,
        gpu_queue=accelerator_check(svc.chat.served.default.status.device),
    )
    ok = result.database.success and result.cpu_queue.success and result.gpu_queue.success
    return JSONResponse(result.model_dump(mode="json"), status_code=200 if ok else 503)


def database_check(svc: Services) -> ComponentCheck:
    start = time.perf_counter()
    try:
        ok = svc.db.integrity_ok()
        error = None if ok else "integrity_check failed"
    except Exception as exc:  # a broken database is what this check reports
        ok, error = False, str(exc)
    return ComponentCheck(success=ok, duration_ms=(time.perf_counter() - start) * 1000, error=error)


def accelerator_check(device: str) -> AcceleratorCheck:
    """One small tensor operation on the device the engine really uses (its weights' device once
    loaded, e.g. ``cuda:0``)."""
    start = time.perf_counter()
    try:
        torch.ones(1, device=device).add_(1).item()
        error = None
    except Exception as exc:  # an unusable device is what this check reports
        error = f"{type(exc).__name__}: {exc}"
    return AcceleratorCheck(
        success=error is None,
        duration_ms=(time.perf_counter() - start) * 1000,
        error=error,
        device=device,
    )


@router.get("/v1/models", response_model=ModelCardList)
def list_models(svc: Services = Depends(services), user: User = Depends(current_user)) -> ModelCardList:
    """Base models under each of their names (``root``: the hub id or folder), adapters served by
    name (``root``: their folder, ``parent``: their base, as vLLM lists them), then each of the
    user's models on a served base (latest) and every checkpoint as ``name:step<N>``."""
    started = int(svc.settings.data_dir.stat().st_mtime)
    served = svc.chat.served
    cards = [
        ModelCard(id=name, created=started, root=spec.source, max_model_len=spec.max_model_len)
        for name, spec in served.specs.items()
    ]
    cards += [
        ModelCard(
            id=adapter.name,
            created=started,
            root=str(adapter.folder),
            parent=adapter.engine.spec.name,
            max_model_len=adapter.engine.spec.max_model_len,
        )
        for adapter in served.adapters.values()
    ]
    seen: set[str] = set()
    for checkpoint in svc.training.models.servable(user):
        created = int(checkpoint.created_at.timestamp())
        spec = served.specs.get(checkpoint.base_model)
        if spec is None:  # its base model is not served by this server
            continue
        max_len = spec.max_model_len
        if checkpoint.name not in seen:
            seen.add(checkpoint.name)
            cards.append(
                ModelCard(
                    id=checkpoint.name,
                    created=created,
                    root=checkpoint.base_model,
                    parent=checkpoint.base_model,
                    max_model_len=max_len,
                )
            )
        cards.append(
            ModelCard(
                id=f"{checkpoint.name}:step{checkpoint.step}",
                created=created,
                root=checkpoint.base_model,
                parent=checkpoint.name,
                max_model_len=max_len,
            )
        )
    return ModelCardList(data=cards)
