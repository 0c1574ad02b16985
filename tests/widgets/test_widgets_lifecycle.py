"""The lifecycle every widget shares, against the real local server: nothing loads or runs in
``__init__``; the first display (or ``start()``) does; ``close()`` stops every thread the widget
started and closes its child widgets; errors become one status line; buttons show icons JupyterLab
ships; colours are JupyterLab's CSS variables."""

from __future__ import annotations

import re
import threading
import time
import uuid
from importlib.util import find_spec
from pathlib import Path
from typing import Any

import ipywidgets as w
import pytest
from IPython.display import display

import toolkit as tk
from support.widget_support import (
    base_model,
    click,
    descendants,
    group,
    html_of,
    new_model,
    recording_client,
    shell,
)
from toolkit import _theme
from toolkit.client import NotFoundError
from toolkit.widgets import (
    ChatCompare,
    CheckpointExplorer,
    JobLauncher,
    JobMonitor,
    TraceBrowser,
    TrajectoryBuilder,
)
from toolkit.widgets._base import ToolkitWidget
from toolkit.widgets._common import StatusLine

__all__ = ["shell"]  # the fixture, imported for its tests

FIRST_REQUEST_TIMEOUT_S = 30.0
LONG = 400  # tokens: a stream still running when the test closes the widget
WIDGETS = ["builder", "launcher", "monitor", "checkpoints", "chat", "traces"]


def make(name: str, client: tk.Client, model_id: str, base: str = "toolkit/tiny-chat-1m") -> ToolkitWidget:
    """Each widget as a notebook cell would create it."""
    return {
        "builder": lambda: TrajectoryBuilder(client, groups=[group([0.0, 1.0])]),
        "launcher": lambda: JobLauncher(client, groups=[group([0.0, 1.0])], model_id=model_id),
        "monitor": lambda: JobMonitor(client, "no-such-job", interval=30.0),
        "checkpoints": lambda: CheckpointExplorer(client, model_ids=[model_id]),
        "chat": lambda: ChatCompare(client, [base], prompt="Say hi", max_tokens=LONG),
        "traces": lambda: TraceBrowser(client, f"local/life-{uuid.uuid4().hex[:6]}"),
    }[name]()


def exercise(name: str, widget: Any, client: tk.Client) -> None:
    """Start the widget and the work that runs in threads (polling, streaming, a launched job)."""
    widget.start()
    if name == "builder":
        widget.log_model.value = widget_model(client)
        click(widget, "Train on these groups…")
        (launcher,) = widget.launch_area.children
        launcher.experimental["allow_training_without_logprobs"].value = "true"
        assert launcher.launch().polling
    elif name == "launcher":
        widget.experimental["allow_training_without_logprobs"].value = "true"
        assert widget.launch().polling
    elif name == "monitor":
        assert widget.polling
    elif name == "checkpoints":
        compare = widget.chat([(widget.models.value[0], 0)])
        compare.max_tokens.value = LONG
        compare.run()
        assert compare.running
    elif name == "chat":
        widget.run()
        assert widget.running


def widget_model(client: tk.Client) -> str:
    return new_model(client, "lifecycle").id


@pytest.mark.parametrize("name", WIDGETS)
def test_init_is_quiet_start_works_and_close_leaves_no_thread(server: Any, name: str) -> None:
    model_id, base = widget_model(server.client()), base_model(server.client())
    client, sent = recording_client(server)
    before = set(threading.enumerate())
    widget = make(name, client, model_id, base)
    assert sent == [] and set(threading.enumerate()) == before and not widget.started
    exercise(name, widget, client)
    assert widget.started
    if name in ("launcher", "checkpoints", "traces"):
        assert sent, "start() did the first load"
    widget.close()
    assert set(threading.enumerate()) - before == set()
    assert widget.comm is None and all(d.comm is None for d in descendants(widget))


@pytest.mark.parametrize("name", ["launcher", "monitor", "checkpoints", "traces"])
def test_the_first_display_starts_the_widget(server: Any, shell: Any, name: str) -> None:
    model_id = widget_model(server.client())
    client, sent = recording_client(server)
    widget = make(name, client, model_id)
    shell.execution_count = 7
    display(widget)
    (shown,) = shell.display_pub.outputs
    assert widget.started and widget.shown_in == 7
    if name == "monitor":  # its first request is the polling thread's first tick
        deadline = time.monotonic() + FIRST_REQUEST_TIMEOUT_S
        while not sent and time.monotonic() < deadline:
            time.sleep(0.01)
    assert sent, "the first display did the first load"
    assert shown["data"]["application/vnd.jupyter.widget-view+json"]["model_id"] == widget.model_id
    assert shown["data"]["text/plain"].startswith(type(widget).__name__ + ":")
    widget.close()


