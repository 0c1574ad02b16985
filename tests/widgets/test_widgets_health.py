"""RunHealth and RunCompare against the real local server after short real RL jobs: quiet init, live
loading, the figure and warnings, the config diff, the chat of checkpoints at one step, the static HTML
a notebook export shows, and close() leaving no thread; figure widgets that open with their data."""

from __future__ import annotations

import threading
from typing import Any

import pytest
from IPython.display import display

import toolkit as tk
from support.widget_support import click, group, new_model, recording_client, shell
from toolkit.types.training import Model
from toolkit.widgets import ChatCompare, RunCompare, RunHealth

__all__ = ["shell"]  # the fixture, imported for its tests

WIDGET_VIEW = "application/vnd.jupyter.widget-view+json"


def train(client: tk.Client, model: Model, **config: Any) -> str:
    """One short RL step (two groups, one without variance); returns the job id."""
    job = client.training_jobs.create(
        model_id=model.id,
        trajectory_groups=[group([0.0, 1.0]), group([1.0, 1.0])],
        experimental_config={"allow_training_without_logprobs": True, **config},
    )
    job.wait(progress=False)
    return job.id


@pytest.fixture(scope="module")
def runs(server: Any) -> dict[str, Any]:
    """Model a: two RL steps at 1e-4; model b: one PPO step at 2e-4."""
    client = server.client()
    a, b = new_model(client, "health"), new_model(client, "health")
    jobs_a = [train(client, a, learning_rate=1e-4) for _ in range(2)]
    job_b = train(client, b, learning_rate=2e-4, ppo=True)
    return {"a": a, "b": b, "jobs_a": jobs_a, "job_b": job_b}


def test_run_health_of_a_job_loads_on_start_and_shows_metrics_and_warnings(server: Any, runs: Any) -> None:
    client, sent = recording_client(server)
    before = set(threading.enumerate())
    widget = RunHealth(client, job_id=runs["job_b"], interval=0.1)
    assert sent == [] and not widget.started
    widget.start()
    widget.join(timeout=60)
    assert widget.source == f"job {runs['job_b']}" and widget.num_steps >= 1 and not widget.polling
    frame = widget.frame
    assert (frame["entropy"] > 0).all() and (frame["frac_reward_zero_std"] == 0.5).all()
    assert set(frame["rl_step"]) == {1} and frame.attrs["x"] == "gradient step"
    titles = {a.text for a in widget.figure.layout.annotations}
    assert {"reward", "entropy", "zero-std groups"} <= titles
    assert widget.warnings == [] and "No known failure shows" in widget.warning_list.value
    assert widget.summary() == f"RunHealth: job {runs['job_b']}, {widget.num_steps} gradient step(s), healthy"
    widget.close()
    assert set(threading.enumerate()) - before == set()


def test_run_health_of_a_model_reads_its_rl_steps(server: Any, runs: Any) -> None:
    widget = RunHealth(server.client(), model_id=runs["a"].id).start()
    assert widget.model.value == runs["a"].id and widget.status_line.text == ""
    assert list(widget.frame["step"]) == [1, 2] and widget.frame.attrs["x"] == "RL step"
    assert (widget.frame["frac_reward_zero_std"] == 0.5).all() and (widget.frame["entropy"] > 0).all()
    (band,) = [t for t in widget.figure.data if t.fill == "toself"]
    assert max(band.y) == 1.0 and widget.figure.layout.xaxis.dtick == 1  # RL steps 1, 2: no 1.5
    widget.model.value = runs["b"].id
    click(widget, "Show model")  # pick another model from the list
    assert widget.source == f"model {runs['b'].id}" and list(widget.frame["step"]) == [1]
    widget.close()


def test_run_health_lists_the_warnings_that_fire(server: Any, runs: Any) -> None:
    """Every trajectory of the job sits in a zero-variance group... but one: most groups zero-std."""
    client = server.client()
    model = new_model(client, "health")
    job = client.training_jobs.create(
        model_id=model.id,
        trajectory_groups=[group([0.0, 1.0]), group([1.0, 1.0]), group([0.0, 0.0]), group([1.0, 1.0])],
        experimental_config={"allow_training_without_logprobs": True},
    )
    job.wait(progress=False)
    widget = RunHealth(client, job_id=job.id).start()
    assert [w.rule for w in widget.found] == ["zero_std_groups"]
    assert "No learning signal: 75%" in widget.warning_list.value
    assert "⚠ zero std groups" in {a.text for a in widget.figure.layout.annotations}
    widget.close()


def test_run_health_output_carries_static_html_for_exports(server: Any, runs: Any, shell: Any) -> None:
    widget = RunHealth(server.client(), job_id=runs["job_b"])
    display(widget)
    (shown,) = shell.display_pub.outputs
    data = shown["data"]
    assert WIDGET_VIEW in data and data["text/plain"].startswith("RunHealth: job ")
    static = data["text/html"]  # what nbconvert shows when the notebook has no widget state
    assert "plotly" in static and "No known failure shows" in static and '"entropy"' in static
    widget.close()


