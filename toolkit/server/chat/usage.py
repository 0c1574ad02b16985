"""Token usage: the response's ``usage`` object, and the per-project counters behind ``GET /v1/usage``."""

from __future__ import annotations

from ...types.chat import PromptTokensDetails, Usage
from .context import ChatContext
from .prepare import Prepared


def usage_of(prompt: int, completion: int, cached: int) -> Usage:
    return Usage(
        prompt_tokens=prompt,
        total_tokens=prompt + completion,
        completion_tokens=completion,
        prompt_tokens_details=PromptTokensDetails(cached_tokens=cached),
    )


def record_usage(chat: ChatContext, prep: Prepared, prompt: int, completion: int, cached: int) -> None:
    """Add one request to its user's counters for its team/project and model (blocking: a write)."""
    chat.usage.record(prep.user, prep.project, prep.model, prompt, completion, cached)
