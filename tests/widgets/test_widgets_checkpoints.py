"""CheckpointExplorer against the real local server: all pages, metrics, confirmed delete, chat hand-off."""

from __future__ import annotations

import re

from support.widget_support import group, new_model
from toolkit import frames
from toolkit.widgets import ChatCompare, CheckpointExplorer, JobMonitor


def test_table_metric_figure_delete_and_chat(server) -> None:
    client = server.client()
    a, b = new_model(client), new_model(client)
    client.models.log(a.id, split="val", trajectory_groups=[group([0.0, 1.0])])
    client.models.log(b.id, split="val", trajectory_groups=[group([1.0, 1.0])])
    explorer = CheckpointExplorer(client, model_ids=[a.id, b.id])
    assert explorer.checkpoints.empty  # nothing loaded before start()
    explorer.start()
    df = explorer.checkpoints
    assert set(df["model_id"]) == {a.id, b.id} and df["step"].tolist() == [0, 0]
    assert "val/reward" in explorer.metric.options and a.name in explorer.table.value
    explorer.metric.value = "val/reward"
    traces = {t.name: list(t.y) for t in explorer.figure.data}
    assert traces == {a.name: [0.5], b.name: [1.0]}
    assert [label for label, _ in explorer.selection.options] == [f"{a.name} step 0", f"{b.name} step 0"]

    compare = explorer.chat([(a.id, 0)])
    assert isinstance(compare, ChatCompare) and compare.models.value == [f"{a.name}:step0"]
    assert explorer.chat_area.children == (compare,)

    explorer.request_delete([(b.id, 0)])
    assert (
        explorer.confirm_box.layout.display is None
        and "Delete 1 checkpoint" in explorer.confirm_box.children[0].value
    )
    explorer.cancel_delete()
    assert explorer.pending == [] and len(explorer.refresh()) == 2
    explorer.selection.value = ((b.id, 0),)
    explorer.request_delete()
    assert explorer.pending == [(b.id, 0)]
    assert explorer.confirm_delete() == 0  # step 0 is b's current step: kept, and said so
    assert explorer.status_line.text == (
        "deleted 0 checkpoint(s); kept 1 current step(s), which training continues from"
    )
    explorer.request_delete([("no-such-model", 3)])
    assert explorer.confirm_delete() == 0 and explorer.pending == []
    assert explorer.status_line.kind == "error" and explorer.status_line.text.startswith(
        "delete failed: 404: "
    )
    assert explorer.confirm_box.layout.display == "none"


def test_checkpoints_of_a_trained_model(server) -> None:
    client = server.client()
    model = new_model(client)
    for _ in range(2):
        created = client.training_jobs.create(
            model_id=model.id,
            trajectory_groups=[group([0.0, 1.0])],
            experimental_config={"allow_training_without_logprobs": True},
        )
        JobMonitor(client, created.id, interval=0.2).wait(timeout=180)
    explorer = CheckpointExplorer(client)
    explorer.metric.value = "train/reward"  # chosen before the checkpoints are loaded
    explorer.start()
    assert explorer.checkpoints.empty and model.id in dict(explorer.models.options).values()
    explorer.models.value = (model.id,)
    assert explorer.refresh()["step"].tolist() == [0, 1, 2] and explorer.metric.value == "train/reward"
    header = re.findall(r"<th>([^<]*)</th>", explorer.table.value)
    assert header[:4] == ["model", "step", "trained", "created_at"] and "id" not in header
    assert explorer.checkpoints["trained"].tolist()[1:] == [True, True]
    shown = explorer.checkpoints[header[4:]]
    assert shown.notna().any().all()  # no all-empty column
    assert list(shown.notna().sum()) == sorted(shown.notna().sum(), reverse=True)  # fullest first
    assert frames.fetch_checkpoints(client, model.id, page=1)["step"].tolist() == [0, 1, 2]
    events = frames.fetch_events(client, created.id, page=1)
    assert events["type"].tolist()[-1] == "training_ended"
    explorer.metric.value = "train/reward"
    assert list(explorer.figure.data[0].x) == [0.0, 1.0, 2.0]
    assert list(explorer.figure.data[0].y)[1:] == [0.5, 0.5]
    explorer.selection.value = ((model.id, 1),)
    explorer.request_delete()
    assert explorer.confirm_delete() == 1 and explorer.status_line.text == "deleted 1 checkpoint(s)"
    assert explorer.checkpoints["step"].tolist() == [0, 2]
