"""Every widget rendered by a real JupyterLab in headless Chromium, driven by Playwright.

The test starts JupyterLab on loopback in a temporary root holding a notebook that shows each widget
against the test server, runs all cells (displaying a widget starts it), clicks the main buttons
(launch a job and watch it end, compare two checkpoints, open a trace and give feedback with its
icon buttons, read a run's RL health, compare two runs and chat with their checkpoints, open a
stored rollout as a chat and follow its prompt across steps), asserts on
what is rendered, and saves a screenshot of each widget, then of four of them again in JupyterLab's
dark theme (``*-dark.png``): into a temporary folder, or into docs/screenshots/ (the ones the docs
show) when ``TOOLKIT_UPDATE_SCREENSHOTS=1``.

Needs Debian's chromium (``apt-get install -y chromium``) and the ``playwright`` package (dev extra);
Playwright's own browser download is not used.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import nbformat
import pytest

CHROMIUM = Path(os.environ.get("TOOLKIT_CHROMIUM", "/usr/bin/chromium"))
CHROMIUM_ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
]
DOCS_SCREENSHOTS = Path(__file__).resolve().parents[2] / "docs" / "screenshots"
LAB_START_TIMEOUT = 60.0
JOB_TIMEOUT_MS = 120_000
DRAW_TIMEOUT_MS = 30_000  # a swapped-in figure widget can take seconds to draw on a loaded machine
KERNEL_IDLE = (
    "() => window.jupyterapp.shell.currentWidget?.sessionContext?.session?.kernel?.status === 'idle'"
)
# every cell rendered (no windowing), no news toast over the screenshots
SETTINGS = {
    "@jupyterlab/notebook-extension/tracker": {"windowingMode": "none"},
    "@jupyterlab/apputils-extension/notification": {"fetchNews": "false", "checkForUpdates": False},
}
WIDGETS = ["builder", "launcher", "checkpoints", "chat", "traces", "health", "compare"]
WIDGETS += ["trajectory_browser", "reprs"]
DARK = ["launcher", "chat", "traces", "health"]
# after the widgets (no screenshot): a tool call's collapsed line, whose wrench is a Font Awesome glyph
TOOL_CALL = (
    "from IPython.display import HTML\n"
    "from toolkit.widgets.conversation import tool_call_html\n"
    "HTML(tool_call_html('get', '{\"key\": \"kfz\"}'))"
)

SETUP = """\
import uuid
from datetime import datetime, timedelta, timezone

import toolkit as tk
from toolkit.types.training import Trajectory, TrajectoryGroup

client = tk.Client({url!r}, {key!r})
base = client.served_models().data[0].id
model = client.models.create(project="browser", name="agent-" + uuid.uuid4().hex[:6], base_model=base)


def group(rewards, prompt):
    return TrajectoryGroup(trajectories=[
        Trajectory(
            messages_and_choices=[
                {{"role": "user", "content": prompt}},
                {{"message": {{"role": "assistant", "content": f"answer {{r}}"}}, "finish_reason": "stop"}},
            ],
            reward=r,
            metrics={{"correct": r > 0}},
        )
        for r in rewards
    ])


groups = [group([0.0, 1.0, 0.5], "2+2?"), group([1.0, 0.0], "capital of France?")]
client.models.log(model.id, split="val", trajectory_groups=groups)

# two short RL runs for the health panel and the run comparison (most groups without variance)
runs = [client.models.create(project="browser", name=f"run-{{c}}-" + uuid.uuid4().hex[:4], base_model=base)
        for c in "ab"]
flat = [group([0.0, 1.0, 0.5], "2+2?"), group([1.0, 1.0], "2+3?"), group([0.0, 0.0], "2+4?")]
for run, rates in zip(runs, [(1e-4, 1e-4, 1e-4), (2e-4, 2e-4)]):
    for rate in rates:
        client.training_jobs.create(model_id=run.id, trajectory_groups=flat, experimental_config={{
            "allow_training_without_logprobs": True, "learning_rate": rate}}).wait(progress=False)

