"""ChatCompare: one conversation against several models or checkpoints side by side, streamed."""

from __future__ import annotations

import difflib
import html
import math
import re
import threading
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import ipywidgets as w
import pandas as pd

from .. import frames
from ..client import Client
from ..types.chat import Usage
from ..types.training import TokenLogprob
from ._common import button, error_text

RENDER_EVERY_S = 0.1
WIDE = {"description_width": "initial"}
COLUMN = w.Layout(flex="1 1 0", min_width="220px", border="1px solid #ddd", padding="4px", margin="2px")


def diff_html(base: str, other: str) -> str:
    """``other`` marked word by word against ``base``: insertions green, deletions struck red."""
    a, b = re.findall(r"\S+|\s+", base), re.findall(r"\S+|\s+", other)
    out = []
    for op, i1, i2, j1, j2 in difflib.SequenceMatcher(None, a, b, autojunk=False).get_opcodes():
        if op == "equal":
            out.append(html.escape("".join(b[j1:j2])))
            continue
        if op in ("delete", "replace"):
            out.append(f'<del style="background:#fdd">{html.escape("".join(a[i1:i2]))}</del>')
        if op in ("insert", "replace"):
            out.append(
                f'<ins style="background:#dfd;text-decoration:none">{html.escape("".join(b[j1:j2]))}</ins>'
            )
    return "".join(out)


def logprob_html(tokens: Sequence[TokenLogprob]) -> str:
    """Tokens on a background from red (unlikely) to green (likely); the logprob shows on hover."""
    return "".join(
        f'<span title="{t.logprob:.3f}" style="background:hsl({int(120 * math.exp(t.logprob))},70%,85%)">'
        f"{html.escape(t.token)}</span>"
        for t in tokens
    )


@dataclass
class Column:
    """What one model answered: text and tokens per sample, usage, timing, error."""

    model: str
    texts: dict[int, str] = field(default_factory=dict)
    tokens: dict[int, list[TokenLogprob]] = field(default_factory=dict)
    finish: dict[int, str | None] = field(default_factory=dict)
    usage: Usage | None = None
    latency_s: float | None = None
    first_token_s: float | None = None
    error: str | None = None
    done: bool = False


