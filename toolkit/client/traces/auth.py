"""How the trace client authenticates: HTTP Basic ``api:<key>`` on W&B's hosted Weave (as Weave's own
client does there), the transport's ``Authorization: Bearer <key>`` everywhere else (the local server
takes both)."""

from __future__ import annotations

import base64
from urllib.parse import urlsplit

from .._transport import Config

WANDB_DOMAINS = ("wandb.ai", "wandb.io")


def is_wandb_hosted(url: str) -> bool:
    """Whether ``url`` is served by W&B (``trace.wandb.ai``, or a dedicated ``*.wandb.io`` instance)."""
    host = (urlsplit(url).hostname or "").lower()
    return any(host == d or host.endswith("." + d) for d in WANDB_DOMAINS)


def trace_auth_headers(config: Config) -> dict[str, str]:
    """The headers that replace the transport's auth on trace requests (none: keep Bearer)."""
    if not config.api_key or not is_wandb_hosted(config.trace_url):
        return {}
    token = base64.b64encode(f"api:{config.api_key}".encode()).decode()
    return {"Authorization": f"Basic {token}"}
