"""ChatCompare: one conversation against several models or checkpoints side by side, streamed."""

from __future__ import annotations

import difflib
import html
import re
import threading
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import ipywidgets as w
import pandas as pd
from traitlets import Bool, Dict

from .. import _theme, frames
from ..client import Client
from ..plots import probability_color
from ..types.chat import Usage
from ..types.training import TokenLogprob
from ._base import ToolkitWidget
from ._common import JOIN_TIMEOUT_S, StatusLine, button, error_text

RENDER_EVERY_S = 0.1
WIDE = {"description_width": "initial"}
COLUMN = w.Layout(
    flex="1 1 0", min_width="220px", border=f"1px solid {_theme.BORDER}", padding="4px", margin="2px"
)
SAMPLE = f"white-space:pre-wrap;border-top:1px dashed {_theme.BORDER};padding:2px"
FROZEN_COLUMN = f"flex:1 1 0;min-width:220px;border:1px solid {_theme.BORDER};padding:4px;margin:2px"


def diff_html(base: str, other: str) -> str:
    """``other`` marked word by word against ``base``: insertions green, deletions struck red."""
    a, b = re.findall(r"\S+|\s+", base), re.findall(r"\S+|\s+", other)
    out = []
    for op, i1, i2, j1, j2 in difflib.SequenceMatcher(None, a, b, autojunk=False).get_opcodes():
        if op == "equal":
            out.append(html.escape("".join(b[j1:j2])))
            continue
        if op in ("delete", "replace"):
            deleted = html.escape("".join(a[i1:i2]))
            out.append(f'<del style="background:{_theme.tint(_theme.ERROR, 30)}">{deleted}</del>')
        if op in ("insert", "replace"):
            out.append(
                f'<ins style="background:{_theme.tint(_theme.SUCCESS, 30)};text-decoration:none">'
                f"{html.escape(''.join(b[j1:j2]))}</ins>"
            )
    return "".join(out)


