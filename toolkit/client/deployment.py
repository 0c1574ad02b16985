"""What a client talks to: the local server, the hosted W&B services, or a deployment of one's own,
and whether it serves this toolkit's extension endpoints (marked "Extension" in docs/interfaces.md).

The local server serves every extension; the hosted W&B Training API serves none. A custom URL is
assumed to serve them until one of their routes answers that it does not exist (404 Not Found, or
405 Method Not Allowed where the path exists for another method); from then on every extension
operation raises :class:`~toolkit.client.UnsupportedOperation` without being sent.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal
from urllib.parse import urlsplit

import httpx

from ._errors import UnsupportedOperation

DeploymentName = Literal["local", "wandb", "custom"]
WANDB_TRAINING_HOST = "api.training.wandb.ai"
# FastAPI/Starlette's answers for a path no route serves, or a path served for other methods only.
_NO_ROUTE = {404: "Not Found", 405: "Method Not Allowed"}


@dataclass(frozen=True)
class Extension:
    """Marks an operation as a local-server extension: ``what`` it does, and what to use ``instead``
    where a deployment lacks it (if there is anything)."""

    what: str
    instead: str | None = None


class Deployment:
    """``name`` is ``"local"``, ``"wandb"`` or ``"custom"``; ``extensions`` tells whether the
    deployment serves this toolkit's extension endpoints (model listing, artifacts, job cancel, ...)."""

    def __init__(self, name: DeploymentName, base_url: str) -> None:
        self.name: DeploymentName = name
        self.base_url = base_url
        self._extensions = name != "wandb"

    @classmethod
    def for_url(cls, base_url: str) -> Deployment:
        """The hosted W&B Training API by its host name, else a custom deployment."""
        host = urlsplit(base_url).hostname
        return cls("wandb" if host == WANDB_TRAINING_HOST else "custom", base_url)

    @property
    def extensions(self) -> bool:
        return self._extensions

    @property
    def label(self) -> str:
        if self.name == "wandb":
            return "the hosted W&B Training API"
        if self.name == "local":
            return "the local server"
        return f"the deployment at {self.base_url}"

    def unsupported(self, extension: Extension) -> UnsupportedOperation:
        message = f"{self.label} has no {extension.what} (a local-server extension)"
        return UnsupportedOperation(f"{message}; {extension.instead}" if extension.instead else message)

    def require(self, extension: Extension | None) -> None:
        """Raise :class:`UnsupportedOperation` if ``extension`` is known to be absent here."""
        if extension is not None and not self._extensions:
            raise self.unsupported(extension)

    def route_absent(
        self, extension: Extension | None, response: httpx.Response, body: Any
    ) -> UnsupportedOperation | None:
        """The error to raise when an extension's own route is absent here (and from now on no
        extensions), as opposed to a resource it names (a 404 with its own message, e.g. "Model X
        not found"); ``None`` otherwise."""
        expected = _NO_ROUTE.get(response.status_code)
        if extension is None or expected is None:
            return None
        if not (isinstance(body, dict) and body.get("detail") == expected):
            return None
        self._extensions = False
        return self.unsupported(extension)

    def __repr__(self) -> str:
        return f"Deployment(name={self.name!r}, extensions={self._extensions})"
