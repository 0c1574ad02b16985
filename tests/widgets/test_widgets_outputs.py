"""What a widget's output under a cell says, in an in-process IPython shell: the output of a cell shows
what that cell did, and the text a saved notebook keeps tells the final state (monitors, progress bars)."""

from __future__ import annotations

import html
from typing import Any

from IPython.display import display
from tqdm.notebook import tqdm as notebook_tqdm

from support.widget_support import base_model, group, new_model, outputs_of, shell
from toolkit import _progress
from toolkit._progress import ProgressBar
from toolkit.widgets import ChatCompare, JobMonitor

__all__ = ["shell"]  # the fixture, imported for its tests

WIDGET_VIEW = "application/vnd.jupyter.widget-view+json"


def display_id(output: dict[str, Any]) -> str:
    return str(output["transient"]["display_id"])


def test_chat_compare_output_under_each_cell_shows_that_cells_run(server: Any, shell: Any) -> None:
    """Notebook 04's pattern: shown and run in one cell, run again with other settings in the next."""
    client = server.client()
    model = base_model(client)
    compare = ChatCompare(client, [model], prompt="Say hi", temperature=0.0, max_tokens=6)
    shell.execution_count = 2
    display(compare)
    compare.run(wait=True)
    compare.run(wait=True)  # run again in the same cell: it stays there
    first_text = compare.columns[model].texts[0]
    (cell2,) = [o for o in shell.display_pub.outputs if not o["update"]]
    assert compare.shown_in == 2 and WIDGET_VIEW in cell2["data"]

    shell.execution_count = 3
    compare.temperature.value, compare.n.value = 1.0, 2
    compare.run(wait=True)
    assert compare.shown_in == 3 and compare.run_settings["params"]["temperature"] == 1.0
    under2 = outputs_of(shell, display_id(cell2))
    frozen = under2[-1]
    assert frozen["update"] and WIDGET_VIEW not in frozen["data"]  # a static copy, no live view
    snapshot = frozen["data"]["text/html"]
    assert "temperature 0.0" in snapshot and "1 sample(s)" in snapshot and "temperature 1.0" not in snapshot
    assert html.escape(first_text) in snapshot and "ran again in a later cell" in snapshot
    assert frozen["data"]["text/plain"].startswith(f"ChatCompare: {model}; temperature 0.0")
    (cell3,) = [o for o in shell.display_pub.outputs if not o["update"] and o is not cell2]
    assert cell3["data"][WIDGET_VIEW]["model_id"] == compare.model_id
    # once its run is done, the live output's text says what the widget shows
    assert outputs_of(shell, display_id(cell3))[-1]["data"]["text/plain"].endswith("2 sample(s): done")
    compare.close()


def test_monitor_output_keeps_the_final_state_of_the_job(server: Any, shell: Any) -> None:
    client = server.client()
    model = new_model(client)
    job = client.training_jobs.create(
        model_id=model.id,
        trajectory_groups=[group([0.0, 1.0])],
        experimental_config={"allow_training_without_logprobs": True},
    )
    monitor = JobMonitor(client, job.id, interval=0.2)
    shell.execution_count = 5
    display(monitor)
    (shown,) = shell.display_pub.outputs
    assert shown["data"]["text/plain"].startswith(f"JobMonitor: job {job.id[:8]} ")
    done = monitor.wait(timeout=180)
    assert done is not None and done.num_sequences
    last = outputs_of(shell, display_id(shown))[-1]
    steps = f"{done.num_sequences}/{done.num_sequences} steps"
    assert last["update"] and last["data"]["text/plain"] == f"JobMonitor: job {job.id[:8]} succeeded, {steps}"
    assert last["data"][WIDGET_VIEW]["model_id"] == monitor.model_id  # still the live widget


def test_progress_bar_leaves_its_final_state_in_the_saved_output(shell: Any) -> None:
    """tqdm's notebook bar writes its text once (0%); the bar's output is rewritten when it closes."""
    bar = ProgressBar(3, "rollouts", "rollout", bar_class=notebook_tqdm)
    (shown,) = shell.display_pub.outputs
    assert "0%" in shown["data"]["text/plain"] and WIDGET_VIEW in shown["data"]
    for _ in range(3):
        bar.update(1, reward="0.500")
    bar.close()
    last = outputs_of(shell, display_id(shown))[-1]
    assert last["update"] and "100%" in last["data"]["text/plain"] and "3/3" in last["data"]["text/plain"]
    assert "reward=0.500" in last["data"]["text/plain"]


def test_a_job_waited_on_in_a_notebook_leaves_its_final_count(
    server: Any, shell: Any, monkeypatch: Any
) -> None:
    """``job.wait()`` draws its bar with :class:`ProgressBar`: in Jupyter (tqdm.auto's notebook flavour)
    the saved text of the bar reads the final step count."""
    monkeypatch.setattr(_progress, "tqdm", notebook_tqdm)
    client = server.client()
    model = new_model(client)
    job = client.training_jobs.create(
        model_id=model.id,
        trajectory_groups=[group([0.0, 1.0])],
        experimental_config={"allow_training_without_logprobs": True},
    )
    job.wait()
    steps = client.training_jobs.retrieve(job.id).num_sequences
    (shown,) = [o for o in shell.display_pub.outputs if not o["update"]]
    last = outputs_of(shell, display_id(shown))[-1]["data"]["text/plain"]
    assert last.startswith(f"train {job.id[:8]}: 100%") and f"{steps}/{steps}" in last
