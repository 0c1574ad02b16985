"""The embedded server: one FastAPI app serving the training API, chat completion and trace service."""

from __future__ import annotations

import asyncio
import gc
import json
import logging
import os
import socket
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager, suppress
from pathlib import Path
from types import FrameType

import uvicorn
from fastapi import FastAPI

from .._version import __version__
from . import diagnostics, service_routes
from .body_size_limit import BodySizeLimit
from .chat import routes as chat
from .chat.context import ChatContext
from .chat.external import ExternalInference, inference_url
from .engine.device import pick_placement
from .engine.kv_budget import fit_context, kv_pool_for
from .engine.model import BUILTIN_NAMES, BaseModelSpec, builtin_spec, resolve_base
from .engine.served import ServedModels
from .errors import install_handlers
from .settings import Settings
from .state import Services
from .store.artifacts import Artifacts
from .store.db import Database
from .store.jobs import Jobs
from .store.logs import TrajectoryLogs
from .store.migrations import MIGRATIONS
from .store.models import Models
from .store.usage import ChatUsage
from .store.users import LOCAL_USER, Users
from .traces import routes as trace_routes
from .traces import wandb_api
from .traces.service import TraceService
from .training import routes as training_routes
from .training.context import TrainingContext
from .training.job_worker import JobWorker
from .training.log_metrics import rollup
from .training.runner import TrainingRunner
from .watchdog import Watchdog

log = logging.getLogger("toolkit.server")


def base_models(settings: Settings) -> list[BaseModelSpec]:
    """The specs of the served base models (hub ids found in the cache or downloaded, a fetched
    built-in model fetched; nothing is loaded yet): ``--base-model`` values, else both tiny built-in
    models, the pre-trained default first. A ``BaseModelError`` says why one cannot be served."""
    if not settings.base_models:
        return [builtin_spec(settings.data_dir, name) for name in BUILTIN_NAMES]
    return [resolve_base(source, settings.data_dir) for source in settings.base_models]


def open_services(settings: Settings, bases: list[BaseModelSpec] | None = None) -> Services:
    """Open the stores, start the engines (each loads its base model on first use), the job worker
    and the training runner; the watchdog is started by the app, on its event loop."""
    settings.data_dir.mkdir(parents=True, exist_ok=True)
    placement = pick_placement(settings.device)  # serving and training on the same device,
    serving = pick_placement(settings.device, settings.dtype)  # the served weights in --dtype
    served = ServedModels(
        bases if bases is not None else base_models(settings),
        settings.lora_modules,
        placement=serving,
        max_num_seqs=settings.max_num_seqs,
        priority_scheduling=settings.priority_scheduling,
        enable_prefix_caching=settings.enable_prefix_caching,
        enforce_eager=settings.enforce_eager,
        lora_bytes=settings.max_lora_bytes,
        kv_cache_bytes=settings.kv_cache_bytes,
        max_model_len=settings.max_model_len,
    )
    db = Database(settings.db_path, MIGRATIONS)
    models = Models(db)
    logs = TrajectoryLogs(db, models, rollup)
    base_models_by_name = served.specs
    served.start()
    job_worker = JobWorker()
    url, key = settings.inference_url, settings.inference_api_key
    external = ExternalInference(url, key) if url else None
    svc = Services(
        settings=settings,
        db=db,
        users=Users(db),
        chat=ChatContext(
            served=served,
            models=models,
            usage=ChatUsage(db),
            trust_request_chat_template=settings.trust_request_chat_template,
            external=external,
            request_timeout=settings.request_timeout,
        ),
        training=TrainingContext(
            models=models,
            logs=logs,
            artifacts=Artifacts(db, settings.data_dir / "artifacts"),
            runner=TrainingRunner(
                db,
                models,
                Jobs(db),
                logs,
                job_worker,
                base_models_by_name,
                settings.checkpoints_dir,
                placement,
                on_checkpoint=external.load_checkpoint if external else None,
            ),
            base_models=base_models_by_name,
            **({"on_checkpoints_deleted": external.unload} if external else {}),
        ),
        job_worker=job_worker,
        traces=TraceService(settings.data_dir / "traces.db"),
        watchdog=Watchdog(served, settings.stall_warning_seconds),
    )
    ensure_local_key(svc)
    return svc


