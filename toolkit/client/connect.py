"""``connect()``: a client for the configured deployment, or for the embedded local server.

Resolution order for every setting: argument, then environment variable, then preset, then the
local server of the data folder (started in the background if none is running).

Environment variables:
    TOOLKIT_BASE_URL       training API root (paths /v1/preview/...); unset means the local server
    TOOLKIT_API_KEY        key for all three services (the W&B preset falls back to WANDB_API_KEY)
    TOOLKIT_INFERENCE_URL  chat-completion root, default <base>/v1
    TOOLKIT_TRACE_URL      trace service root, default <base>/traces
    TOOLKIT_PROJECT        team/project sent as the OpenAI-Project header on inference calls
    TOOLKIT_PRESET         "wandb" for the hosted W&B services, "local" for the embedded server
    TOOLKIT_DATA_DIR       local server data folder, default ~/.toolkit

The client's ``deployment`` says what was resolved: ``"local"`` (the local server), ``"wandb"``
(the preset) or ``"custom"`` (a URL of one's own).
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TypedDict, TypeVar, Unpack

from .client import AsyncClient, Client
from .deployment import DeploymentName
from .local_server import data_dir, local_server

C = TypeVar("C", Client, AsyncClient)


@dataclass(frozen=True)
class Preset:
    base_url: str
    inference_url: str
    trace_url: str
    key_env: str


PRESETS = {
    # W&B Training serves the training API and chat completions of trained models on one host
    # (as ART uses it); W&B Weave records traces.
    "wandb": Preset(
        "https://api.training.wandb.ai",
        "https://api.training.wandb.ai/v1",
        "https://trace.wandb.ai",
        "WANDB_API_KEY",
    ),
}


@dataclass(frozen=True)
class Target:
    base_url: str
    api_key: str | None
    inference_url: str | None
    trace_url: str | None
    project: str | None
    deployment: DeploymentName


def resolve(
    base_url: str | None = None,
    api_key: str | None = None,
    *,
    inference_url: str | None = None,
    trace_url: str | None = None,
    project: str | None = None,
    preset: str | None = None,
    data_dir_path: str | os.PathLike[str] | None = None,
    start: bool = True,
    base_models: Sequence[str] = (),
) -> Target:
    env = os.environ
    preset = preset or env.get("TOOLKIT_PRESET")
    base_url = base_url or env.get("TOOLKIT_BASE_URL")
    api_key = api_key or env.get("TOOLKIT_API_KEY")
    inference_url = inference_url or env.get("TOOLKIT_INFERENCE_URL")
    trace_url = trace_url or env.get("TOOLKIT_TRACE_URL")
    project = project or env.get("TOOLKIT_PROJECT")
    deployment: DeploymentName = "custom"
    if preset and preset != "local":
        if preset not in PRESETS:
            raise ValueError(f"unknown preset {preset!r}; known: local, {', '.join(PRESETS)}")
        p = PRESETS[preset]
        base_url = base_url or p.base_url
        inference_url = inference_url or p.inference_url
        trace_url = trace_url or p.trace_url
        api_key = api_key or env.get(p.key_env)
        if not api_key:
            raise ValueError(f"preset {preset!r} needs an API key: set TOOLKIT_API_KEY or {p.key_env}")
        deployment = "wandb"
    if base_url is None:
        url, local_key = local_server(data_dir(data_dir_path), start=start, base_models=base_models)
        base_url, api_key, deployment = url, api_key or local_key, "local"
    return Target(base_url, api_key, inference_url, trace_url, project, deployment)


class ConnectOptions(TypedDict, total=False):
    """Keyword options of :func:`connect` and :func:`connect_async`."""

    inference_url: str | None
    trace_url: str | None
    project: str | None
    preset: str | None
    data_dir: str | os.PathLike[str] | None
    start: bool
    base_models: Sequence[str]
    timeout: float
    max_retries: int


def _open(cls: type[C], base_url: str | None, api_key: str | None, options: ConnectOptions) -> C:
    t = resolve(
        base_url,
        api_key,
        inference_url=options.get("inference_url"),
        trace_url=options.get("trace_url"),
        project=options.get("project"),
        preset=options.get("preset"),
        data_dir_path=options.get("data_dir"),
        start=options.get("start", True),
        base_models=options.get("base_models", ()),
    )
    return cls(
        t.base_url,
        t.api_key,
        inference_url=t.inference_url,
        trace_url=t.trace_url,
        project=t.project,
        timeout=options.get("timeout", 600.0),
        max_retries=options.get("max_retries", 2),
        deployment=t.deployment,
    )


def connect(
    base_url: str | None = None, api_key: str | None = None, **options: Unpack[ConnectOptions]
) -> Client:
    """A :class:`Client`; with no configuration, for the local server (started if needed).

    Options: ``inference_url``, ``trace_url``, ``project`` (``team/project``), ``preset``
    (``"wandb"`` or ``"local"``), ``data_dir`` (local server), ``start`` (start the local server
    if none runs, default true), ``base_models`` (``--base-model`` values the local server serves:
    a server started here gets them, one found running must serve them), ``timeout`` (seconds,
    default 600), ``max_retries`` (default 2).
    """
    return _open(Client, base_url, api_key, options)


def connect_async(
    base_url: str | None = None, api_key: str | None = None, **options: Unpack[ConnectOptions]
) -> AsyncClient:
    """An :class:`AsyncClient`, resolved exactly like :func:`connect`."""
    return _open(AsyncClient, base_url, api_key, options)
