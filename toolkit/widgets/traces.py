"""TraceBrowser: filter a project's calls, page through them, open a trace's call tree, give feedback.

A trace whose root is an agent rollout (``toolkit.rollouts.Agent``) also shows as the agent's steps:
each model call with the calls it made, each tool call with its arguments and result (collapsed).
"""

from __future__ import annotations

import json
from datetime import datetime
from typing import Any

import ipywidgets as w
import pandas as pd
import plotly.graph_objects as go
from traitlets import Int, Unicode

from .. import _html, frames, plots
from ..client import Client
from ..client.traces import CallNode
from ..types.traces import Call
from ._base import ToolkitWidget
from ._common import FigureBox, StatusLine, button, frame_html
from .conversation import message_html, tool_call_html, tool_result_html

STATUSES = ("any", "success", "error", "running", "descendant_error")
SUMMARY_COLUMNS = ["name", "status", "started_at", "latency_ms", "total_tokens", "cost_usd"]
STEP_COLUMNS = {"step": frames.INT, "kind": frames.STR, "name": frames.STR, "input": frames.STR}
STEP_COLUMNS |= {"output": frames.STR, "status": frames.STR, "call_id": frames.STR}
ROLLOUT_OP = "rollout"
TOOL_PREFIX = "tool."


def _json(value: Any) -> str:
    return value if isinstance(value, str) else json.dumps(value, ensure_ascii=False)


def agent_steps(root: CallNode) -> list[dict[str, Any]]:
    """The steps of an agent rollout, in order: ``model`` calls (input: the last message sent; output:
    the answer, its tool calls as JSON) and ``tool`` calls (input: the arguments; output: the result).
    Empty when ``root`` is not a rollout."""
    if root.call.op_name != ROLLOUT_OP:
        return []
    rows = []
    for step, node in enumerate(root.children):
        call = node.call
        status = "error" if call.exception else "success"
        if call.op_name.startswith(TOOL_PREFIX):
            kind, name = "tool", call.op_name.removeprefix(TOOL_PREFIX)
            given, output = (
                _json(call.inputs),
                _json(call.output) if call.exception is None else call.exception,
            )
        else:
            messages = (call.inputs or {}).get("messages") or [{}]
            message = ((call.output or {}).get("choices") or [{}])[0].get("message") or {}
            kind, name = "model", str((call.inputs or {}).get("model") or call.op_name)
            given, output = _json(messages[-1]), _json(message)
        rows.append(
            {"step": step, "kind": kind, "name": name, "input": given, "output": output, "status": status}
            | {"call_id": call.id}
        )
    return rows


def steps_html(steps: pd.DataFrame) -> str:
    """An agent's steps: model turns with their tool calls, tool calls with their results (collapsed)."""
    parts = []
    for row in steps.itertuples():
        if row.kind == "tool":
            parts.append(tool_call_html(str(row.name), str(row.input)) + tool_result_html(str(row.output)))
        else:
            try:
                message = json.loads(str(row.output))
            except json.JSONDecodeError:
                message = {"content": row.output}
            parts.append(message_html({**message, "role": f"model {row.name}"}))
    return "".join(parts) or "<i>not an agent rollout</i>"


def calls_query(
    op: str = "",
    status: str = "any",
    text: str = "",
    since: datetime | None = None,
    until: datetime | None = None,
) -> dict[str, Any] | None:
    """The ``{"$expr": ...}`` query of the filters (None when nothing is filtered)."""

    def contains(path: str, substr: str) -> dict[str, Any]:
        return {"$contains": {"input": {"$getField": path}, "substr": substr, "case_insensitive": True}}

    parts: list[dict[str, Any]] = []
    if op:
        parts.append(contains("op_name", op))
    if status != "any":
        parts.append({"$eq": [{"$getField": "summary.weave.status"}, {"$literal": status}]})
    if text:
        parts.append({"$or": [contains("inputs", text), contains("output", text)]})
    if since is not None:
        parts.append({"$gte": [{"$getField": "started_at"}, {"$literal": since.isoformat()}]})
    if until is not None:
        parts.append({"$lt": [{"$getField": "started_at"}, {"$literal": until.isoformat()}]})
    if not parts:
        return None
    return {"$expr": parts[0] if len(parts) == 1 else {"$and": parts}}


