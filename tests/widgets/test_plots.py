"""Figures: pure functions of frames; assertions on ``to_dict()`` data."""

from __future__ import annotations

import base64
from typing import Any

import numpy as np
import pandas as pd

from support.widget_support import group
from toolkit import frames, plots
from toolkit.types.training import TrainingJobEvent


def values(data: Any) -> list[Any]:
    """A figure array as a list (plotly encodes numeric arrays as ``{"dtype", "bdata"}``)."""
    if isinstance(data, dict) and "bdata" in data:
        return np.frombuffer(base64.b64decode(data["bdata"]), dtype=data["dtype"]).tolist()
    return list(data)


def events(n: int, reward: bool = True) -> pd.DataFrame:
    started = [TrainingJobEvent(id="s", type="training_started", data={"num_sequences": n})]
    steps = [
        TrainingJobEvent(
            id=f"g{i}",
            type="gradient_step",
            data={"loss/train": 1.0 / (i + 1), **({"train/reward": i} if reward else {})},
        )
        for i in range(n)
    ]
    return frames.events_frame(started + steps)


def test_training_curves_loss_and_reward_over_steps() -> None:
    fig = plots.training_curves(events(3)).to_dict()
    loss, reward = fig["data"]
    assert (loss["type"], loss["name"], reward["name"]) == ("scatter", "loss", "reward")
    assert values(loss["x"]) == [1.0, 2.0, 3.0] and values(loss["y"]) == [1.0, 0.5, 1 / 3]
    assert values(reward["y"]) == [0.0, 1.0, 2.0] and reward["yaxis"] == "y2"


def test_training_curves_draw_only_the_metrics_the_job_reports() -> None:
    sft = plots.training_curves(events(3, reward=False)).to_dict()
    assert [t["name"] for t in sft["data"]] == ["loss"] and "yaxis2" not in sft["layout"]
    assert sft["layout"]["yaxis"]["title"]["text"] == "loss"
    with_empty_reward = events(2).assign(**{"train/reward": float("nan")})
    assert [t["name"] for t in plots.training_curves(with_empty_reward).data] == ["loss"]
    waiting = plots.training_curves(frames.events_frame([])).to_dict()
    assert waiting["data"] == [] and waiting["layout"]["annotations"][0]["text"] == "no gradient step yet"


def test_training_curves_switch_to_webgl_for_large_runs() -> None:
    fig = plots.training_curves(events(plots.WEBGL_THRESHOLD + 1)).to_dict()
    assert {t["type"] for t in fig["data"]} == {"scattergl"}


def test_figures_read_on_light_and_dark_themes() -> None:
    """Transparent backgrounds and a mid-grey ink: nothing dark on a dark background."""
    figures = [
        plots.training_curves(events(2)),
        plots.checkpoint_metrics(frames.checkpoints_frame([{"id": "a", "step": 0}], "m"), "step"),
        plots.reward_distribution(frames.groups_frame([group([0.0, 1.0])])),
        plots.logprob_strip(strip([-0.1])),
        plots.trace_timeseries(calls()),
        plots.call_tree(calls()),
    ]
    for fig in figures:
        layout = fig.to_dict()["layout"]["template"]["layout"]
        assert layout["paper_bgcolor"] == layout["plot_bgcolor"] == "rgba(0,0,0,0)"
        assert layout["font"]["color"] == plots.INK
        assert layout["xaxis"]["gridcolor"] == layout["yaxis"]["gridcolor"] == plots.GRID
    ink = int(plots.INK[1:3], 16) / 255
    assert 0.4 < ink < 0.6  # mid grey: readable on white and on #111


def test_checkpoint_metrics_overlays_models() -> None:
    df = pd.concat(
        [
            frames.checkpoints_frame(
                [{"id": "a", "step": s, "metrics": {"val/reward": s / 2}} for s in (2, 0, 1)], "m1"
            ),
            frames.checkpoints_frame([{"id": "b", "step": 0, "metrics": {}}], "m2"),
        ]
    )
    fig = plots.checkpoint_metrics(df, "val/reward").to_dict()
    assert [t["name"] for t in fig["data"]] == ["m1", "m2"]
    assert values(fig["data"][0]["x"]) == [0.0, 1.0, 2.0] and values(fig["data"][0]["y"]) == [0.0, 0.5, 1.0]
    assert np.isnan(values(fig["data"][1]["y"])[0])
    assert fig["layout"]["yaxis"]["title"]["text"] == "val/reward"