def test_run_compare_diffs_configs_overlays_metrics_and_chats_at_one_step(server: Any, runs: Any) -> None:
    client, sent = recording_client(server)
    before = set(threading.enumerate())
    a, b = runs["a"], runs["b"]
    compare = RunCompare(
        client, models=[a.id, b.id], metric="entropy", prompts=["Say hi", "2+2?"], max_tokens=4
    )
    assert sent == []
    compare.start()
    assert compare.names == [a.name, b.name]
    diff = compare.diff
    assert {"learning_rate", "ppo", "epsilon", "epsilon_high"} <= set(diff.index)
    assert "base_model" not in diff.index and "packed_sequence_length" not in diff.index
    assert diff.loc["learning_rate", a.name] == 1e-4 and diff.loc["learning_rate", b.name] == 2e-4
    bands = [t for t in compare.reward_plot.figure.data if t.fill == "toself"]
    assert len(bands) == 2  # reward ± reward_std, one per run
    # rewards 0, 1, 1, 1: mean 0.75 + std 0.43 stops at the highest reward seen, on a [0, 1] axis
    assert max(y for band in bands for y in band.y) == 1.0
    layout = compare.reward_plot.figure.layout
    assert tuple(layout.yaxis.range) == (-0.05, 1.05) and layout.xaxis.dtick == 1
    assert [t.name for t in compare.metric_plot.figure.data] == [a.name, b.name]
    compare.metric.value = "grad_norm"
    assert compare.metric_plot.figure.layout.title.text == "grad_norm"
    assert compare.step.value == 1  # the latest step both runs have
    chats = compare.chat()
    assert len(chats) == 2 and all(isinstance(c, ChatCompare) for c in chats)
    assert list(chats[0].models.value) == [f"{a.name}:step1", f"{b.name}:step1"] and compare.chat_step == 1
    for chat in chats:
        columns = chat.wait(timeout=120)
        assert all(col.error is None and col.texts for col in columns.values())
    assert compare.summary().startswith(f"RunCompare: {a.name} vs {b.name}; configs differ in ")
    assert "learning_rate" in compare.snapshot_html() and compare.snapshot_html().count("plotly") >= 2
    compare.close()
    assert set(threading.enumerate()) - before == set()


def test_run_compare_takes_jobs_and_refuses_a_single_run(server: Any, runs: Any) -> None:
    client = server.client()
    compare = RunCompare(client, jobs=runs["jobs_a"]).start()
    assert compare.diff.empty and "no differences" in compare.diff_table.value  # same config twice
    assert [f.attrs["x"] for f in compare.frames().values()] == ["gradient step"] * 2
    assert len(set(compare.names)) == 2
    compare.close()
    alone = RunCompare(client, models=[runs["a"].id]).start()
    assert "compare 2 to 4 runs" in alone.status_line.text
    alone.close()


@pytest.fixture
def opened_states(monkeypatch: pytest.MonkeyPatch) -> list[dict[str, Any]]:
    """The state each widget comm opens with, recorded as widgets are created."""
    import ipywidgets.widgets.widget as widget_module

    opened: list[dict[str, Any]] = []
    create = widget_module.comm.create_comm

    def spy(**kw: Any) -> Any:
        opened.append(kw["data"]["state"])
        return create(**kw)

    monkeypatch.setattr(widget_module.comm, "create_comm", spy)
    return opened


def test_figure_widgets_open_with_their_data_and_layout(opened_states: list[dict[str, Any]]) -> None:
    """A view drawn right after the comm opens shows the figure (plotly's own opens it empty)."""
    import plotly.graph_objects as go

    from toolkit.widgets._common import FigureBox

    box = FigureBox(go.Figure(go.Scatter(x=[1, 2], y=[3, 4]), layout={"title": {"text": "T"}}))
    (state,) = [s for s in opened_states if "_widget_data" in s]
    assert len(state["_widget_data"]) == 1 and state["_widget_layout"]["title"]["text"] == "T"
    box.close()


def test_figure_widgets_share_one_import_of_plotlys_bundle(opened_states: list[dict[str, Any]]) -> None:
    """Each figure widget's front end is a small module that imports plotly's bundle (sent as the
    ``_bundle`` trait) once per page: importing it per model overran anywidget's 2 s to initialise."""
    import plotly.graph_objects as go

    from toolkit.widgets._common import FigureBox

    box = FigureBox(go.Figure(go.Scatter(y=[1, 2])))
    box.show(go.Figure(go.Bar(y=[3])))
    states = [s for s in opened_states if "_widget_data" in s]
    bundle = str(go.FigureWidget._esm)
    assert len(states) == 2 and len(bundle) > 1_000_000
    for state in states:
        assert state["_bundle"] == bundle
        assert len(state["_esm"]) < 2_000 and "globalThis[KEY] ??=" in state["_esm"]
    box.close()
