"""TrajectoryBrowser: every stored rollout of a model, grouped as it was trained, filtered on the
server; read one as a chat, follow its prompt across steps, open its trace and its checkpoint."""

from __future__ import annotations

import html
from collections.abc import Sequence
from functools import partial
from itertools import groupby
from typing import Any

import ipywidgets as w
from traitlets import Int, List, Unicode

from .. import _theme
from ..client import Client
from ..client.training_ops import TrajectoryFilters
from ..types.training import as_message
from ..types.trajectories import StoredTrajectory
from ._base import ToolkitWidget
from ._common import StatusLine, button
from .checkpoints import CheckpointExplorer
from .conversation import message_html
from .traces import TraceBrowser

CELL = "display:inline-block;min-width:64px;padding:1px 6px;margin:1px;border-radius:3px;font-size:12px"
COLUMN = f"flex:1 1 0;min-width:180px;border:1px solid {_theme.BORDER};border-radius:4px;padding:4px"


def group_of(t: StoredTrajectory) -> tuple[int, str, int]:
    """The row a trajectory shows in: its step, split and group."""
    return t.step, t.split, t.group_id


def reward_color(reward: float, low: float, high: float) -> str:
    """Red (lowest reward on show) to green (highest), dark enough for white text in both themes."""
    share = 0.5 if high <= low else (reward - low) / (high - low)
    return f"hsl({round(120 * share)},60%,38%)"


def cell_label(t: StoredTrajectory) -> str:
    """A trajectory in a few characters: its reward and (once trained on) its advantage."""
    advantage = "" if t.advantage is None else f" A{t.advantage:+.2f}"
    flags = (" ✂" if t.truncated else "") + (" ⚠" if t.error else "")
    return f"{t.reward:.2f}{advantage}{flags}"


def _advantage(t: StoredTrajectory) -> str:
    return "" if t.advantage is None else f" · advantage {t.advantage:+.2f}"


def chat_html(t: StoredTrajectory) -> str:
    """A trajectory as a chat (tool calls folded, tool results collapsed JSON) under its facts."""
    facts = [f"#{t.id}", f"step {t.step}", t.split, f"group {t.group_id}", f"reward {t.reward:g}"]
    if t.advantage is not None:
        facts.append(f"advantage {t.advantage:+.3f} (trained into step {t.trained_step})")
    if t.truncated:
        facts.append("truncated")
    head = f"<div><b>{html.escape(' · '.join(facts))}</b></div>"
    error = f'<div style="color:{_theme.ERROR}">{html.escape(t.error)}</div>' if t.error else ""
    body = "".join(message_html(as_message(m)) for m in t.trajectory.messages_and_choices)
    return f'<div style="color:{_theme.TEXT}">{head}{error}{body}</div>'


def groups_html(records: Sequence[StoredTrajectory]) -> str:
    """The groups as rows (step, split, group) of reward-colored trajectory cells."""
    if not records:
        return "<i>no trajectories match</i>"
    low, high = min(r.reward for r in records), max(r.reward for r in records)
    rows = []
    for (step, split, group), members in groupby(records, key=group_of):
        cells = "".join(
            f'<span style="{CELL};background:{reward_color(t.reward, low, high)};color:white"'
            f' title="#{t.id}">{html.escape(cell_label(t))}</span>'
            for t in members
        )
        rows.append(
            f"<tr><td>step {step}</td><td>{html.escape(split)}</td><td>{group}</td>"
            f'<td style="text-align:left">{cells}</td></tr>'
        )
    head = "<tr><th>step</th><th>split</th><th>group</th><th>trajectories (reward, advantage)</th></tr>"
    return f'<table class="toolkit-table" style="font-size:12px">{head}{"".join(rows)}</table>'


def over_time_html(by_step: dict[int, list[StoredTrajectory]]) -> str:
    """The rollouts of one prompt, a column per step (oldest left); open one for its chat."""
    columns = []
    for step, rollouts in sorted(by_step.items()):
        items = "".join(
            f"<details><summary>reward <b>{t.reward:g}</b>{_advantage(t)} · #{t.id}</summary>"
            f"{chat_html(t)}</details>"
            for t in rollouts
        )
        columns.append(f'<div class="prompt-step" style="{COLUMN}"><b>step {step}</b>{items}</div>')
    return f'<div style="display:flex;gap:6px;overflow-x:auto">{"".join(columns)}</div>'


