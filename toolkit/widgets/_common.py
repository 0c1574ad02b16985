"""Shared pieces of the widgets: the status line, buttons, frame tables, live figures, background loops."""

from __future__ import annotations

import html
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from functools import cache

import ipywidgets as w
import pandas as pd
import plotly
import plotly.graph_objects as go
from traitlets import Unicode, observe

from .. import _theme
from ..client import APIStatusError

TABLE_CSS = "max-height:320px;overflow:auto;font-size:12px"
TABLE_STYLE = (
    "<style>.toolkit-table{border-collapse:collapse}"
    f".toolkit-table th{{text-align:left;border-bottom:1px solid {_theme.BORDER};padding:2px 6px}}"
    ".toolkit-table td{padding:2px 6px}</style>"
)
KIND_COLORS = {"ok": _theme.SUCCESS, "info": _theme.MUTED, "warning": _theme.WARN, "error": _theme.ERROR}
JOIN_TIMEOUT_S = 60.0  # how long close() waits for a widget's thread to finish its current request


def error_text(exc: BaseException) -> str:
    """A one-line description of an exception (the server's message for API errors)."""
    if isinstance(exc, APIStatusError):
        return f"{exc.status_code}: {exc.message}"
    return f"{type(exc).__name__}: {exc}"


class StatusLine(w.HTML):
    """A widget's status line: ``kind`` (``ok``, ``info``, ``warning`` or ``error``) and ``text``.

    Every error a widget shows goes through :meth:`error` (or :meth:`catching`), which turns an API
    error or any exception into one readable line.
    """

    kind = Unicode("")
    text = Unicode("")

    @observe("kind", "text")
    def _render(self, _: object = None) -> None:
        color = KIND_COLORS.get(self.kind, _theme.TEXT)
        body = html.escape(self.text)
        self.value = f'<div style="color:{color};white-space:pre-wrap">{body}</div>' if self.text else ""

    def show(self, kind: str, text: str) -> None:
        self.kind, self.text = kind, text

    def ok(self, text: str) -> None:
        self.show("ok", text)

    def info(self, text: str) -> None:
        self.show("info", text)

    def warn(self, text: str) -> None:
        self.show("warning", text)

    def error(self, problem: BaseException | str, doing: str = "") -> None:
        """Show an exception (or a message) as the error line, prefixed with what failed."""
        text = error_text(problem) if isinstance(problem, BaseException) else problem
        self.show("error", f"{doing} failed: {text}" if doing else text)

    @contextmanager
    def catching(self, doing: str = "") -> Iterator[None]:
        """Run the block; an exception raised in it becomes the error line instead of a traceback."""
        try:
            yield
        except Exception as exc:
            self.error(exc, doing)


def frame_html(df: pd.DataFrame, max_rows: int = 200) -> str:
    """A frame as a scrollable HTML table (the newest ``max_rows`` rows)."""
    body = df.tail(max_rows).to_html(index=False, na_rep="", border=0, classes="toolkit-table")
    return f'{TABLE_STYLE}<div style="{TABLE_CSS}">{body}</div>'


# The front end of WholeFigureWidget: a small module that imports plotly's widget module (a 5 MB
# bundle, sent as the ``_bundle`` trait) once per page and shares it between every figure widget. Each
# model importing the bundle again took seconds on a loaded machine, past the 2 s anywidget gives a
# model to initialise: the messages the kernel sent to such a model were console errors
# ("[anywidget] Failed to initialize model."). This module initialises a model at once; the figure is
# drawn when the shared bundle is in.
SHARED_ESM = """\
const KEY = Symbol.for("toolkit.plotly-figure-widget/PLOTLY_VERSION");

function plotlyWidget(model) {
  globalThis[KEY] ??= (async () => {
    const url = URL.createObjectURL(new Blob([model.get("_bundle")], { type: "text/javascript" }));
    try {
      return (await import(url)).default;
    } catch (error) {
      delete globalThis[KEY];
      throw error;
    } finally {
      URL.revokeObjectURL(url);
    }
  })();
  return globalThis[KEY];
}

export default () => {
  let widget;
  return {
    initialize(context) {
      widget = plotlyWidget(context.model).then((create) => {
        const def = typeof create === "function" ? create() : create;
        def.initialize(context);
        return def;
      });
    },
    async render(context) {
      return (await widget).render(context);
    },
  };
};
""".replace("PLOTLY_VERSION", plotly.__version__)


@cache
def plotly_bundle() -> str:
    """plotly's widget module (the front end of its ``FigureWidget``)."""
    return str(go.FigureWidget._esm)  # anywidget's FileContents of the bundle


class WholeFigureWidget(go.FigureWidget):
    """A ``FigureWidget`` whose comm opens once its data and layout are set, and whose front end shares
    one import of plotly's bundle with the page's other figures (:data:`SHARED_ESM`).

    plotly's own opens it in the middle of its constructor, with no traces and no layout, and sends
    them just after; a view the front end draws in between stays empty for good (the widget's script
    ignores later changes of its data), which happened now and then to figures swapped in.
    """

    _esm = SHARED_ESM
    _bundle = Unicode("").tag(sync=True)
    _building = False

    def __init__(self, fig: go.Figure) -> None:
        self._building = True
        try:
            super().__init__(fig)
        finally:
            self._building = False
        self._view_count = None  # no view counting: its messages to a widget closed early are errors
        self._bundle = plotly_bundle()
        self.open()

    def open(self) -> None:
        if not self._building:
            super().open()


class FigureBox(w.Box):
    """A box showing one plotly figure as a ``FigureWidget``; :meth:`show` swaps in a new one.

    Swapping (and closing the old widget) renders reliably in the browser, where adding and removing
    traces of a displayed FigureWidget does not always reach the front end.
    """

    def __init__(self, fig: go.Figure) -> None:
        super().__init__([WholeFigureWidget(fig)])

    @property
    def figure(self) -> go.FigureWidget:
        return self.children[0]

    def show(self, fig: go.Figure) -> None:
        old = self.figure
        self.children = (WholeFigureWidget(fig),)
        old.close()


def button(
    description: str, on_click: Callable[[], object], style: str = "", icon: str = "", tooltip: str = ""
) -> w.Button:
    """A button calling ``on_click()`` (no argument); ``icon`` is a Font Awesome name JupyterLab ships."""
    b = w.Button(description=description, button_style=style, icon=icon, tooltip=tooltip or None)
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
