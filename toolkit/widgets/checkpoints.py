"""CheckpointExplorer: the checkpoints of one or more models as a table and a metric figure (or their
lineage tree), with select-and-delete (confirmed) and "chat with this checkpoint"."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import ipywidgets as w
import pandas as pd
import plotly.graph_objects as go
from traitlets import List, Tuple, Unicode, validate

from .. import frames, plots
from ..client import Client
from ..types.training import Model
from ._base import ToolkitWidget
from ._common import FigureBox, StatusLine, button, frame_html
from .chat import ChatCompare

LEADING = ("model", "step", "trained", "created_at")


def checkpoint_name(model: Model, step: int) -> str:
    """The name the chat endpoint serves a checkpoint under: ``<model name>:step<N>``."""
    return f"{model.name}:step{step}"


class MetricPicker(w.Dropdown):
    """A dropdown that takes a value before its options arrive (it is the only option until they
    do), so ``explorer.metric.value = "train/reward"`` works before the first load."""

    @validate("value")
    def _validate_value(self, proposal: Any) -> Any:
        if proposal.value is not None and not self._options_values:
            self.options = [proposal.value]
        return super()._validate_value(proposal)


class CheckpointExplorer(ToolkitWidget):
    """Every checkpoint (all pages) of the chosen models; pick a metric to plot over steps, select
    checkpoints to delete (after a confirmation) or to open in a :class:`ChatCompare`.

    :meth:`start` (or the first display) loads the models and the checkpoints of ``model_ids``. The
    table shows the columns that hold values first and leaves out those without any; ``trained`` is
    false for a step whose job trained nothing (listed "(untrained)" for selection). The ``view``
    toggle swaps the metric figure for the models' lineage (:func:`toolkit.plots.lineage`: the
    checkpoint tree, each node's job config and metrics on hover). State traits: ``pending`` (the
    checkpoints a delete waits to confirm, as ``(model id, step)`` pairs) and ``shown`` (``metric``
    or ``lineage``, the figure on show).
    """

    pending = List(Tuple())
    shown = Unicode("metric")

    def __init__(self, client: Client, model_ids: Sequence[str] = ()) -> None:
        self.client = client
        self.checkpoints: pd.DataFrame = frames.checkpoints_frame([])
        self._models: dict[str, Model] = {}
        self._select = list(model_ids)
        self.models = w.SelectMultiple(description="models", rows=4, layout=w.Layout(width="420px"))
        self.metric = MetricPicker(description="metric", options=[])
        self.view = w.ToggleButtons(options=["metric", "lineage"], value="metric", description="view")
        self.selection = w.SelectMultiple(description="checkpoints", rows=6, layout=w.Layout(width="420px"))
        self.plot = FigureBox(plots.checkpoint_metrics(self.checkpoints, "step"))
        self.table = w.HTML()
        self.status_line = StatusLine()
        self.confirm_box = w.HBox(layout=w.Layout(display="none"))
        self.chat_area = w.VBox()
        self._refreshing = False  # refresh() plots once, not on each change of the metric list
        self.metric.observe(self._metric_changed, "value")
        self.view.observe(lambda _: self._plot(), "value")
        actions = w.VBox(
            [
                button("Delete…", self.request_delete, "danger", "trash"),
                button("Chat with this checkpoint", self.action("chat", self.chat), icon="comments"),
            ]
        )
        super().__init__(
            [
                w.HBox(
                    [self.models, button("Load", self.action("load", self.refresh), "primary", "refresh")]
                ),
                w.HBox([self.metric, self.view]),
                self.plot,
                self.table,
                w.HBox([self.selection, actions]),
                self.confirm_box,
                self.status_line,
                self.chat_area,
            ]
        )

    # ------------------------------------------------------------------ logic

    @property
    def figure(self) -> go.FigureWidget:
        """The figure on show."""
        return self.plot.figure

    def _start(self) -> None:
        self.load_models(select=self._select)

    def load_models(self, select: Sequence[str] = ()) -> None:
        """List the models to choose from; select ``select`` and read their checkpoints."""
        self._models = {m.id: m for m in self.client.models.list()}
        self.models.options = [(f"{m.project}/{m.name}", m.id) for m in self._models.values()]
        self.models.value = tuple(m for m in select if m in self._models)
        if self.models.value:
            self.refresh()

    def refresh(self) -> pd.DataFrame:
        """Read every checkpoint of the selected models; update the table, metric list and figure."""
        ids = list(self.models.value)
        self.checkpoints = (
            frames.fetch_checkpoints(self.client, *ids) if ids else frames.checkpoints_frame([])
        )
        named = self.checkpoints.assign(model=self.checkpoints["model_id"].map(self._label))
        shown = frames.with_values_first(named.drop(columns=["id", "model_id"]), LEADING)
        metrics = [c for c in shown.columns if c not in LEADING]
        current = self.metric.value
        preferred = next((m for m in metrics if m.endswith("/reward")), metrics[0] if metrics else None)
        self._refreshing = True
        try:
            self.metric.options = metrics
            self.metric.value = current if current in metrics else preferred
        finally:
            self._refreshing = False
        rows = zip(
            self.checkpoints["model_id"], self.checkpoints["step"], self.checkpoints["trained"], strict=True
        )
        self.selection.options = [
            (f"{self._label(m)} step {s}{'' if pd.isna(t) or t else ' (untrained)'}", (m, int(s)))
            for m, s, t in rows
        ]
        self.table.value = frame_html(shown)
        self._plot()
        return self.checkpoints

    def request_delete(self, selected: Sequence[tuple[str, int]] | None = None) -> None:
        """Ask to confirm deleting the selected checkpoints; nothing is deleted yet."""
        self.pending = list(selected if selected is not None else self.selection.value)
        if not self.pending:
            self.status_line.info("select checkpoints first")
            return
        text = ", ".join(f"{self._label(m)}:step{s}" for m, s in self.pending)
        question = StatusLine()
        question.warn(f"Delete {len(self.pending)} checkpoint(s)? {text}")
        self.confirm_box.children = [
            question,
            button("Confirm delete", self.confirm_delete, "danger"),
            button("Cancel", self.cancel_delete),
        ]
        self.confirm_box.layout.display = None

    def confirm_delete(self) -> int:
        """Delete the checkpoints of the pending request; returns how many went."""
        deleted, kept = 0, 0
        with self.status_line.catching("delete"):
            for model_id in dict.fromkeys(m for m, _ in self.pending):
                steps = [s for m, s in self.pending if m == model_id]
                result = self.client.models.checkpoints.delete(model_id, steps)
                deleted += result.deleted_count
                kept += len(result.kept_steps)
            note = f"; kept {kept} current step(s), which training continues from" if kept else ""
            self.status_line.ok(f"deleted {deleted} checkpoint(s){note}")
        self.cancel_delete()
        with self.status_line.catching("reload"):
            self.refresh()
        return deleted

    def cancel_delete(self) -> None:
        self.pending = []
        self.confirm_box.layout.display = "none"

    def chat(self, selected: Sequence[tuple[str, int]] | None = None) -> ChatCompare:
        """A :class:`ChatCompare` over the selected checkpoints, shown below the table."""
        picked = list(selected if selected is not None else self.selection.value)
        names = [checkpoint_name(self._models[m], s) for m, s in picked]
        compare = ChatCompare(self.client, models=names)
        for old in self.chat_area.children:
            old.close()
        self.chat_area.children = [compare]
        return compare

    def summary(self) -> str:
        metric = f", metric {self.metric.value}" if self.metric.value else ""
        counts = f"{len(self.models.value)} model(s), {len(self.checkpoints)} checkpoints"
        return f"CheckpointExplorer: {counts}{metric}"

    # ------------------------------------------------------------------ rendering

    def _label(self, model_id: str) -> str:
        model = self._models.get(model_id)
        return model.name if model else model_id[:8]

    def _metric_changed(self, _: object) -> None:
        if not self._refreshing:
            self._plot()

    def _plot(self) -> None:
        if self.view.value == "lineage" and self.models.value:
            with self.status_line.catching("lineage"):
                self.plot.show(plots.lineage(self.client, *self.models.value))
                self.shown = "lineage"
            return
        df = self.checkpoints.assign(model_id=self.checkpoints["model_id"].map(self._label))
        self.plot.show(plots.checkpoint_metrics(df, self.metric.value or "step"))
        self.shown = "metric"
