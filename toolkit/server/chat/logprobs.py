"""Log-probabilities in the response's terms: per-token entries (``choices[].logprobs``, the same in
stream chunks) and ``prompt_logprobs``.

``top_logprobs`` are the ``k`` most likely tokens at the position, most likely first, as OpenAI
defines them; the sampled token's own value is the entry's ``logprob`` and it appears among the top
only when it is one of the ``k`` most likely. (vLLM 0.33 instead lists the sampled token first and
drops the ``k``-th most likely to make room for it.) ``prompt_logprobs`` keep vLLM's form: per
prompt position, the prompt token and the ``k`` most likely, each with its rank.
"""

from __future__ import annotations

from typing import Any

from ...types.training import TokenLogprob, TopLogprob
from ..engine.codec import Codec
from ..engine.events import PromptLogprob, TopLogprobs

MIN_LOGPROB = -9999.0


class LogprobFormatter:
    """Token strings (``token_id:<id>`` with ``return_tokens_as_token_ids``) and logprob entries."""

    def __init__(self, codec: Codec, as_token_ids: bool) -> None:
        self.codec = codec
        self.as_ids = as_token_ids

    def token(self, token_id: int, previous: list[int]) -> str:
        return f"token_id:{token_id}" if self.as_ids else self.codec.token_text(token_id, previous)

    def entries(
        self, ids: list[int], values: list[tuple[float, TopLogprobs]], before: list[int]
    ) -> list[TokenLogprob]:
        """One entry per sampled token of ``ids`` (the tokens ``before`` them give the text context);
        ``values`` hold each token's logprob and the engine's top list (most likely first)."""
        out = []
        previous = list(before)
        for token_id, (logprob, top) in zip(ids, values, strict=False):
            text = self.token(token_id, previous)
            out.append(
                TokenLogprob(
                    token=text,
                    logprob=max(logprob, MIN_LOGPROB),
                    bytes=list(text.encode("utf-8", errors="replace")),
                    top_logprobs=[self._top(i, v, previous) for i, v in top],
                )
            )
            previous.append(token_id)
        return out

    def _top(self, token_id: int, logprob: float, previous: list[int]) -> TopLogprob:
        text = self.token(token_id, previous)
        return TopLogprob(
            token=text, logprob=max(logprob, MIN_LOGPROB), bytes=list(text.encode("utf-8", errors="replace"))
        )

    def prompt_logprobs(self, entries: list[PromptLogprob]) -> list[dict[str, Any] | None]:
        """vLLM's list: ``None`` for the first token, then ``{token_id: {logprob, rank, decoded_token}}``."""
        out: list[dict[str, Any] | None] = [None]
        for e in entries:
            item = {str(e.token_id): self._prompt_entry(e.token_id, e.logprob, e.rank)}
            for rank, (i, v) in enumerate(e.top, start=1):
                item.setdefault(str(i), self._prompt_entry(i, v, rank))
            out.append(item)
        return out

    def _prompt_entry(self, token_id: int, logprob: float, rank: int) -> dict[str, Any]:
        return {"logprob": max(logprob, MIN_LOGPROB), "rank": rank, "decoded_token": self.token(token_id, [])}