class TrajectoryBrowser(ToolkitWidget):
    """The stored trajectories of a model (``client.models.trajectories``): groups as rows of
    reward-colored cells (reward and advantage), filtered by the server (step range, split, reward
    range, zero-std groups, truncated, errors, text). Click a cell to read the trajectory as a chat;
    "Same prompt over time" shows the rollouts of its prompt at each step side by side; "Open trace"
    opens its rollout's call in a :class:`TraceBrowser` (of ``trace_project``) and "Open checkpoint"
    its checkpoints in a :class:`CheckpointExplorer`.

    :meth:`start` (or the first display) lists the models and loads ``model_id``'s newest
    ``limit`` trajectories. State traits: ``shown_model`` (its id), ``num_shown``, ``num_groups``,
    ``trajectory_id`` (the open one) and ``prompt_steps`` (the steps of the same-prompt view);
    :attr:`records` holds what is shown, :attr:`opened` the open trajectory.
    """

    shown_model = Unicode(None, allow_none=True)
    num_shown = Int(0)
    num_groups = Int(0)
    trajectory_id = Int(None, allow_none=True)
    prompt_steps = List(Int())

    def __init__(
        self, client: Client, model_id: str | None = None, *, trace_project: str = "", limit: int = 200
    ) -> None:
        self.client = client
        self.limit = limit
        self.records: list[StoredTrajectory] = []
        self.opened: StoredTrajectory | None = None
        self.over_time: dict[int, list[StoredTrajectory]] = {}
        self._picked = model_id
        self.model = w.Dropdown(description="model", options=[], layout=w.Layout(width="360px"))
        self.steps = w.IntRangeSlider(value=(0, 0), min=0, max=0, description="steps")
        self.split = w.Combobox(options=["train", "val", "test"], placeholder="any", description="split")
        self.reward_min = w.Text(placeholder="any", description="reward ≥", layout=w.Layout(width="180px"))
        self.reward_max = w.Text(placeholder="any", description="reward ≤", layout=w.Layout(width="180px"))
        self.zero_std = w.Checkbox(description="zero-std groups only", indent=False)
        self.truncated = w.Checkbox(description="truncated only", indent=False)
        self.errors = w.Checkbox(description="errors only", indent=False)
        self.search = w.Text(placeholder="text in messages or tool calls", description="search")
        self.trace_project = w.Text(value=trace_project, placeholder="entity/project", description="traces")
        self.grid = w.VBox()
        self.counts = w.HTML()
        self.chat = w.HTML()
        self.prompt_view = w.HTML()
        self.link_area = w.VBox()
        self.status_line = StatusLine()
        self.model.observe(self._model_picked, "value")
        links = w.HBox(
            [
                button("Same prompt over time", self.action("same prompt", self.same_prompt), icon="history"),
                button("Open trace", self.action("open trace", self.open_trace), icon="sitemap"),
                button(
                    "Open checkpoint", self.action("open checkpoint", self.open_checkpoint), icon="database"
                ),
            ]
        )
        for link in links.children:
            link.layout.width = "auto"
        super().__init__(
            [
                w.HBox([self.model, self.steps, self.split]),
                w.HBox([self.reward_min, self.reward_max, self.zero_std, self.truncated, self.errors]),
                w.HBox(
                    [
                        self.search,
                        self.trace_project,
                        button("Apply", self.action("load", self.load), "primary", "filter"),
                    ]
                ),
                self.status_line,
                self.counts,
                self.grid,
                self.chat,
                links,
                self.prompt_view,
                self.link_area,
            ]
        )

    # ------------------------------------------------------------------ logic

    def _start(self) -> None:
        models = self.client.models.list()
        self.model.options = [(f"{m.project}/{m.name} ({m.id[:8]})", m.id) for m in models]
        if self._picked in {m.id for m in models}:
            self.model.value = self._picked  # loads it
        elif self._picked is not None:
            raise ValueError(f"model {self._picked} is not one of yours")

    def _model_picked(self, change: dict[str, Any]) -> None:
        if change["new"]:
            with self.status_line.catching("load"):
                self.show(change["new"])

    def show(self, model_id: str) -> None:
        """Show a model: the step range spans its stored steps; load its trajectories."""
        newest = next(iter(self.client.models.trajectories(model_id, limit=1).data), None)
        top = newest.step if newest is not None else 0
        self.shown_model = model_id
        with self.steps.hold_trait_notifications():
            self.steps.max = max(top, 1)
            self.steps.value = (0, top)
        self.load()

    def filters(self) -> TrajectoryFilters:
        """The server filters the controls say (a bad reward bound raises ValueError)."""
        found: TrajectoryFilters = {}
        low, high = self.steps.value
        if low > 0:
            found["step_min"] = low
        if high < self.steps.max:
            found["step_max"] = high
        if self.split.value.strip():
            found["split"] = self.split.value.strip()
        for key, field in (("reward_min", self.reward_min), ("reward_max", self.reward_max)):
            if field.value.strip():
                try:
                    found[key] = float(field.value)  # type: ignore[literal-required]
                except ValueError:
                    raise ValueError(f"{field.description} needs a number, not {field.value!r}") from None
        if self.zero_std.value:
            found["zero_std_only"] = True
        if self.truncated.value:
            found["truncated_only"] = True
        if self.errors.value:
            found["errors_only"] = True
        if self.search.value.strip():
            found["search"] = self.search.value.strip()
        return found

    def load(self) -> list[StoredTrajectory]:
        """Read the newest ``limit`` trajectories matching the filters; draw them as groups."""
        if self.shown_model is None:
            raise ValueError("pick a model")
        filters = self.filters()
        page = self.client.models.trajectories(self.shown_model, limit=self.limit, **filters)
        self.records = list(page.data)
        groups = [(key, list(g)) for key, g in groupby(self.records, key=group_of)]
        low = min((r.reward for r in self.records), default=0.0)
        high = max((r.reward for r in self.records), default=0.0)
        self.grid.children = [self._row(key, members, low, high) for key, members in groups]
        more = (
            f" (the newest {self.limit}; narrow the filters for older ones)" if page.has_next_page() else ""
        )
        told = ", ".join(f"{k}={v}" for k, v in filters.items()) or "no filter"
        self.counts.value = (
            f"<div>{len(self.records)} trajectories in {len(groups)} groups{more} · {html.escape(told)}</div>"
        )
        with self.hold_trait_notifications():
            self.num_shown, self.num_groups = len(self.records), len(groups)
        self.refresh_output()
        return self.records

    def _row(
        self, key: tuple[int, str, int], members: list[StoredTrajectory], low: float, high: float
    ) -> w.HBox:
        step, split, group = key
        label = w.HTML(
            f"<code>step {step} · {html.escape(split)} · group {group}</code>", layout=w.Layout(width="230px")
        )
        cells = []
        for t in members:
            cell = button(
                cell_label(t),
                self.action("open", partial(self.open_trajectory, t.id)),
                tooltip=f"#{t.id}: open as a chat",
            )
            cell.style.button_color = reward_color(t.reward, low, high)
            cell.style.text_color = "white"
            cell.layout = w.Layout(width="auto", height="24px")
            cells.append(cell)
        return w.HBox([label, *cells])

    def open_trajectory(self, trajectory_id: int) -> StoredTrajectory:
        """Show one trajectory (of those on show) as a chat."""
        found = next((r for r in self.records if r.id == trajectory_id), None)
        if found is None:
            raise ValueError(f"trajectory {trajectory_id} is not on show")
        self.opened, self.trajectory_id = found, found.id
        self.chat.value = chat_html(found)
        self.refresh_output()
        return found

    def same_prompt(self) -> dict[int, list[StoredTrajectory]]:
        """The rollouts of the open trajectory's prompt at every step (all pages), side by side."""
        t = self._need_open()
        if t.prompt_key is None or self.shown_model is None:
            raise ValueError("this trajectory has no prompt before its first assistant turn")
        by_step: dict[int, list[StoredTrajectory]] = {}
        for r in self.client.models.trajectories(self.shown_model, prompt_key=t.prompt_key, limit=500):
            by_step.setdefault(r.step, []).append(r)
        self.over_time = by_step
        self.prompt_steps = sorted(by_step)
        self.prompt_view.value = f"<b>Same prompt over time</b>{over_time_html(by_step)}"
        self.refresh_output()
        return by_step

    def open_trace(self) -> TraceBrowser:
        """The open trajectory's rollout call in a :class:`TraceBrowser` of the trace project."""
        t = self._need_open()
        if t.trace_call_id is None:
            raise ValueError("this trajectory carries no trace call (log it with tracing on)")
        if not self.trace_project.value.strip():
            raise ValueError("give the trace project (entity/project) the rollouts were traced to")
        browser = TraceBrowser(self.client, self.trace_project.value.strip(), roots_only=True)
        browser.start()
        browser.open_call(t.trace_call_id)
        self._link(browser)
        return browser

    def open_checkpoint(self) -> CheckpointExplorer:
        """The model's checkpoints in a :class:`CheckpointExplorer`, with the one that sampled the open
        trajectory (its step) and the one trained on it selected."""
        t = self._need_open()
        model = t.model_id or self.shown_model or ""
        explorer = CheckpointExplorer(self.client, [model]).start()
        available = {value for _, value in explorer.selection.options}
        wanted = [(model, s) for s in dict.fromkeys((t.step, t.trained_step)) if s is not None]
        explorer.selection.value = tuple(p for p in wanted if p in available)
        self._link(explorer)
        return explorer

    def _need_open(self) -> StoredTrajectory:
        if self.opened is None:
            raise ValueError("click a trajectory first")
        return self.opened

    def _link(self, widget: ToolkitWidget) -> None:
        old = self.link_area.children
        self.link_area.children = [widget]
        for child in old:
            child.close()

    # ------------------------------------------------------------------ rendering

    def summary(self) -> str:
        if self.shown_model is None:
            return "TrajectoryBrowser: no model picked"
        shown = f"{self.num_shown} trajectories in {self.num_groups} groups"
        text = f"TrajectoryBrowser: model {self.shown_model[:8]}, {shown}"
        if self.trajectory_id is not None:
            text += f", #{self.trajectory_id} open"
        if self.prompt_steps:
            text += f", its prompt at steps {', '.join(map(str, self.prompt_steps))}"
        return text

    def snapshot_html(self) -> str:
        """The groups, the open chat and the same-prompt view, readable without a kernel."""
        parts = [f"<b>{html.escape(self.summary())}</b>", groups_html(self.records), self.chat.value]
        if self.over_time:
            parts.append(self.prompt_view.value)
        return f'<div style="color:{_theme.TEXT}">{"".join(parts)}</div>'

    def static_html(self) -> str | None:
        return self.snapshot_html()
