"""ChatCompare: one conversation against several models or checkpoints side by side, streamed.

With ``tools`` it compares agents: each model's tool calls stream in as collapsed JSON; tools given as
Python functions are run, their results shown (collapsed) and sent back, turn after turn, until the
model answers without a call or ``max_turns`` is reached.
"""

from __future__ import annotations

import html
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import ipywidgets as w
import pandas as pd
from traitlets import Bool, Dict

from .. import _theme, frames, seeding
from ..client import Client
from ..rollouts import FunctionTool, tool, tool_content
from ..types.chat import Usage
from ..types.training import Tool
from ._base import ToolkitWidget
from ._common import JOIN_TIMEOUT_S, StatusLine, button, error_text
from .chat_column import Column, Step, add_chunk, column_html
from .conversation import message_html

RENDER_EVERY_S = 0.1
WIDE = {"description_width": "initial"}
COLUMN = w.Layout(
    flex="1 1 0", min_width="220px", border=f"1px solid {_theme.BORDER}", padding="4px", margin="2px"
)
FROZEN_COLUMN = f"flex:1 1 0;min-width:220px;border:1px solid {_theme.BORDER};padding:4px;margin:2px"


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

    ``tools`` (Python functions, :func:`~toolkit.rollouts.tool` objects, or wire tool dicts) are sent
    with ``tool_choice``; the calls each model makes show collapsed beside the others'. Functions are
    run and their results sent back for up to ``max_turns`` turns; a wire dict is only shown (the
    sample stops at its call).

    ``seed`` makes a run repeatable: sample ``i`` of every model is a rollout seeded
    ``derive_seed(seed, i)`` (:mod:`toolkit.seeding`), so each model answers under the same random
    draws (default: the open experiment's seed, if any, else unseeded); ``run_settings["seed"]`` is
    the seed of the last run.
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
        tools: Sequence[Callable[..., Any] | Mapping[str, Any]] = (),
        tool_choice: str | Mapping[str, Any] = "auto",
        max_turns: int = 4,
        seed: int | None = None,
    ) -> None:
        self.client = client
        self.seed = seed
        self.messages = [dict(m) for m in messages] if messages else None
        self.tool_specs = [Tool.model_validate(t) if isinstance(t, Mapping) else tool(t).spec for t in tools]
        self.runnable: dict[str, FunctionTool] = {
            made.name: made for made in (tool(t) for t in tools if not isinstance(t, Mapping))
        }
        self.tool_choice = tool_choice
        self.max_turns = max_turns
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
        names = ", ".join(t.function.name for t in self.tool_specs)
        super().__init__(
            [
                w.HTML("<b>Models</b> (names or checkpoints <code>name:stepN</code>)"),
                w.HTML(f"tools: <code>{html.escape(names)}</code>" if names else ""),
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
        if self.tool_specs:
            params["tools"] = [t.model_dump(mode="json", exclude_none=True) for t in self.tool_specs]
            params["tool_choice"] = self.tool_choice
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
                        "tool_calls": sum(s.kind == "call" for s in col.steps.get(i, []))
                        + len(col.calls.get(i, {})),
                        "prompt_tokens": usage.prompt_tokens,
                        "completion_tokens": usage.completion_tokens,
                        "latency_s": col.latency_s,
                        "first_token_s": col.first_token_s,
                        "mean_logprob": sum(t.logprob for t in tokens) / len(tokens) if tokens else None,
                        "error": col.error,
                    }
                )
        columns = {"model": frames.STR, "sample": frames.INT, "text": frames.STR, "finish_reason": frames.STR}
        columns |= {"tool_calls": frames.INT}
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
        seed = seeding.resolve(self.seed, "chat_compare")
        self.run_settings = {
            "models": list(self.models.value),
            "messages": messages,
            "params": params,
            "seed": seed,
        }
        self.columns = {m: Column(m) for m in self.models.value}
        self._views = {m: w.HTML(layout=COLUMN) for m in self.columns}
        self.area.children = list(self._views.values())
        self._halt = threading.Event()
        self._threads = [
            threading.Thread(
                target=self._stream,
                args=(col, messages, params, self._halt, seed),
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
        self,
        col: Column,
        messages: list[dict[str, Any]],
        params: dict[str, Any],
        halt: threading.Event,
        seed: int | None,
    ) -> None:
        start = time.perf_counter()
        try:
            if not self.runnable:  # one request, n samples; tool calls are shown, not run
                with seeding.rollout_seed(_sample_seed(seed, 0)):
                    self._turn(col, messages, params, halt, start, sample=0)
            for i in range(params["n"] if self.runnable else 0):  # each sample its own conversation
                history = list(messages)
                with seeding.rollout_seed(_sample_seed(seed, i)):
                    for _ in range(self.max_turns):
                        self._turn(col, history, {**params, "n": 1}, halt, start, sample=i)
                        if halt.is_set() or not self._next_turn(col, i, history):
                            break
        except Exception as exc:
            col.error = error_text(exc)
        col.latency_s = time.perf_counter() - start
        col.done = True
        self.render()
        self._finished()

    def _turn(
        self,
        col: Column,
        history: list[dict[str, Any]],
        params: dict[str, Any],
        halt: threading.Event,
        start: float,
        sample: int,
    ) -> None:
        """Stream one request into the column, its choice ``k`` as sample ``sample + k``."""
        last = time.perf_counter()
        stream = self.client.chat.completions.create(messages=history, model=col.model, stream=True, **params)
        try:
            for chunk in stream:
                if halt.is_set():
                    break
                add_chunk(col, chunk, start, offset=sample)
                if time.perf_counter() - last > RENDER_EVERY_S:
                    last = time.perf_counter()
                    self.render()
        finally:
            getattr(stream, "close", lambda: None)()  # ends the HTTP response when halted

    def _next_turn(self, col: Column, sample: int, history: list[dict[str, Any]]) -> bool:
        """After a turn of ``sample`` that called tools the widget can run: the turn and the tools'
        results become steps and join ``history``; True when the conversation goes on."""
        pending = col.calls.get(sample, {})
        calls = [pending[k] for k in sorted(pending)]
        if not calls or not all(c["name"] in self.runnable for c in calls):
            return False
        col.calls[sample] = {}
        steps = col.steps.setdefault(sample, [])
        text = col.texts.get(sample, "")
        if text:
            steps.append(Step("text", text))
        steps += [Step("call", c["arguments"], c["name"], c["id"]) for c in calls]
        col.texts[sample], col.tokens[sample] = "", []
        wire_calls = [
            {"id": c["id"], "type": "function", "function": {"name": c["name"], "arguments": c["arguments"]}}
            for c in calls
        ]
        history.append({"role": "assistant", "content": text or None, "tool_calls": wire_calls})
        for c in calls:
            result = self._call_tool(c["name"], c["arguments"])
            steps.append(Step("result", result, c["name"], c["id"]))
            history.append({"role": "tool", "tool_call_id": c["id"], "content": result})
        self.render()
        return True

    def _call_tool(self, name: str, arguments: str) -> str:
        fn = self.runnable[name]
        try:
            return tool_content(fn(**fn.parse(arguments)))
        except Exception as exc:
            return f"error: {type(exc).__name__}: {exc}"

    def _finished(self) -> None:
        with self._lock:
            if not self.running or not all(c.done for c in self.columns.values()):
                return
            self.running = False
        self.status_line.ok(f"done: {len(self.columns)} model(s)")
        self.refresh_output()

    def render(self) -> None:
        """Redraw every column (called from the streaming threads as text arrives)."""
        cols = list(self.columns.values())
        base = cols[0] if cols else None
        for col in cols:
            self._views[col.model].value = column_html(col, base, self.view.value)

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
        prompt = "".join(message_html(m) for m in self.run_settings.get("messages", []))
        columns = "".join(
            f'<div style="{FROZEN_COLUMN}">{column_html(col, base, self.view.value)}</div>' for col in cols
        )
        note = f'<div style="color:{_theme.MUTED}">static copy: this widget ran again in a later cell</div>'
        return (
            f'<div class="chat-compare-snapshot" style="color:{_theme.TEXT}">{note}'
            f"<div>{html.escape(self.summary())}</div>{prompt}"
            f'<div style="display:flex;flex-wrap:wrap">{columns}</div></div>'
        )


def _sample_seed(seed: int | None, sample: int) -> int | None:
    return None if seed is None else seeding.derive_seed(seed, sample)