def test_reward_distribution_per_group() -> None:
    fig = plots.reward_distribution(frames.groups_frame([group([0.0, 1.0]), group([0.5])])).to_dict()
    assert [(t["type"], t["name"]) for t in fig["data"]] == [("box", "0"), ("box", "1")]
    assert values(fig["data"][0]["y"]) == [0.0, 1.0] and fig["data"][0]["boxpoints"] == "all"


def strip(logprobs: list[float]) -> pd.DataFrame:
    rows = [{"position": i, "token": f"t{i}\n", "logprob": lp} for i, lp in enumerate(logprobs)]
    return frames.frame(rows, {"position": frames.INT, "token": frames.STR, "logprob": frames.FLOAT})


def test_logprob_strip_uses_one_fixed_probability_scale() -> None:
    heat = plots.logprob_strip(strip([-0.1, -3.0])).to_dict()["data"][0]
    assert heat["type"] == "heatmap" and heat["text"] == [["t0↵", "t1↵"]]
    assert np.allclose(values(heat["z"][0]), np.exp([-0.1, -3.0]))
    assert np.allclose(values(heat["customdata"][0]), [-0.1, -3.0])  # the logprob, on hover
    assert (heat["zauto"], heat["zmin"], heat["zmax"]) == (False, 0.0, 1.0)
    assert heat["colorscale"] == plots.PROBABILITY_SCALE
    # a strip of unlikely tokens only is not rescaled: -4.4 stays at the red end
    unsure = plots.logprob_strip(strip([-4.4, -5.0])).to_dict()["data"][0]
    assert (unsure["zmin"], unsure["zmax"]) == (0.0, 1.0) and max(values(unsure["z"][0])) < 0.02
    red, green = plots.probability_color(-4.4), plots.probability_color(-0.01)
    assert red.startswith("rgb(24") and green.startswith("rgb(10")
    assert plots.probability_color(float("-inf")) == plots.probability_color(-100.0)


def calls() -> pd.DataFrame:
    def c(id_: str, parent: str | None, start: float, end: float, **kw: Any) -> dict[str, Any]:
        t0 = pd.Timestamp("2026-01-01", tz="UTC")
        return {
            "id": id_,
            "trace_id": "t",
            "parent_id": parent,
            "op_name": id_,
            "started_at": (t0 + pd.Timedelta(seconds=start)).isoformat(),
            "ended_at": (t0 + pd.Timedelta(seconds=end)).isoformat(),
            **kw,
        }

    costs = {"m": {"prompt_tokens_total_cost": 0.5, "completion_tokens_total_cost": 0.25}}
    return frames.calls_frame(
        [
            c("root", None, 0, 3, summary={"weave": {"costs": costs}}),
            c("second", "root", 2, 3),
            c("first", "root", 0.5, 1.5, exception="boom"),
            c("leaf", "first", 0.75, 1.0),
        ]
    )


def test_trace_timeseries_latency_and_cost() -> None:
    latency, cost = plots.trace_timeseries(calls()).to_dict()["data"]
    assert values(latency["y"]) == [3000.0, 1000.0, 250.0, 1000.0]
    assert values(cost["y"])[0] == 0.75 and cost["yaxis"] == "y2"
    assert latency["text"] == ["root", "first", "leaf", "second"]


def test_call_tree_waterfall_depth_first() -> None:
    bar = plots.call_tree(calls()).to_dict()["data"][0]
    assert bar["type"] == "bar" and bar["orientation"] == "h"
    assert bar["customdata"] == ["root", "first", "leaf", "second"]
    assert bar["text"] == ["root", "\u00a0\u00a0first", "\u00a0\u00a0\u00a0\u00a0leaf", "\u00a0\u00a0second"]
    assert values(bar["base"]) == [0.0, 500.0, 750.0, 2000.0]
    assert values(bar["x"]) == [3000.0, 1000.0, 250.0, 1000.0]
    assert bar["marker"]["color"][1] == "#d62728"