def test_state_is_traits_that_can_be_observed(server: Any) -> None:
    monitor = JobMonitor(server.client(), "no-such-job")
    seen: list[str] = []
    monitor.observe(lambda change: seen.append(change["new"]), "status")
    monitor.status = "running"
    assert seen == ["running"] and "running" in monitor.header.value
    assert set(monitor.trait_names()) >= {"job_id", "status", "num_steps", "total_steps", "done", "polling"}
    with pytest.raises(NotFoundError):
        monitor.poll()
    compare = ChatCompare(server.client(), ["a"])
    assert {"running", "run_settings"} <= set(compare.trait_names())
    browser = TraceBrowser(server.client(), "local/x")
    assert {"project_id", "page", "page_size", "total", "call_id"} <= set(browser.trait_names())


def test_status_line_turns_any_error_into_one_line(server: Any) -> None:
    line = StatusLine()
    try:
        server.client().models.retrieve("no-such-model")
    except NotFoundError as exc:
        line.error(exc, "load")
    assert line.kind == "error" and line.text.startswith("load failed: 404: ")
    assert _theme.ERROR in line.value
    with line.catching("parse"):
        raise ValueError("bad JSON")
    assert line.text == "parse failed: ValueError: bad JSON"
    line.ok("fine")
    assert (line.kind, line.text) == ("ok", "fine") and _theme.SUCCESS in line.value
    monitor = JobMonitor(server.client(), "no-such-job", interval=0.05)
    monitor.wait(timeout=30)  # polling gives up after MAX_ERRORS failures
    assert not monitor.polling and monitor.status_line.text.startswith("polling (5/5) failed: 404: ")
    builder = TrajectoryBuilder()
    builder.role.value = "assistant"
    builder.tool_name.value, builder.tool_args.value = "calc", "{not json"
    click(builder, "Add message")
    assert builder.status_line.kind == "error" and "are not JSON" in builder.status_line.text
    assert builder.draft == []  # nothing added


def font_awesome_names() -> set[str]:
    """The icon names of the Font Awesome JupyterLab ships (its CSS is inside the lab's static files)."""
    spec = find_spec("jupyterlab")
    assert spec is not None and spec.origin is not None, "the lab extra (jupyterlab) is needed"
    names: set[str] = set()
    for path in (Path(spec.origin).parent / "static").glob("*.js"):
        text = path.read_text(errors="ignore")
        if "Font Awesome" in text:
            names |= set(re.findall(r"\.fa-([a-z0-9-]+):before", text))
    return names


def started_widgets(server: Any) -> dict[str, ToolkitWidget]:
    client = server.client()
    model_id = widget_model(client)
    widgets = {name: make(name, client, model_id).start() for name in WIDGETS}
    widgets["traces"].react("👍")  # an info line
    click(widgets["launcher"], "Validate")  # an error line: no logprobs in the groups
    return widgets


def test_buttons_show_icons_jupyterlab_ships_and_colours_follow_the_theme(server: Any) -> None:
    shipped = font_awesome_names()
    assert {"thumbs-up", "thumbs-down"} <= shipped
    widgets = started_widgets(server)
    browser = widgets["traces"]
    assert isinstance(browser, TraceBrowser)
    assert (browser.thumbs_up.icon, browser.thumbs_down.icon) == ("thumbs-up", "thumbs-down")
    assert not re.search(r"[\U0001F300-\U0001FAFF]", browser.thumbs_up.description)
    for name, widget in widgets.items():
        icons = {b.icon for b in descendants(widget) if isinstance(b, w.Button) and b.icon}
        assert icons and icons <= shipped, name
        markup = html_of(widget) + widget.snapshot_html()
        bare = re.sub(r"var\(--jp-[a-z0-9-]+(, [^()]*(\([^()]*\))?)?\)", "", markup)
        assert not re.findall(r"#[0-9a-fA-F]{3,6}\b|rgba?\(", bare), name
        assert "var(--jp-" in markup, name
        widget.close()


def test_widgets_call_start_on_their_children(server: Any) -> None:
    """A parent starts the widgets it shows (a launcher from the builder has its models loaded)."""
    client = server.client()
    model = new_model(client)
    builder = TrajectoryBuilder(client, groups=[group([0.0, 1.0])])
    builder.log_model.value = model.id
    click(builder, "Train on these groups…")
    (launcher,) = builder.launch_area.children
    assert isinstance(launcher, JobLauncher) and launcher.started and launcher.model.value == model.id
    builder.close()
