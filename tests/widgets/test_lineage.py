"""The checkpoint lineage: ``toolkit.lineage.lineage_frame``, ``tk.plots.lineage`` and the lineage view of
``CheckpointExplorer``, over HTTP against the real local server: two runs branching at their shared
base, read from the records, and where a deployment has none from the jobs, and where it lists no
jobs either from the steps; a parent step deleted; and the layout of a fork inside one model (a job
from an earlier step)."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

import pandas as pd
import pytest

import toolkit as tk
from conftest import LocalServer
from support.tracking_helpers import RANDOM_BASE, new_model, rl_steps
from toolkit.lineage import base_node, lineage_frame, node_name
from toolkit.types.training import Model


@dataclass
class Runs:
    client: tk.Client
    first: Model  # 2 RL steps
    second: Model  # 1 RL step, same base


@pytest.fixture(scope="module")
def runs(server: LocalServer) -> Iterator[Runs]:
    with server.client() as client:
        first, second = new_model(client, "lineage-a"), new_model(client, "lineage-b")
        rl_steps(client, first, 2, seed=1, learning_rate=1e-3)
        rl_steps(client, second, 1, seed=2, learning_rate=5e-4)
        yield Runs(client, first, second)


def parents(tree: pd.DataFrame) -> dict[str, str | None]:
    return dict(zip(tree["node"], tree["parent"], strict=True))


def unsupported(*_: object, **__: object) -> None:
    raise tk.UnsupportedOperation("this deployment has no such extension")


@pytest.mark.parametrize("source", ["records", "jobs", "checkpoints"])
def test_two_runs_branch_at_their_shared_base(
    runs: Runs, source: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Parents from the records; from the jobs where the deployment keeps no records (as the hosted
    API); from the steps where it lists no jobs either."""
    if source != "records":
        monkeypatch.setattr(runs.client.models, "records", unsupported)
    if source == "checkpoints":
        monkeypatch.setattr(runs.client.training_jobs, "list", unsupported)
    a, b = runs.first.id, runs.second.id
    tree = lineage_frame(runs.client, [a, b])
    base = base_node(RANDOM_BASE)
    assert parents(tree) == {
        base: None,
        node_name(a, 0): base,
        node_name(a, 1): node_name(a, 0),
        node_name(a, 2): node_name(a, 1),
        node_name(b, 0): base,
        node_name(b, 1): node_name(b, 0),
    }
    checkpoints = tree[(tree["kind"] == "checkpoint") & (tree["step"] > 0)]
    assert list(checkpoints["source"]) == [source] * 3  # step 0 has no job: from the steps, but in records
    row = tree.set_index("node").loc[node_name(a, 2)]
    assert row["label"] == f"{runs.first.name}:step2" and row["trained"] is True
    assert "train/reward" in row["metrics"]
    monkeypatch.undo()
    jobs = {j.result_step: j.id for j in runs.client.training_jobs.list(model_id=a)}
    if source == "checkpoints":
        assert checkpoints["job_id"].isna().all() and row["config"] == {}
        return
    assert row["job_id"] == jobs[2] and row["job_kind"] == "rl"
    assert any(k.endswith("learning_rate") and v == pytest.approx(1e-3) for k, v in row["config"].items())
    assert pd.notna(row["digest"]) == (source == "records")


def test_the_figure_has_a_node_per_checkpoint_an_edge_per_parent_and_the_job_in_hover(
    runs: Runs,
) -> None:
    a, b = runs.first, runs.second
    fig = tk.plots.lineage(runs.client, a.id, b.id)
    edges, *nodes = fig.data
    by_name = {t.name: t for t in nodes}
    assert set(by_name) == {"base models", a.name, b.name}
    assert list(by_name[a.name].x) == [0, 1, 2] and list(by_name[b.name].x) == [0, 1]
    assert list(by_name["base models"].x) == [-1] and list(by_name["base models"].text) == ["base"]
    assert len(set(by_name[a.name].y)) == 1 and len(set(by_name[b.name].y)) == 1  # a row per run
    assert by_name[a.name].y[0] != by_name[b.name].y[0]
    assert len([v for v in edges.x if v is None]) == 5  # one edge per node but the base
    job = next(j for j in runs.client.training_jobs.list(model_id=a.id) if j.result_step == 1)
    hover = by_name[a.name].hovertext[1]
    assert hover.startswith(f"<b>{a.name}:step1</b>") and f"job {job.id[:8]} (rl)" in hover
    assert "learning_rate=0.001" in hover and "train/reward=" in hover
    assert "no job (the base weights)" in by_name[a.name].hovertext[0]
    assert list(fig.layout.xaxis.ticktext) == ["base", "0", "1", "2"]
    assert set(fig.layout.yaxis.ticktext) == {a.name, b.name}
    with pytest.raises(ValueError, match="at least one model"):
        tk.plots.lineage(runs.client)


