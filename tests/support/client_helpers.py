"""Client-side test helpers: a transport configuration for a fake deployment at ``http://api.test``."""

from __future__ import annotations

from toolkit.client._transport import Config
from toolkit.client.deployment import Deployment


def fake_config(deployment: str) -> Config:
    """A transport config for the named deployment kind (e.g. ``"local"``), no retries."""
    return Config(
        base_url="http://api.test",
        api_key="k",
        inference_url="http://api.test/v1",
        trace_url="http://api.test/traces",
        deployment=Deployment(deployment, "http://api.test"),  # type: ignore[arg-type]
        max_retries=0,
    )
