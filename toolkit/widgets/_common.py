"""Shared pieces of the widgets: background loops, error text, frame tables and live figures."""

from __future__ import annotations

import html
import threading
from collections.abc import Callable

import ipywidgets as w
import pandas as pd
import plotly.graph_objects as go

from ..client import APIStatusError

TABLE_CSS = "max-height:320px;overflow:auto;font-size:12px"


def error_text(exc: BaseException) -> str:
    """A one-line description of an exception (the server's message for API errors)."""
    if isinstance(exc, APIStatusError):
        return f"{exc.status_code}: {exc.message}"
    return f"{type(exc).__name__}: {exc}"


def message(kind: str, text: str) -> str:
    """HTML of a status line; ``kind`` is ``ok``, ``error`` or ``info``."""
    color = {"ok": "#2ca02c", "error": "#d62728"}.get(kind, "#555")
    return f'<div style="color:{color};white-space:pre-wrap">{html.escape(text)}</div>'


def frame_html(df: pd.DataFrame, max_rows: int = 200) -> str:
    """A frame as a scrollable HTML table (the newest ``max_rows`` rows)."""
    body = df.tail(max_rows).to_html(index=False, na_rep="", border=0, classes="toolkit-table")
    return f'<div style="{TABLE_CSS}">{body}</div>'


class FigureBox(w.Box):
    """A box showing one plotly figure as a ``FigureWidget``; :meth:`show` swaps in a new one.

    Swapping (and closing the old widget) renders reliably in the browser, where adding and removing
    traces of a displayed FigureWidget does not always reach the front end.
    """

    def __init__(self, fig: go.Figure) -> None:
        super().__init__([go.FigureWidget(fig)])

    @property
    def figure(self) -> go.FigureWidget:
        return self.children[0]

    def show(self, fig: go.Figure) -> None:
        old = self.figure
        self.children = (go.FigureWidget(fig),)
        old.close()


def button(description: str, on_click: Callable[[], object], style: str = "", icon: str = "") -> w.Button:
    """A button calling ``on_click()`` (no argument)."""
    b = w.Button(description=description, button_style=style, icon=icon)
    b.on_click(lambda _: on_click())
    return b


class Loop:
    """A daemon thread calling ``tick()`` every ``interval`` seconds until it returns False or ``stop()``.

    Runs beside the kernel's event loop (no nest_asyncio), so cells keep running while it polls.
    """

    def __init__(self, tick: Callable[[], bool], interval: float, name: str) -> None:
        self._tick = tick
        self._interval = interval
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name=name, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while not self._stop.is_set() and self._tick():
            self._stop.wait(self._interval)

    @property
    def running(self) -> bool:
        return self._thread.is_alive()

    def stop(self) -> None:
        self._stop.set()

    def join(self, timeout: float | None = None) -> bool:
        """Wait for the loop to end; True if it did."""
        self._thread.join(timeout)
        return not self._thread.is_alive()