project = "local/browser-" + uuid.uuid4().hex[:6]
t0 = datetime.now(timezone.utc)
trace, root, llm = (str(uuid.uuid4()) for _ in range(3))
usage = {{"requests": 1, "prompt_tokens": 12, "completion_tokens": 6, "total_tokens": 18}}
for id_, parent, op, start, end, output in [
    (root, None, "agent", 0, 900, "4"),
    (llm, root, "chat", 100, 700, {{"model": base, "usage": usage}}),
]:
    started = (t0 + timedelta(milliseconds=start)).isoformat()
    client.traces.call_start(start={{"project_id": project, "id": id_, "trace_id": trace, "parent_id": parent,
                                     "op_name": op, "started_at": started,
                                     "attributes": {{}}, "inputs": {{"question": "2+2?"}}}})
    client.traces.call_end(end={{"project_id": project, "id": id_, "output": output,
                                 "ended_at": (t0 + timedelta(milliseconds=end)).isoformat(),
                                 "summary": {{"usage": {{base: usage}}}} if op == "chat" else {{}}}})
"""

CELLS = {
    "builder": "tk.widgets.TrajectoryBuilder(client, groups=groups)",
    "launcher": (
        "launcher = tk.widgets.JobLauncher(client, groups=groups, model_id=model.id, interval=0.5)\n"
        'launcher.experimental["allow_training_without_logprobs"].value = "true"\n'
        "launcher"
    ),
    "checkpoints": "explorer = tk.widgets.CheckpointExplorer(client, model_ids=[model.id])\nexplorer",
    "chat": 'tk.widgets.ChatCompare(client, [base, model.name + ":step0"], prompt="Say hi", max_tokens=12)',
    "traces": "tk.widgets.TraceBrowser(client, project)",
    "health": "tk.widgets.RunHealth(client, model_id=runs[0].id)",
    "compare": "tk.widgets.RunCompare(client, models=[r.id for r in runs], prompts=['Say hi'], max_tokens=8)",
    "trajectory_browser": "tk.widgets.TrajectoryBrowser(client, runs[0].id)",
    "reprs": "groups[0]",
}


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def write_notebook(root: Path, server: Any) -> None:
    nb = nbformat.v4.new_notebook()
    nb.cells = [nbformat.v4.new_code_cell(SETUP.format(url=server.url, key=server.key))]
    nb.cells += [nbformat.v4.new_code_cell(CELLS[name]) for name in WIDGETS]
    nb.cells.append(nbformat.v4.new_code_cell(TOOL_CALL))
    nb.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3", "language": "python"}
    nbformat.write(nb, root / "widgets.ipynb")


@pytest.fixture
def lab(tmp_path: Path, server: Any) -> Iterator[str]:
    """JupyterLab on loopback, no token, in a temporary root with the widgets notebook."""
    root, settings = tmp_path / "root", tmp_path / "settings"
    root.mkdir()
    for plugin, values in SETTINGS.items():
        path = settings / f"{plugin}.jupyterlab-settings"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(values))
    write_notebook(root, server)
    port = free_port()
    env = {
        **os.environ,
        "JUPYTERLAB_SETTINGS_DIR": str(settings),
        "JUPYTERLAB_WORKSPACES_DIR": str(tmp_path / "workspaces"),
        "JUPYTER_RUNTIME_DIR": str(tmp_path / "runtime"),
    }
    log = open(tmp_path / "lab.log", "wb")  # noqa: SIM115 (closed below)
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "jupyterlab",
            "--no-browser",
            "--allow-root",
            "--ip=127.0.0.1",
            f"--port={port}",
            f"--ServerApp.root_dir={root}",
            "--IdentityProvider.token=",
            "--ServerApp.disable_check_xsrf=True",
            "--LabApp.expose_app_in_browser=True",
            "--LabApp.news_url=",
            "--LabApp.check_for_updates_class=jupyterlab.NeverCheckForUpdate",
        ],
        stdout=log,
        stderr=subprocess.STDOUT,
        stdin=subprocess.DEVNULL,
        env=env,
    )
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + LAB_START_TIMEOUT
        while True:
            try:
                if httpx.get(f"{url}/api/status", timeout=2).status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            if proc.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"JupyterLab did not start: {(tmp_path / 'lab.log').read_text()[-3000:]}")
            time.sleep(0.25)
        yield url
    finally:
        proc.terminate()
        try:
            proc.wait(20)
        except subprocess.TimeoutExpired:
            proc.kill()
        log.close()


@pytest.fixture
def chromium() -> str:
    """Debian's chromium and the playwright package; fails (never skips) with the fix when missing."""
    path = str(CHROMIUM) if CHROMIUM.exists() else shutil.which("chromium")
    if path is None:
        pytest.fail(
            f"Debian chromium not found at {CHROMIUM}: run `apt-get update && apt-get install -y chromium`"
        )
    try:
        import playwright  # noqa: F401
    except ImportError:
        pytest.fail(
            "playwright is not installed: `pip install -e '.[dev]'` (do not run `playwright install`)"
        )
    return path