def ensure_local_key(svc: Services) -> str:
    """The local user's key: ``--api-key`` if given, else the one in the key file, else a new one."""
    settings = svc.settings
    user = svc.users.get_or_create(LOCAL_USER)
    key = settings.api_key
    if key is None and settings.key_file.exists():
        key = settings.key_file.read_text().strip() or None
    key = svc.users.create_key(user, key)
    if not settings.key_file.exists() or settings.key_file.read_text().strip() != key:
        fd = os.open(settings.key_file, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(fd, "w") as fh:
            fh.write(key + "\n")
    return key


def create_app(settings: Settings, bases: list[BaseModelSpec] | None = None) -> FastAPI:
    """The app; ``bases``: the base models' specs if already resolved (else at start-up)."""

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        svc = open_services(settings, bases)
        svc.publish(app.state)
        svc.watchdog.start(asyncio.get_running_loop())
        # Objects built at start-up are never scanned again, and request-sized bursts of objects (a
        # batch of 1000 trace calls) trigger fewer collections: ingest runs ~2.5x faster.
        gc.freeze()
        gc.set_threshold(10_000, 10, 10)
        if settings.url:
            announce(settings.server_file, {"url": settings.url, "pid": os.getpid(), "version": __version__})
        try:
            yield
        finally:
            withdraw(settings.server_file)
            svc.watchdog.stop()
            svc.chat.served.stop()
            svc.training.runner.stop()
            svc.job_worker.stop()
            svc.traces.close()
            svc.db.close()
            if svc.chat.external is not None:
                await svc.chat.external.aclose()

    app = FastAPI(title="toolkit local server", version=__version__, lifespan=lifespan)
    install_handlers(app)
    app.include_router(service_routes.router)
    app.include_router(diagnostics.router)
    app.include_router(training_routes.router)
    app.include_router(chat.router)
    app.include_router(trace_routes.router)
    app.include_router(wandb_api.router)
    app.add_middleware(BodySizeLimit, max_bytes=settings.max_body_bytes)
    return app


def serve(settings: Settings) -> None:
    """Bind (port 0 picks a free port) and serve until stopped; ``server.json`` names the URL while
    the server is ready (written after start-up, removed at shutdown). The base models, the device and
    the inference URL are checked before binding (and the KV cache budget against the context length):
    a ``BaseModelError``, ``DeviceError`` or
    ``InferenceUrlError`` says what is wrong."""
    settings.data_dir.mkdir(parents=True, exist_ok=True)
    placement = pick_placement(settings.device, settings.dtype)
    if settings.inference_url:
        settings.inference_url = inference_url(settings.inference_url)
    bases = base_models(settings)
    for spec in bases:  # a context the KV cache cannot hold is one line, before binding
        pool = kv_pool_for(spec, placement, settings.kv_cache_bytes)
        fit_context(spec, pool, settings.max_model_len, explicit_budget=settings.kv_cache_bytes is not None)
    # IPPROTO_TCP explicitly: asyncio sets TCP_NODELAY only on such sockets (else Nagle adds ~40 ms a request)
    family = socket.AF_INET6 if ":" in settings.host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM, socket.IPPROTO_TCP)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind((settings.host, settings.port))
    host = f"[{settings.host}]" if ":" in settings.host else settings.host
    settings.url = f"http://{host}:{sock.getsockname()[1]}"
    app = create_app(settings, bases)
    config = uvicorn.Config(app, log_level="warning", timeout_keep_alive=30)
    log.warning("toolkit server listening on %s (data: %s)", settings.url, settings.data_dir)
    _Server(config, app).run(sockets=[sock])


class _Server(uvicorn.Server):
    """uvicorn's server; asked to stop, it first ends the long polls of job events, which uvicorn
    would otherwise wait for before shutting down."""

    def __init__(self, config: uvicorn.Config, app: FastAPI) -> None:
        super().__init__(config)
        self.app = app

    def handle_exit(self, sig: int, frame: FrameType | None) -> None:
        services: Services | None = getattr(self.app.state, "services", None)
        if services is not None:
            services.db.commits.close()
        super().handle_exit(sig, frame)


def announce(path: Path, info: dict[str, object]) -> None:
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(info))
    tmp.replace(path)


def withdraw(path: Path) -> None:
    """Remove ``server.json`` if this process wrote it."""
    with suppress(FileNotFoundError, ValueError):
        if json.loads(path.read_text()).get("pid") == os.getpid():
            path.unlink()