def summary_html(df: pd.DataFrame) -> str:
    """Count, errors, latency (mean, p95) and total cost and tokens of a calls frame."""
    if df.empty:
        return "<i>no calls</i>"
    latency = df["latency_ms"].dropna()
    cost = df["cost_usd"].sum(min_count=1)
    facts = [
        f"{len(df)} calls",
        f"{int((df['status'] == 'error').sum())} errors",
        f"latency mean {latency.mean():.0f} ms, p95 {latency.quantile(0.95):.0f} ms" if len(latency) else "",
        f"{int(df['total_tokens'].sum())} tokens",
        f"cost ${cost:.6f}" if pd.notna(cost) else "",
    ]
    return "<div>" + " · ".join(f for f in facts if f) + "</div>"


class TraceBrowser(ToolkitWidget):
    """Calls of one project (``entity/project``): filter by op, status, time range and text (the
    service's query language), page through them, open a call to see its trace as a tree and its
    inputs, output and summary, and send thumbs-up/down or a note as feedback. An agent rollout's
    trace also lists its steps (:attr:`steps`: model turns and tool calls under the rollout).

    :meth:`start` (or the first display) runs the first search. The filters are controls (``op``,
    ``status_filter``, ``text``, ``since``, ``until``, ``roots_only``); state traits: ``project_id``,
    ``page``, ``page_size``, ``total`` (calls matching the filters) and ``call_id`` (the open call).
    """

    project_id = Unicode()
    page = Int(0)
    page_size = Int(20)
    total = Int(0)
    call_id = Unicode(None, allow_none=True)

    def __init__(
        self, client: Client, project_id: str, *, page_size: int = 20, roots_only: bool = False
    ) -> None:
        self.client = client
        self.calls: pd.DataFrame = frames.calls_frame([])
        self.call: Call | None = None
        self.trace: pd.DataFrame = frames.calls_frame([])
        self.steps: pd.DataFrame = frames.frame([], STEP_COLUMNS)
        self.op = w.Text(placeholder="op name contains", description="op")
        self.status_filter = w.Dropdown(options=STATUSES, value="any", description="status")
        self.text = w.Text(placeholder="search inputs and output", description="text")
        self.since = w.NaiveDatetimePicker(description="since")
        self.until = w.NaiveDatetimePicker(description="until")
        self.roots_only = w.Checkbox(value=roots_only, description="traces only (roots)")
        self.table = w.HTML()
        self.stats = w.HTML()
        self.pager = w.HTML()
        self.selection = w.Select(rows=8, layout=w.Layout(width="100%"))
        self.plot = FigureBox(plots.call_tree(self.trace))
        self.detail = w.HTML()
        self.agent_view = w.HTML()
        self.note = w.Text(placeholder="note", description="note")
        self.status_line = StatusLine()
        self.selection.observe(self._selected, "value")
        # Font Awesome icons render everywhere; emoji need a font the browser may lack
        self.thumbs_up = button(
            "", lambda: self.react("👍"), icon="thumbs-up", tooltip="Thumbs up on the open call"
        )
        self.thumbs_down = button(
            "", lambda: self.react("👎"), icon="thumbs-down", tooltip="Thumbs down on the open call"
        )
        feedback = w.HBox(
            [
                self.thumbs_up,
                self.thumbs_down,
                self.note,
                button("Add note", lambda: self.add_note(self.note.value), icon="comment"),
            ]
        )
        super().__init__(
            [
                w.HBox([self.op, self.status_filter, self.text]),
                w.HBox(
                    [
                        self.since,
                        self.until,
                        self.roots_only,
                        button("Search", self.search, "primary", "search"),
                    ]
                ),
                self.stats,
                self.table,
                w.HBox(
                    [
                        button("Prev", self.action("previous page", self.prev_page), icon="chevron-left"),
                        self.pager,
                        button("Next", self.action("next page", self.next_page), icon="chevron-right"),
                    ]
                ),
                self.selection,
                self.plot,
                self.agent_view,
                self.detail,
                feedback,
                self.status_line,
            ]
        )
        self.project_id, self.page_size = project_id, page_size

    # ------------------------------------------------------------------ logic

    def _start(self) -> None:
        self.search()

    @property
    def tree(self) -> go.FigureWidget:
        """The figure on show."""
        return self.plot.figure

    def query(self) -> dict[str, Any] | None:
        return calls_query(
            self.op.value.strip(),
            self.status_filter.value,
            self.text.value.strip(),
            self.since.value,
            self.until.value,
        )

    def _request(self) -> dict[str, Any]:
        req: dict[str, Any] = {"project_id": self.project_id, "query": self.query()}
        if self.roots_only.value:
            req["filter"] = {"trace_roots_only": True}
        return req

    def search(self) -> pd.DataFrame:
        """Count the matching calls and show the first page (an error shows in the status line)."""
        self.page = 0
        with self.status_line.catching("search"):
            self.total = self.client.traces.calls_query_stats(**self._request()).count
            self.load_page()
        return self.calls

    def load_page(self) -> pd.DataFrame:
        """The current page of calls, newest first, with costs."""
        calls = list(
            self.client.traces.calls_query(
                **self._request(),
                sort_by=[{"field": "started_at", "direction": "desc"}],
                limit=self.page_size,
                offset=self.page * self.page_size,
                include_costs=True,
            )
        )
        self.calls = frames.calls_frame(calls)
        self.table.value = frame_html(self.calls[SUMMARY_COLUMNS])
        self.stats.value = summary_html(self.calls)
        pages = max(1, -(-self.total // self.page_size))
        self.pager.value = f"page {self.page + 1} of {pages} ({self.total} calls)"
        self.selection.options = [
            (f"{r.started_at:%H:%M:%S} {r.name} [{r.status}]", r.id) for r in self.calls.itertuples()
        ]
        return self.calls

    def next_page(self) -> None:
        if (self.page + 1) * self.page_size < self.total:
            self.page += 1
            self.load_page()

    def prev_page(self) -> None:
        if self.page > 0:
            self.page -= 1
            self.load_page()

    def open_call(self, call_id: str) -> Call:
        """Show a call's inputs, output and summary, and its whole trace as a tree."""
        call = self.client.traces.call_read(project_id=self.project_id, id=call_id, include_costs=True).call
        if call is None:
            raise KeyError(call_id)
        self.call, self.call_id = call, call.id
        nodes = self.client.traces.call_tree(self.project_id, call.trace_id)
        self.trace = frames.calls_frame([c for root in nodes for _, c in root.walk()])
        self.plot.show(plots.call_tree(self.trace))
        self.steps = frames.frame([row for root in nodes for row in agent_steps(root)], STEP_COLUMNS)
        self.agent_view.value = "" if self.steps.empty else "<b>Agent steps</b>" + steps_html(self.steps)
        self.detail.value = _html.call_html(call)
        return call

    def _selected(self, change: dict[str, Any]) -> None:
        if change["new"]:
            with self.status_line.catching("open call"):
                self.open_call(change["new"])

    def _feedback(self, feedback_type: str, payload: dict[str, Any]) -> None:
        if self.call is None:
            self.status_line.info("open a call first")
            return
        with self.status_line.catching("feedback"):
            self.client.traces.feedback_create(
                project_id=self.project_id,
                weave_ref=f"weave:///{self.project_id}/call/{self.call.id}",
                feedback_type=feedback_type,
                payload=payload,
            )
            self.status_line.ok(f"feedback saved on {self.call.id[:8]}")

    def react(self, emoji: str) -> None:
        """Thumbs up/down (any single emoji) on the open call."""
        self._feedback("wandb.reaction.1", {"emoji": emoji})

    def add_note(self, note: str) -> None:
        self._feedback("wandb.note.1", {"note": note})
        self.note.value = ""

    def feedback(self) -> list[dict[str, Any]]:
        """The feedback rows of the open call."""
        if self.call is None:
            return []
        ref = f"weave:///{self.project_id}/call/{self.call.id}"
        query = {"$expr": {"$eq": [{"$getField": "weave_ref"}, {"$literal": ref}]}}
        return list(self.client.traces.feedback_query(project_id=self.project_id, query=query).result)

    def to_frame(self) -> pd.DataFrame:
        """Every call matching the filters (all pages) as a frame."""
        return frames.calls_frame(self.client.traces.calls_query(**self._request(), include_costs=True))

    def summary(self) -> str:
        opened = f", call {self.call_id[:8]} open" if self.call_id else ""
        return f"TraceBrowser: {self.project_id}, {self.total} calls match{opened}"
