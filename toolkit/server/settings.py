"""Server settings: where the data lives, who may connect, which models are served and where."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from .engine.resources import LORA_BYTES
from .engine.sources import AdapterSource, BaseSource

DEFAULT_PORT = 8321
MAX_BODY_BYTES = 64 * 1024 * 1024


@dataclass
class Settings:
    data_dir: Path
    host: str = "127.0.0.1"
    port: int = DEFAULT_PORT
    api_key: str | None = None
    # base models by hub id or folder (the first is the default); none: the built-in tiny model
    base_models: list[BaseSource] = field(default_factory=list)
    lora_modules: list[AdapterSource] = field(default_factory=list)  # adapters served by name
    device: str = "auto"  # auto | cpu | cuda[:N] | mps (engine/device.py)
    dtype: str = "auto"  # the served weights: auto (the device's own) | float32 | bfloat16 | float16
    max_lora_bytes: int = LORA_BYTES  # resident LoRA adapters per base model, least recently used out
    trust_request_chat_template: bool = False
    priority_scheduling: bool = False
    max_num_seqs: int = 32  # sequences the engine decodes at once; more requests wait
    enable_prefix_caching: bool = True  # reuse prompt prefixes across requests (engine/prefill.py)
    enforce_eager: bool = False  # no CUDA graphs: decode steps run eagerly (engine/decode_graphs.py)
    kv_cache_bytes: int | None = None  # KV cache budget per base model (None: engine/resources.py's default)
    max_model_len: int | None = (
        None  # the longest sequence served (None: the model's, if the KV cache holds it)
    )
    max_body_bytes: int = MAX_BODY_BYTES
    # deadline of a non-streamed chat request in seconds (0: none); a stream ends when its client leaves
    request_timeout: float = 600.0
    # a request without progress (no token, no state change) this long is logged by the watchdog
    stall_warning_seconds: float = 60.0
    # an external OpenAI-compatible server (vLLM with --enable-lora) that generates instead of the
    # local engines, and the key it expects (chat/external.py)
    inference_url: str | None = None
    inference_api_key: str | None = None
    url: str | None = None  # set by ``serve`` once bound; announced in server.json when ready
    extra: dict[str, str] = field(default_factory=dict)

    @property
    def db_path(self) -> Path:
        return self.data_dir / "toolkit.db"

    @property
    def checkpoints_dir(self) -> Path:
        """``<model id>/step<N>/`` weight folders of the trained checkpoints."""
        return self.data_dir / "checkpoints"

    @property
    def key_file(self) -> Path:
        """The local user's key in clear, readable by its owner only, for ``tk.connect()``."""
        return self.data_dir / "local.key"

    @property
    def server_file(self) -> Path:
        """Where a running server announces its URL and pid."""
        return self.data_dir / "server.json"
