"""The lifecycle all toolkit widgets share: start on first display, close what was started, honest outputs."""

from __future__ import annotations

import html
from collections.abc import Callable
from typing import Any, Self

import ipywidgets as w
from traitlets import Bool, Int

from ._common import StatusLine


def current_cell() -> int | None:
    """The execution count of the cell running now (None outside IPython)."""
    from IPython import get_ipython

    shell = get_ipython()
    return None if shell is None else int(shell.execution_count)


def close_tree(widget: w.Widget) -> None:
    """Close every child widget of ``widget``, depth first (a toolkit widget closes its own tree)."""
    for child in list(getattr(widget, "children", ())):
        if not isinstance(child, ToolkitWidget):
            close_tree(child)
        child.close()


class ToolkitWidget(w.VBox):
    """Base of the toolkit's widgets; one rule for all of them:

    - ``__init__`` only builds the controls from its arguments: no network call, no thread.
    - :meth:`start` does the first load (models, checkpoints, calls) and starts background work (a
      monitor's polling). The first display calls it; so do the methods that need it (``wait``). It
      runs once; its errors show in the status line.
    - :meth:`close` stops every thread the widget started, waits for them, and closes the widget and
      its child widgets.
    - Settings are controls whose ``value`` trait can be read, set and observed (``compare.n.value``);
      other state is a trait of the widget itself (``monitor.status``, ``browser.page``).
    - The output under a cell tells the truth: beside the live view it carries :meth:`summary` as text
      (what a notebook saved without widget state shows), rewritten by :meth:`refresh_output` when
      the state settles. A method that produces new results for a later cell (``ChatCompare.run``)
      calls :meth:`follow_cell`: the earlier output is frozen as a static snapshot and the live widget
      moves to the calling cell.
    """

    started = Bool(False, help="start() ran: the first load is done and background work runs")
    shown_in = Int(None, allow_none=True, help="execution count of the cell whose output shows the widget")
    status_line: StatusLine
    _output: Any = None  # the display handle of the live output

    # ------------------------------------------------------------------ lifecycle

    def start(self) -> Self:
        """Do the first load and start background work (once)."""
        if not self.started:
            self.started = True
            with self.status_line.catching("loading"):
                self._start()
        return self

    def _start(self) -> None:
        """The first load and the background work of this widget (nothing by default)."""

    def _stop(self) -> None:
        """Stop the threads this widget started and wait for them (nothing by default)."""

    def close(self) -> None:
        """Stop every thread the widget started, then close it and its child widgets."""
        self._stop()
        close_tree(self)
        super().close()

    def action(self, doing: str, fn: Callable[[], object]) -> Callable[[], None]:
        """``fn`` as a button's handler: an exception it raises shows in the status line."""

        def run() -> None:
            with self.status_line.catching(doing):
                fn()

        return run

    # ------------------------------------------------------------------ outputs

    def summary(self) -> str:
        """The widget's state in one line of text."""
        return type(self).__name__

    def snapshot_html(self) -> str:
        """A static HTML copy of what the widget shows (frozen outputs)."""
        return f"<div>{html.escape(self.summary())}</div>"

    def static_html(self) -> str | None:
        """HTML carried beside the live view, which a notebook exported without widget state shows
        instead (nbconvert falls back to it); None: the text summary only."""
        return None

    def _repr_mimebundle_(self, **kwargs: Any) -> dict[str, Any] | None:
        bundle: dict[str, Any] | None = super()._repr_mimebundle_(**kwargs)
        if bundle is not None:
            bundle["text/plain"] = self.summary()
            if (static := self.static_html()) is not None:
                bundle["text/html"] = static
        return bundle

    def _ipython_display_(self) -> None:
        from IPython.display import display

        self.start()  # the first load lands before the front end draws the widget
        self._output = display(self._repr_mimebundle_(), raw=True, display_id=True)
        self.shown_in = current_cell()

    def refresh_output(self) -> None:
        """Rewrite the live output so that its text says the current state."""
        if self._output is not None and self.comm is not None:
            self._output.update(self._repr_mimebundle_(), raw=True)

    def follow_cell(self) -> None:
        """When the widget shows under an earlier cell than the one running, freeze that output as a
        static snapshot and show the live widget under the running cell."""
        cell = current_cell()
        if self._output is None or cell is None or cell == self.shown_in:
            return
        self._output.update({"text/html": self.snapshot_html(), "text/plain": self.summary()}, raw=True)
        self._ipython_display_()
