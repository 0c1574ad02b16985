"""What a running sequence sends back: each sampled token appended and checked against the stop
conditions, new text streamed as :class:`~.events.Delta` events, the end as a :class:`~.events.Finished`
event; and a prompt's logprobs."""

from __future__ import annotations

from collections.abc import Callable

import torch
from torch import Tensor

from .codec import Codec
from .events import Delta, Finished, PromptLogprob
from .running import Sequence

LOGPROB_ROWS = 256
"""Prompt positions whose logits exist at once when a request asks for prompt logprobs."""


def append(seq: Sequence, token: int, max_model_len: int) -> bool:
    """Add a sampled token; True if the sequence is now finished."""
    p = seq.params
    seq.output_ids.append(token)
    if seq.guide is not None:
        seq.guide.advance(token)
    n = len(seq.output_ids)
    stopped_by_token = False
    if n >= p.min_tokens:
        if token in seq.eos:
            seq.finish_reason, stopped_by_token = "stop", True
        elif token in seq.extra_eos or token in p.stop_token_ids:
            seq.finish_reason, seq.stop_reason, stopped_by_token = "stop", token, True
    if seq.text_state is not None and (not stopped_by_token or p.include_stop_str_in_output):
        new_text = seq.text_state.push(token)
        seq.text += new_text
        if p.stop and new_text and n > p.min_tokens and not stopped_by_token:
            _check_stop_strings(seq, len(new_text))
    if seq.finish_reason is None and (n >= p.max_tokens or len(seq.prompt_ids) + n >= max_model_len):
        seq.finish_reason = "length"
    return seq.finish_reason is not None


def _check_stop_strings(seq: Sequence, new_chars: int) -> None:
    """Finish at the stop string completed by the newest text (earliest end, then list order)."""
    p = seq.params
    window_start = max(0, len(seq.text) - new_chars - max(len(s) for s in p.stop) + 1)
    found = [
        (at + len(stop), order, at, stop)
        for order, stop in enumerate(p.stop)
        if (at := seq.text.find(stop, window_start)) >= 0
    ]
    best = min(found) if found else None
    if best is not None:
        _, _, at, stop = best
        seq.text = seq.text[: at + len(stop)] if p.include_stop_str_in_output else seq.text[:at]
        seq.finish_reason, seq.stop_reason = "stop", stop


def stream(seq: Sequence, final: bool = False) -> Delta | None:
    """Send the new tokens and text (text held back while a stop string may still match)."""
    hold = 0 if final or not seq.params.stop else max(len(s) for s in seq.params.stop) - 1
    upto = max(seq.sent_chars, len(seq.text) - hold)
    delta = Delta(
        seq.index,
        seq.output_ids[seq.sent_tokens :],
        seq.text[seq.sent_chars : upto],
        seq.logprobs[seq.sent_logprobs :] if seq.logprobs is not None else [],
    )
    seq.sent_chars, seq.sent_tokens = upto, len(seq.output_ids)
    seq.sent_logprobs = len(seq.logprobs) if seq.logprobs is not None else 0
    if final:
        return delta
    seq.req.emit(delta)
    return None


def finish(seq: Sequence, codec: Codec) -> None:
    """Send the last event: every token, the whole text, the finish reason (and, streamed, the text held
    back)."""
    p = seq.params
    if seq.text_state is not None:
        if seq.stop_reason is None or not isinstance(seq.stop_reason, str):
            seq.text += seq.text_state.flush()
    else:
        ids = seq.output_ids
        if seq.finish_reason == "stop" and not p.include_stop_str_in_output:
            ids = ids[:-1]
        seq.text = codec.decode(ids, p.skip_special_tokens, p.spaces_between_special_tokens)
    tail = stream(seq, final=True) if seq.req.stream else None
    seq.req.emit(
        Finished(
            seq.index,
            seq.output_ids,
            seq.text,
            seq.logprobs,
            seq.finish_reason or "stop",
            seq.stop_reason,
            tail,
        )
    )


@torch.no_grad()
def prompt_logprobs(
    logits: Callable[[Tensor], Tensor], hidden: Tensor, prompt: list[int], k: int
) -> list[PromptLogprob]:
    """Log-probability, rank and top-``k`` of each prompt token given the tokens before it, from the
    final hidden states ``[len, hidden]`` of the prompt's positions, :data:`LOGPROB_ROWS` positions'
    ``logits`` at a time (a prompt of 8,192 tokens of a 49,152-token vocabulary would hold 1.6 GB)."""
    out: list[PromptLogprob] = []
    for start in range(0, len(prompt) - 1, LOGPROB_ROWS):
        stop = min(start + LOGPROB_ROWS, len(prompt) - 1)
        logprobs = logits(hidden[start:stop]).cpu().log_softmax(-1)
        targets = torch.tensor(prompt[start + 1 : stop + 1])
        chosen = logprobs.gather(-1, targets[:, None])[:, 0]
        ranks = (logprobs > chosen[:, None]).sum(-1) + 1
        top_v, top_i = logprobs.topk(min(k, logprobs.shape[-1]), dim=-1) if k else (None, None)
        for row, token in enumerate(targets.tolist()):
            top = (
                list(zip(top_i[row].tolist(), top_v[row].tolist(), strict=True))
                if top_i is not None and top_v is not None
                else []
            )
            out.append(PromptLogprob(token, float(chosen[row]), int(ranks[row]), top))
    return out
