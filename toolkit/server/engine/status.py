"""What an engine holds, as the health check reports it."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class EngineStatus:
    """A snapshot of what the engine holds, refreshed by its thread after each step and before it
    emits any ``Finished``: a client that got an answer never reads an older state."""

    loaded: bool
    device: str
    dtype: str
    parameter_bytes: int = 0
    kv_cache_bytes: int = 0  # KV pool blocks in use or cached for reuse
    kv_cache_budget_bytes: int = 0  # what the KV pool may hold
    max_model_len: int = 0  # the longest sequence served (fits in the KV pool)
    checkpoints: int = 0
    adapters: int = 0
    adapter_bytes: int = 0
    running: int = 0
    waiting: int = 0  # requests queued and sequences preempted
    preemptions: int = 0  # sequences preempted for KV room since the start
    prompt_tokens: int = 0  # prompt tokens of the requests admitted since the start
    prefilled_tokens: int = 0  # of which run through the model (the rest were reused)
    cuda_graphs: bool = False  # decode steps replay CUDA graphs (not with --enforce-eager, nor off CUDA)
    graphs_captured: int = 0  # decode shapes captured so far
    graph_capture_s: float = 0.0  # seconds spent capturing them