class ChatCompare(w.VBox):
    """Send one conversation to each model with shared sampling settings; answers stream into side-by-side
    columns with usage and latency; view plain text, a word diff against the first column, or
    logprob colouring. :meth:`run` starts the requests in background threads; :meth:`wait` joins them.
    """

    def __init__(
        self,
        client: Client,
        models: Sequence[str] = (),
        messages: Sequence[Mapping[str, Any]] | None = None,
        *,
        prompt: str = "",
        max_tokens: int = 48,
        temperature: float = 0.7,
        n: int = 1,
        logprobs: bool = True,
    ) -> None:
        self.client = client
        self.messages = [dict(m) for m in messages] if messages else None
        self.columns: dict[str, Column] = {}
        self._views: dict[str, w.HTML] = {}
        self._threads: list[threading.Thread] = []
        self.models = w.TagsInput(value=list(models), allow_duplicates=False, layout=w.Layout(width="100%"))
        self.system = w.Textarea(placeholder="system message (optional)", layout=w.Layout(width="100%"))
        self.prompt = w.Textarea(value=prompt, placeholder="user message", layout=w.Layout(width="100%"))
        self.temperature = w.FloatSlider(
            value=temperature, min=0.0, max=2.0, step=0.05, description="temperature", style=WIDE
        )
        self.top_p = w.FloatSlider(value=1.0, min=0.05, max=1.0, step=0.05, description="top_p")
        self.max_tokens = w.BoundedIntText(value=max_tokens, min=1, max=4096, description="max tokens")
        self.n = w.BoundedIntText(value=n, min=1, max=8, description="samples")
        self.logprobs = w.Checkbox(value=logprobs, description="logprobs")
        self.view = w.ToggleButtons(options=["text", "diff", "logprobs"], value="text")
        self.view.observe(lambda _: self.render(), "value")
        self.area = w.HBox(layout=w.Layout(width="100%", flex_flow="row wrap"))
        self.status = w.HTML()
        super().__init__(
            [
                w.HTML("<b>Models</b> (names or checkpoints <code>name:stepN</code>)"),
                self.models,
                self.system,
                self.prompt,
                w.HBox([self.temperature, self.top_p]),
                w.HBox([self.max_tokens, self.n, self.logprobs]),
                w.HBox([button("Run", self.run, "primary", "play"), self.view]),
                self.status,
                self.area,
            ]
        )

    # ------------------------------------------------------------------ logic

    def conversation(self) -> list[dict[str, Any]]:
        """The messages sent: the given conversation, else the system and user fields."""
        if self.messages:
            return self.messages
        system = [{"role": "system", "content": self.system.value}] if self.system.value.strip() else []
        return [*system, {"role": "user", "content": self.prompt.value}]

    def params(self) -> dict[str, Any]:
        """The shared sampling settings, as request fields."""
        params: dict[str, Any] = {
            "temperature": self.temperature.value,
            "top_p": self.top_p.value,
            "max_tokens": self.max_tokens.value,
            "n": self.n.value,
            "stream_options": {"include_usage": True},
        }
        if self.logprobs.value:
            params["logprobs"] = True
        return params

    def run(self, wait: bool = False) -> dict[str, Column]:
        """Start one streaming request per model (each in its own thread); ``wait`` blocks until all end."""
        messages, params = self.conversation(), self.params()
        self.columns = {m: Column(m) for m in self.models.value}
        self._views = {m: w.HTML(layout=COLUMN) for m in self.columns}
        self.area.children = list(self._views.values())
        self._threads = [
            threading.Thread(target=self._stream, args=(col, messages, params), daemon=True)
            for col in self.columns.values()
        ]
        for t in self._threads:
            t.start()
        self.status.value = f"running {len(self._threads)} model(s)…"
        self.render()
        if wait:
            self.wait()
        return self.columns

    def wait(self, timeout: float | None = None) -> dict[str, Column]:
        for t in self._threads:
            t.join(timeout)
        return self.columns

    def frame(self) -> pd.DataFrame:
        """One row per model and sample: text, finish reason, usage, latency, mean logprob."""
        rows = []
        for col in self.columns.values():
            usage = col.usage or Usage()
            for i, text in sorted(col.texts.items()):
                tokens = col.tokens.get(i, [])
                rows.append(
                    {
                        "model": col.model,
                        "sample": i,
                        "text": text,
                        "finish_reason": col.finish.get(i),
                        "prompt_tokens": usage.prompt_tokens,
                        "completion_tokens": usage.completion_tokens,
                        "latency_s": col.latency_s,
                        "first_token_s": col.first_token_s,
                        "mean_logprob": sum(t.logprob for t in tokens) / len(tokens) if tokens else None,
                        "error": col.error,
                    }
                )
        columns = {"model": frames.STR, "sample": frames.INT, "text": frames.STR, "finish_reason": frames.STR}
        columns |= {"prompt_tokens": frames.INT, "completion_tokens": frames.INT, "latency_s": frames.FLOAT}
        columns |= {"first_token_s": frames.FLOAT, "mean_logprob": frames.FLOAT, "error": frames.STR}
        return frames.frame(rows, columns)

    def _stream(self, col: Column, messages: list[dict[str, Any]], params: dict[str, Any]) -> None:
        start = last = time.perf_counter()
        try:
            for chunk in self.client.chat.completions.create(
                messages=messages, model=col.model, stream=True, **params
            ):
                for choice in chunk.choices:
                    if col.first_token_s is None and choice.delta.content:
                        col.first_token_s = time.perf_counter() - start
                    col.texts[choice.index] = col.texts.get(choice.index, "") + (choice.delta.content or "")
                    if choice.logprobs and choice.logprobs.content:
                        col.tokens.setdefault(choice.index, []).extend(choice.logprobs.content)
                    if choice.finish_reason:
                        col.finish[choice.index] = choice.finish_reason
                col.usage = chunk.usage or col.usage
                if time.perf_counter() - last > RENDER_EVERY_S:
                    last = time.perf_counter()
                    self.render()
        except Exception as exc:
            col.error = error_text(exc)
        col.latency_s = time.perf_counter() - start
        col.done = True
        self.render()

    # ------------------------------------------------------------------ rendering

    def _sample_html(self, col: Column, i: int, base: Column | None) -> str:
        text = col.texts.get(i, "")
        if self.view.value == "logprobs" and col.tokens.get(i):
            return logprob_html(col.tokens[i])
        if self.view.value == "diff" and base is not None and base is not col and base.done and col.done:
            return diff_html(base.texts.get(i, ""), text)
        return html.escape(text)

    def render(self) -> None:
        """Redraw every column (called from the streaming threads as text arrives)."""
        cols = list(self.columns.values())
        base = cols[0] if cols else None
        for col in cols:
            samples = sorted(col.texts) or [0]
            body = "".join(
                f'<div class="sample" style="white-space:pre-wrap;border-top:1px dashed #ccc;padding:2px">'
                f"{self._sample_html(col, i, base)}</div>"
                for i in samples
            )
            facts = []
            if col.usage:
                facts.append(
                    f"{col.usage.prompt_tokens} prompt + {col.usage.completion_tokens} completion tokens"
                )
            if col.latency_s is not None:
                facts.append(f"{col.latency_s:.2f} s")
            error = f'<div style="color:#d62728">{html.escape(col.error)}</div>' if col.error else ""
            head = f"<b>{html.escape(col.model)}</b>{'' if col.done else ' …'}"
            small = " · ".join(facts)
            self._views[
                col.model
            ].value = f'<div class="chat-column">{head}{error}{body}<small>{small}</small></div>'
        if cols and all(c.done for c in cols):
            self.status.value = f"done: {len(cols)} model(s)"
