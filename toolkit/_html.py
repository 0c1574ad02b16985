"""Rich HTML of jobs, checkpoints, trajectory groups, completions, trace calls and the system check.

Pure functions ``obj -> str``; :func:`install` attaches them as ``_repr_html_`` to the wire types so a
bare ``obj`` in a cell renders as a card. Outside Jupyter the models keep their text ``repr``.
"""

from __future__ import annotations

import html
import json
from collections.abc import Callable, Iterable, Mapping
from typing import Any

from pydantic import BaseModel

from . import _theme
from ._text import visible
from .types.chat import ChatCompletion
from .types.service import SystemCheck
from .types.traces import Call
from .types.training import Checkpoint, Model, TrainingJob, Trajectory, TrajectoryGroup

STATUS_COLORS = {
    "succeeded": _theme.SUCCESS,
    "ok": _theme.SUCCESS,
    "success": _theme.SUCCESS,
    "failed": _theme.ERROR,
    "error": _theme.ERROR,
    "cancelled": _theme.MUTED,
    "running": _theme.BRAND,
    "queued": _theme.WARN,
}
CARD = (
    f"border:1px solid {_theme.BORDER};border-radius:6px;padding:6px 10px;margin:2px 0;"
    f"font-size:13px;max-width:900px;color:{_theme.TEXT}"
)
CELL = "padding:2px 8px;text-align:left;vertical-align:top"


def esc(value: Any) -> str:
    """HTML-escaped text, control characters shown as escapes (:func:`toolkit._text.visible`)."""
    return html.escape(visible("" if value is None else str(value)))


def badge(text: str | None) -> str:
    background = STATUS_COLORS.get(text or "", _theme.MUTED)
    style = f"background:{background};color:{_theme.ON_COLOR};border-radius:4px;padding:1px 6px"
    return f'<span style="{style}">{esc(text or "?")}</span>'


def table(rows: Iterable[Iterable[Any]], header: Iterable[str] | None = None) -> str:
    """A small HTML table; cells are escaped unless they are already HTML (wrapped in :class:`Raw`)."""

    def cell(v: Any, tag: str = "td") -> str:
        return f'<{tag} style="{CELL}">{v.html if isinstance(v, Raw) else esc(v)}</{tag}>'

    head = "<tr>" + "".join(cell(h, "th") for h in header) + "</tr>" if header else ""
    body = "".join("<tr>" + "".join(cell(v) for v in row) + "</tr>" for row in rows)
    return f'<table style="border-collapse:collapse">{head}{body}</table>'


class Raw:
    """A table cell that is already HTML."""

    def __init__(self, html_text: str) -> None:
        self.html = html_text


def card(title: str, body: str) -> str:
    return f'<div style="{CARD}"><b>{title}</b>{body}</div>'


def _fields(obj: BaseModel, names: Iterable[str]) -> str:
    return table((n, getattr(obj, n)) for n in names if getattr(obj, n, None) is not None)


def model_html(model: Model) -> str:
    body = _fields(model, ("id", "entity", "project", "base_model", "latest_step", "created_at"))
    return card(f"Model {esc(model.name)}", body)


def job_html(job: TrainingJob) -> str:
    names = (
        "id",
        "model_id",
        "kind",
        "queue_position",
        "num_sequences",
        "base_step",
        "result_step",
        "created_at",
        "finished_at",
    )
    error = (
        f'<pre style="color:{_theme.ERROR};white-space:pre-wrap">{esc(job.error)}</pre>' if job.error else ""
    )
    return card(f"Training job {badge(job.status)}", _fields(job, names) + error)


def checkpoint_html(ckpt: Checkpoint) -> str:
    metrics = table(sorted(ckpt.metrics.items()), ("metric", "value")) if ckpt.metrics else ""
    untrained = " (untrained: the weights of the step before)" if ckpt.trained is False else ""
    return card(f"Checkpoint step {ckpt.step}{untrained}", _fields(ckpt, ("id", "created_at")) + metrics)


def _content(traj: Trajectory) -> str:
    last = traj.messages_and_choices[-1] if traj.messages_and_choices else None
    content = getattr(getattr(last, "message", last), "content", None)
    text = content if isinstance(content, str) else json.dumps(content)
    return text if len(text) <= 120 else text[:117] + "..."


def group_html(group: TrajectoryGroup) -> str:
    rows = [
        (i, f"{t.reward:.3f}", len(t.messages_and_choices), _content(t))
        for i, t in enumerate(group.trajectories)
    ]
    exceptions = f"<div>{len(group.exceptions)} exception(s)</div>" if group.exceptions else ""
    body = table(rows, ("#", "reward", "messages", "last content")) + exceptions
    return card(f"Trajectory group ({len(group.trajectories)} trajectories)", body)


def completion_html(completion: ChatCompletion) -> str:
    rows = [
        (
            c.index,
            c.finish_reason,
            Raw(f'<pre style="white-space:pre-wrap;margin:0">{esc(c.message.content)}</pre>'),
        )
        for c in completion.choices
    ]
    u = completion.usage
    usage = f"<div>tokens: {u.prompt_tokens} prompt + {u.completion_tokens} completion</div>"
    return card(f"Completion from {esc(completion.model)}", table(rows, ("#", "finish", "content")) + usage)


def call_html(call: BaseModel | Mapping[str, Any]) -> str:
    """A trace call (model or dict): name, status, latency, tokens, cost, inputs and output."""
    from .frames import call_summary

    s = call_summary(call)
    c = call.model_dump(mode="json") if isinstance(call, BaseModel) else call
    facts = [(k, s[k]) for k in ("id", "trace_id", "started_at", "latency_ms", "total_tokens", "cost_usd")]
    io = [
        (k, Raw(f"<pre style='margin:0'>{esc(json.dumps(c.get(k), indent=1)[:2000])}</pre>"))
        for k in ("inputs", "output")
    ]
    return card(f"Call {esc(s['name'])} {badge(s['status'])}", table(facts + io))


def system_check_html(check: SystemCheck) -> str:
    """The deployment's system check: each component ok or failed, its time, and its error (the chat
    engine's device for the GPU queue)."""

    def status(success: bool) -> Raw:
        return Raw(badge("ok" if success else "failed"))

    parts = {"database": check.database, "cpu queue": check.cpu_queue, "gpu queue": check.gpu_queue}
    rows: list[tuple[Any, ...]] = [("api", status(check.api), "", "")]
    for name, part in parts.items():
        device = getattr(part, "device", None)
        note = part.error or (f"device {device}" if device else "")
        rows.append((name, status(part.success), f"{part.duration_ms:.1f} ms", note))
    ok = check.api and all(part.success for part in parts.values())
    body = table(rows, ("component", "status", "time", "note"))
    return card(f"System check {badge('ok' if ok else 'failed')}", body)


REPRS: dict[type[BaseModel], Callable[[Any], str]] = {
    Model: model_html,
    TrainingJob: job_html,
    Checkpoint: checkpoint_html,
    TrajectoryGroup: group_html,
    ChatCompletion: completion_html,
    Call: call_html,
    SystemCheck: system_check_html,
}


def install() -> None:
    """Attach ``_repr_html_`` to the wire types (idempotent)."""
    for cls, render in REPRS.items():
        cls._repr_html_ = render  # type: ignore[attr-defined]