def screenshot_folder(tmp_path: Path) -> Path:
    """docs/screenshots with ``TOOLKIT_UPDATE_SCREENSHOTS=1`` (refreshing the docs' images), else a
    temporary folder: a test run leaves the tracked files alone."""
    folder = DOCS_SCREENSHOTS if os.environ.get("TOOLKIT_UPDATE_SCREENSHOTS") == "1" else tmp_path / "shots"
    folder.mkdir(parents=True, exist_ok=True)
    return folder


def test_widgets_render_and_work_in_jupyterlab(chromium: str, lab: str, tmp_path: Path) -> None:
    from playwright.sync_api import sync_playwright

    shots = screenshot_folder(tmp_path)
    errors: list[str] = []
    with sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=chromium, args=CHROMIUM_ARGS)
        try:
            content = drive(browser.new_page(viewport={"width": 1400, "height": 2400}), lab, errors, shots)
        finally:
            browser.close()
    assert "Error displaying widget" not in content
    assert errors == []
    docs = (DOCS_SCREENSHOTS.parent / "widgets.md").read_text()
    shown = set(re.findall(r"\(screenshots/([\w-]+\.png)\)", docs))
    assert shown and shown <= {p.name for p in shots.glob("*.png")}  # every image the docs show


def assert_font_awesome(icon: Any) -> None:
    """The icon element draws a glyph of the Font Awesome font JupyterLab ships."""
    glyph = icon.evaluate("i => [getComputedStyle(i, '::before').content, getComputedStyle(i).fontFamily]")
    assert glyph[0] not in ("none", "normal", "") and "Font Awesome" in glyph[1], glyph


