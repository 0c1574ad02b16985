"""Wire models of the local server's service checks: ``GET /v1/health`` (with the base models it
serves) and ``GET /v1/system-check``."""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from .common import WireModel


class ServedBaseModel(WireModel):
    """A base model the local server serves (extension of ``GET /v1/health``): its names, where it
    comes from, and what its engine holds. Weights load on first use, so ``loaded`` is false until a
    chat request (or named adapter, or checkpoint) needs them; the byte counts are then those of the
    parameters (base and whole-weight checkpoints), the KV cache (blocks of running sequences and
    cached prompt prefixes, within its budget) and the resident LoRA adapters."""

    name: str
    aliases: list[str] = Field(default_factory=list)
    source: str
    loaded: bool
    device: str
    dtype: str
    parameter_bytes: int = 0
    kv_cache_bytes: int = 0  # KV cache blocks in use or cached for reuse
    kv_cache_budget_bytes: int = 0  # what the KV cache may hold (--kv-cache-memory-bytes)
    max_model_len: int = 0  # the longest sequence served, which the KV cache holds
    adapters: int = 0
    adapter_bytes: int = 0
    checkpoints: int = 0  # whole-weight checkpoints loaded beside the base
    running: int = 0  # sequences decoding
    waiting: int = 0  # requests queued, and sequences preempted for KV cache room
    preemptions: int = 0  # sequences preempted for KV cache room since the server started
    prompt_tokens: int = 0  # prompt tokens of the requests admitted since the server started
    prefilled_tokens: int = 0  # of which run through the model (the rest reused cached or shared keys/values)
    cuda_graphs: bool = False  # decode steps replay CUDA graphs (not with --enforce-eager, nor off CUDA)
    graphs_captured: int = 0  # decode shapes (batch size, blocks, adapters) captured so far
    graph_capture_s: float = 0.0  # seconds spent capturing them


class Health(WireModel):
    status: Literal["ok"] = "ok"
    version: str | None = None
    models: list[ServedBaseModel] | None = None  # extension: the local server's base models
    # extension: chat requests the local server's watchdog saw without progress for its stall time
    stalls: int | None = None


class ComponentCheck(WireModel):
    success: bool
    duration_ms: float = 0.0
    error: str | None = None


class AcceleratorCheck(ComponentCheck):
    """The ``gpu_queue`` entry; ``device`` (extension) is the device the chat engine runs on."""

    device: str | None = None


class SystemCheck(WireModel):
    api: bool
    database: ComponentCheck
    cpu_queue: ComponentCheck
    gpu_queue: AcceleratorCheck