def test_a_deleted_parent_stays_in_the_tree(server: LocalServer) -> None:
    with server.client() as client:
        model = new_model(client, "lineage-deleted")
        rl_steps(client, model, 2, seed=3, learning_rate=1e-3)
        assert client.models.checkpoints.delete(model.id, [1]).deleted_count == 1
        tree = lineage_frame(client, [model.id]).set_index("node")
        gone = node_name(model.id, 1)
        assert tree.loc[node_name(model.id, 2), "parent"] == gone  # the job started from step 1
        assert tree.loc[gone, "kind"] == "deleted" and tree.loc[gone, "parent"] == base_node(RANDOM_BASE)
        (trace,) = [t for t in tk.plots.lineage(client, model.id).data if t.name == model.name]
        assert list(trace.marker.symbol) == ["circle", "circle", "x-thin-open"]
        assert "deleted" in trace.hovertext[2]


def test_a_fork_inside_a_model_opens_a_row_of_its_own() -> None:
    """A job that started from an earlier step (step 3 from step 1, beside step 2): the local server
    always trains from the latest step, so this tree is a records-shaped frame built by hand."""

    def checkpoint(step: int, parent: str) -> dict[str, object]:
        return {
            "node": f"m:step{step}", "label": f"run:step{step}", "parent": parent, "kind": "checkpoint",
            "model_id": "m", "model": "run", "step": step, "job_id": f"job{step}" if step else None,
            "job_kind": "rl", "trained": True, "config": {"learning_rate": 0.1 * step},
            "metrics": {"train/reward": step / 4},
        }  # fmt: skip

    forks = ((0, "base b"), (1, "m:step0"), (2, "m:step1"), (3, "m:step1"), (4, "m:step3"))
    base = {"node": "base b", "label": "base b", "parent": None, "kind": "base", "model": "b"}
    rows = [base, *(checkpoint(step, parent) for step, parent in forks)]
    fig = tk.plots.lineage_tree(pd.DataFrame(rows))
    (trace,) = [t for t in fig.data if t.name == "run"]
    lane = dict(zip(trace.x, trace.y, strict=True))
    assert lane[0] == lane[1] == lane[2] and lane[3] == lane[4] != lane[2]
    assert "learning_rate=0.3" in trace.hovertext[3] and "job job3 (rl)" in trace.hovertext[3]


def test_checkpoint_explorer_shows_the_lineage(runs: Runs) -> None:
    explorer = tk.widgets.CheckpointExplorer(runs.client, model_ids=[runs.first.id, runs.second.id]).start()
    assert explorer.shown == "metric"
    explorer.view.value = "lineage"
    assert explorer.shown == "lineage" and explorer.status_line.kind != "error"
    names = {t.name for t in explorer.figure.data}
    assert {runs.first.name, runs.second.name, "base models"} <= names
    explorer.view.value = "metric"
    assert explorer.shown == "metric" and explorer.figure.layout.title.text == explorer.metric.value
    explorer.close()


def test_steps_and_seeds_are_whole_numbers_in_the_frame_the_labels_and_the_hover(server: LocalServer) -> None:
    """A job seed near 2**63 (derived seeds are 63-bit) reads back exactly, never as 6.9e+18."""
    seed = 2**63 - 12345
    with server.client() as client:
        model = new_model(client, "lineage-integers")
        rl_steps(client, model, 2, seed=4, learning_rate=1e-3, job_seed=seed)
        tree = lineage_frame(client, [model.id])
        (trace,) = [t for t in tk.plots.lineage(client, model.id).data if t.name == model.name]
    assert str(tree["step"].dtype) == "Int64" and str(tree["seed"].dtype) == "Int64"
    checkpoints = tree[tree["kind"] == "checkpoint"]
    assert checkpoints["step"].tolist() == [0, 1, 2] and checkpoints["seed"].tolist()[1:] == [seed, seed]
    assert pd.isna(checkpoints["seed"].iloc[0])  # step 0: the base, no job
    assert list(trace.text) == ["0", "1", "2"]
    assert f"<br>seed {seed}<br>" in trace.hovertext[1] and "e+18" not in trace.hovertext[1]
    assert f"experimental_config.seed={seed}" in trace.hovertext[2]