def drive(page: Any, lab: str, errors: list[str], shots: Path) -> str:
    """Run the notebook, click through the widgets, save screenshots; returns the final page HTML."""
    from playwright.sync_api import expect

    page.on("console", lambda m: errors.append(m.text) if m.type == "error" else None)
    page.on("pageerror", lambda exc: errors.append(str(exc)))
    page.goto(f"{lab}/lab/tree/widgets.ipynb")
    page.wait_for_selector(".jp-NotebookPanel .jp-Cell", timeout=60_000)
    page.wait_for_function("() => window.jupyterapp && window.jupyterapp.serviceManager", timeout=60_000)
    page.wait_for_function(KERNEL_IDLE, timeout=60_000)
    page.evaluate("window.jupyterapp.commands.execute('notebook:run-all-cells')")

    cells = page.locator(".jp-NotebookPanel .jp-CodeCell")
    cell = {name: cells.nth(i + 1) for i, name in enumerate(WIDGETS)}
    expect(cell["reprs"].locator(".jp-OutputArea-output")).to_contain_text("Trajectory group", timeout=90_000)
    expect(cell["builder"].locator("button.widget-button", has_text="Add trajectory")).to_be_visible()
    expect(cell["checkpoints"].locator(".js-plotly-plot")).to_be_visible()
    expect(cell["traces"].locator(".js-plotly-plot")).to_be_visible()

    # launch a job and watch it end
    cell["launcher"].locator("button.widget-button", has_text="Launch").click()
    expect(cell["launcher"]).to_contain_text("succeeded", timeout=JOB_TIMEOUT_MS)
    expect(cell["launcher"].locator(".js-plotly-plot .gtitle")).to_have_text(
        "Training", timeout=DRAW_TIMEOUT_MS
    )
    expect(cell["launcher"]).to_contain_text("training_ended")

    # stream the chat comparison
    cell["chat"].locator("button.widget-button", has_text="Run").click()
    expect(cell["chat"]).to_contain_text("done: 2 model(s)", timeout=60_000)
    expect(cell["chat"]).to_contain_text("completion tokens")
    cell["chat"].locator("button.widget-toggle-button", has_text="logprobs").click()

    # compare two checkpoints of the trained model
    explorer = cell["checkpoints"]
    explorer.locator("button.widget-button", has_text="Load").click()
    checkpoints = explorer.locator("select[multiple]").nth(1)
    expect(checkpoints.locator("option")).to_have_count(2, timeout=30_000)
    # the figure is drawn
    expect(explorer.locator(".js-plotly-plot .gtitle")).to_have_text("val/reward", timeout=DRAW_TIMEOUT_MS)
    checkpoints.select_option(index=[0, 1])
    explorer.locator("button.widget-button", has_text="Chat with this checkpoint").click()
    explorer.get_by_placeholder("user message").fill("Compare yourselves")
    explorer.locator("button.widget-button", has_text="Run").click()
    expect(explorer).to_contain_text("done: 2 model(s)", timeout=60_000)
    expect(explorer).to_contain_text(":step1")

    # open a trace and give feedback with the thumbs-up button: its Font Awesome glyph is drawn
    traces = cell["traces"]
    traces.locator("select[size]").select_option(index=1)
    expect(traces).to_contain_text("inputs", timeout=30_000)
    expect(traces.locator(".js-plotly-plot .gtitle")).to_have_text("Call tree")
    expect(traces.locator(".js-plotly-plot .bars path")).to_have_count(2)  # agent and chat
    thumbs_up = traces.locator("button.widget-button i.fa-thumbs-up")
    assert_font_awesome(thumbs_up)
    thumbs_up.click()
    expect(traces).to_contain_text("feedback saved", timeout=30_000)

    # a tool call's line: the wrench is drawn by Font Awesome (the 🔧 emoji was an empty box here)
    wrench = cells.nth(len(WIDGETS) + 1).locator("details.tool-call summary i.fa-wrench")
    expect(wrench).to_be_visible(timeout=30_000)
    assert_font_awesome(wrench)

    # the RL health of a run: small multiples and the warning that fires (most groups zero-std)
    health = cell["health"]
    expect(health.locator(".js-plotly-plot .gtitle")).to_have_text(
        "RL health: 1 warning(s)", timeout=DRAW_TIMEOUT_MS
    )
    expect(health).to_contain_text("No learning signal")
    expect(health.locator(".js-plotly-plot .annotation-text", has_text="zero std groups")).to_be_visible()

    # compare the two runs: config diff, reward bands, their step-2 checkpoints side by side
    compare = cell["compare"]
    expect(compare).to_contain_text("learning_rate")
    expect(compare.locator(".js-plotly-plot .gtitle").first).to_have_text(
        "reward ± reward_std", timeout=DRAW_TIMEOUT_MS
    )
    compare.locator("button.widget-button", has_text="Chat").click()
    expect(compare).to_contain_text("done: 2 model(s)", timeout=60_000)
    expect(compare).to_contain_text(":step2")

    # every rollout of a run: click one to read it as a chat, then its prompt at each of the 3 steps
    rollouts = cell["trajectory_browser"]
    expect(rollouts).to_contain_text("trajectories in 9 groups")
    rollouts.locator("button.widget-button", has_text="0.50 A").first.click()
    expect(rollouts).to_contain_text("user: 2+2?", timeout=30_000)
    rollouts.locator("button.widget-button", has_text="Same prompt over time").click()
    expect(rollouts.locator(".prompt-step")).to_have_count(3, timeout=30_000)

    content = page.content()
    for name in WIDGETS:
        cell[name].scroll_into_view_if_needed()
        cell[name].screenshot(path=str(shots / f"{name}.png"))
    page.evaluate("window.jupyterapp.commands.execute('apputils:change-theme', {theme: 'JupyterLab Dark'})")
    page.wait_for_function("() => document.body.dataset.jpThemeLight === 'false'", timeout=30_000)
    for name in DARK:
        cell[name].scroll_into_view_if_needed()
        cell[name].screenshot(path=str(shots / f"{name}-dark.png"))
    return content