def logprob_html(tokens: Sequence[TokenLogprob]) -> str:
    """Tokens on the fixed probability scale of :func:`toolkit.plots.probability_color` (red: unlikely,
    green: likely), black text on every colour; the logprob shows on hover."""
    return "".join(
        f'<span title="logprob {t.logprob:.3f}" '
        f'style="background:{probability_color(t.logprob)};color:black">{html.escape(t.token)}</span>'
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


class ChatCompare(ToolkitWidget):
    """Send one conversation to each model with shared sampling settings; answers stream into side-by-side
    columns with usage and latency; view plain text, a word diff against the first column, or
    logprob colouring. :meth:`run` starts the requests in background threads; :meth:`wait` joins them;
    :meth:`close` stops them.

    The settings are the controls (``models``, ``system``, ``prompt``, ``temperature``, ``top_p``,
    ``max_tokens``, ``n``, ``logprobs``, ``view``: read or set their ``value``); state traits:
    ``running`` and ``run_settings`` (the models, messages and parameters of the last run). When a
    later cell calls :meth:`run` again, the output under the earlier cell keeps a static copy of what
    that cell ran and the live widget moves to the new cell.
    """

    running = Bool(False)
    run_settings = Dict()

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
        self._halt = threading.Event()
        self._lock = threading.Lock()
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
        self.status_line = StatusLine()
        super().__init__(
            [
                w.HTML("<b>Models</b> (names or checkpoints <code>name:stepN</code>)"),
                self.models,
                self.system,
                self.prompt,
                w.HBox([self.temperature, self.top_p]),
                w.HBox([self.max_tokens, self.n, self.logprobs]),
                w.HBox([button("Run", self.action("run", self._launch), "primary", "play"), self.view]),
                self.status_line,
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
        """Start one streaming request per model (each in its own thread); ``wait`` blocks until all end.

        Called from a later cell than the one showing the widget, it first leaves a static copy of
        the previous run there and shows the widget under the calling cell.
        """
        self.follow_cell()
        self._launch()
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

    # ------------------------------------------------------------------ streaming threads

    def _launch(self) -> None:
        self._stop()  # a new run ends the previous one
        if not self.models.value:
            self.status_line.info("add a model first")
            return
        messages, params = self.conversation(), self.params()
        self.run_settings = {"models": list(self.models.value), "messages": messages, "params": params}
        self.columns = {m: Column(m) for m in self.models.value}
        self._views = {m: w.HTML(layout=COLUMN) for m in self.columns}
        self.area.children = list(self._views.values())
        self._halt = threading.Event()
        self._threads = [
            threading.Thread(
                target=self._stream,
                args=(col, messages, params, self._halt),
                name="chat-compare",
                daemon=True,
            )
            for col in self.columns.values()
        ]
        self.running = True
        self.status_line.info(f"running {len(self._threads)} model(s)…")
        for t in self._threads:
            t.start()
        self.render()

    def _stop(self) -> None:
        self._halt.set()
        for t in self._threads:
            t.join(JOIN_TIMEOUT_S)

    def _stream(
        self, col: Column, messages: list[dict[str, Any]], params: dict[str, Any], halt: threading.Event
    ) -> None:
        start = last = time.perf_counter()
        try:
            stream = self.client.chat.completions.create(
                messages=messages, model=col.model, stream=True, **params
            )
            try:
                for chunk in stream:
                    if halt.is_set():
                        break
                    self._add(col, chunk, start)
                    if time.perf_counter() - last > RENDER_EVERY_S:
                        last = time.perf_counter()
                        self.render()
            finally:
                getattr(stream, "close", lambda: None)()  # ends the HTTP response when halted
        except Exception as exc:
            col.error = error_text(exc)
        col.latency_s = time.perf_counter() - start
        col.done = True
        self.render()
        self._finished()

    @staticmethod
    def _add(col: Column, chunk: Any, start: float) -> None:
        for choice in chunk.choices:
            if col.first_token_s is None and choice.delta.content:
                col.first_token_s = time.perf_counter() - start
            col.texts[choice.index] = col.texts.get(choice.index, "") + (choice.delta.content or "")
            if choice.logprobs and choice.logprobs.content:
                col.tokens.setdefault(choice.index, []).extend(choice.logprobs.content)
            if choice.finish_reason:
                col.finish[choice.index] = choice.finish_reason
        col.usage = chunk.usage or col.usage

    def _finished(self) -> None:
        with self._lock:
            if not self.running or not all(c.done for c in self.columns.values()):
                return
            self.running = False
        self.status_line.ok(f"done: {len(self.columns)} model(s)")
        self.refresh_output()

    # ------------------------------------------------------------------ rendering

    def _sample_html(self, col: Column, i: int, base: Column | None) -> str:
        text = col.texts.get(i, "")
        if self.view.value == "logprobs" and col.tokens.get(i):
            return logprob_html(col.tokens[i])
        if self.view.value == "diff" and base is not None and base is not col and base.done and col.done:
            return diff_html(base.texts.get(i, ""), text)
        return html.escape(text)

    def _column_html(self, col: Column, base: Column | None) -> str:
        samples = sorted(col.texts) or [0]
        body = "".join(
            f'<div class="sample" style="{SAMPLE}">{self._sample_html(col, i, base)}</div>' for i in samples
        )
        facts = []
        if col.usage:
            facts.append(
                f"{col.usage.prompt_tokens} prompt + {col.usage.completion_tokens} completion tokens"
            )
        if col.latency_s is not None:
            facts.append(f"{col.latency_s:.2f} s")
        error = f'<div style="color:{_theme.ERROR}">{html.escape(col.error)}</div>' if col.error else ""
        head = f"<b>{html.escape(col.model)}</b>{'' if col.done else ' …'}"
        return f'<div class="chat-column">{head}{error}{body}<small>{" · ".join(facts)}</small></div>'

    def render(self) -> None:
        """Redraw every column (called from the streaming threads as text arrives)."""
        cols = list(self.columns.values())
        base = cols[0] if cols else None
        for col in cols:
            self._views[col.model].value = self._column_html(col, base)

    def summary(self) -> str:
        if not self.run_settings:
            return f"ChatCompare: {len(self.models.value)} model(s), not run yet"
        p = self.run_settings["params"]
        state = "running" if self.running else "done"
        return (
            f"ChatCompare: {', '.join(self.run_settings['models'])}; temperature {p['temperature']}, "
            f"top_p {p['top_p']}, max tokens {p['max_tokens']}, {p['n']} sample(s): {state}"
        )

    def snapshot_html(self) -> str:
        """The last run as static HTML: its settings, prompt and columns."""
        cols = list(self.columns.values())
        base = cols[0] if cols else None
        prompt = "".join(
            f"<div><i>{html.escape(str(m.get('role')))}</i>: {html.escape(str(m.get('content')))}</div>"
            for m in self.run_settings.get("messages", [])
        )
        columns = "".join(
            f'<div style="{FROZEN_COLUMN}">{self._column_html(col, base)}</div>' for col in cols
        )
        note = f'<div style="color:{_theme.MUTED}">static copy: this widget ran again in a later cell</div>'
        return (
            f'<div class="chat-compare-snapshot" style="color:{_theme.TEXT}">{note}'
            f"<div>{html.escape(self.summary())}</div>{prompt}"
            f'<div style="display:flex;flex-wrap:wrap">{columns}</div></div>'
        )
