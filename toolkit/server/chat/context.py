"""What the chat endpoint works with, published by the app as ``app.state.chat``."""

from __future__ import annotations

from dataclasses import dataclass

from fastapi import Request

from ..engine.served import ServedModels
from ..store.models import Models
from ..store.usage import ChatUsage
from .external import ExternalInference


@dataclass(frozen=True)
class ChatContext:
    served: ServedModels  # base models (each with its engine) and named adapters
    models: Models  # model names and checkpoints a request's ``model`` resolves to
    usage: ChatUsage  # tokens per team/project and model
    trust_request_chat_template: bool
    external: ExternalInference | None = None  # --inference-url: generation happens there
    request_timeout: float = 0.0  # --request-timeout: deadline of a non-streamed request (0: none)


def chat_context(request: Request) -> ChatContext:
    """The app's chat context (a FastAPI dependency)."""
    ctx: ChatContext = request.app.state.chat
    return ctx
