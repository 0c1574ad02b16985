"""pandas frames: columns, dtypes, UTC timestamps, flattened metrics, and reads straight from a client."""

from __future__ import annotations

from datetime import UTC, datetime

import pandas as pd
import pytest

from support.widget_support import group, new_model
from toolkit import frames
from toolkit.types.chat import ChatCompletion
from toolkit.types.training import Checkpoint, TrainingJob, TrainingJobEvent


def is_utc(series: pd.Series) -> bool:
    return isinstance(series.dtype, pd.DatetimeTZDtype) and str(series.dtype.tz) == "UTC"


def events() -> list[TrainingJobEvent]:
    return [
        TrainingJobEvent(
            id="e1", type="training_started", data={"num_sequences": 2}, created_at="2026-01-01T00:00:00Z"
        ),
        TrainingJobEvent(id="e2", type="gradient_step", data={"loss": 0.5, "reward": 1}),
        TrainingJobEvent(id="e3", type="gradient_step", data={"loss": 0.25, "reward": 2, "note": "x"}),
        TrainingJobEvent(id="e4", type="training_failed", data={"error_message": "out of memory"}),
    ]


def test_events_frame_types_steps_and_metrics() -> None:
    df = frames.events_frame(events())
    assert list(df.columns[:6]) == ["id", "type", "created_at", "step", "num_sequences", "error_message"]
    assert df["step"].dtype == "Int64" and df["step"].tolist()[1:3] == [1, 2]
    assert pd.isna(df["step"].iloc[0])
    assert df["loss"].dtype == "float64" and df["reward"].tolist()[1:3] == [1.0, 2.0]
    assert df["note"].dtype == pd.StringDtype()
    assert df["num_sequences"].iloc[0] == 2
    assert df["error_message"].iloc[3] == "out of memory"
    assert is_utc(df["created_at"])
    assert df["created_at"].iloc[0] == pd.Timestamp("2026-01-01", tz="UTC")


def test_empty_frames_keep_typed_columns() -> None:
    for df, column, dtype in [
        (frames.events_frame([]), "created_at", "datetime64[ns, UTC]"),
        (frames.checkpoints_frame([]), "step", "Int64"),
        (frames.groups_frame([]), "reward", "float64"),
        (frames.completions_frame([]), "latency_s", "float64"),
        (frames.calls_frame([]), "started_at", "datetime64[ns, UTC]"),
        (frames.jobs_frame([]), "duration_s", "float64"),
    ]:
        assert df.empty and str(df[column].dtype) == dtype


def test_jobs_frame_duration() -> None:
    start = datetime(2026, 1, 1, tzinfo=UTC)
    job = TrainingJob(
        id="j", status="succeeded", kind="rl", started_at=start, finished_at=start.replace(second=30)
    )
    df = frames.jobs_frame([job, {"id": "k", "status": "queued"}])
    assert df["duration_s"].iloc[0] == 30.0 and pd.isna(df["duration_s"].iloc[1])
    assert df["status"].tolist() == ["succeeded", "queued"] and is_utc(df["started_at"])


def test_checkpoints_frame_flattens_metrics() -> None:
    ckpts = [Checkpoint(id="a", step=0, metrics={}), Checkpoint(id="b", step=1, metrics={"val/reward": 0.5})]
    df = frames.checkpoints_frame(ckpts, model_id="m")
    assert df["model_id"].tolist() == ["m", "m"]
    assert df["val/reward"].dtype == "float64" and df["val/reward"].iloc[1] == 0.5


def test_groups_frame_one_row_per_trajectory() -> None:
    df = frames.groups_frame([group([0.0, 1.0]), group([0.5]).model_dump()])
    assert df["group"].tolist() == [0, 0, 1] and df["index"].tolist() == [0, 1, 0]
    assert df["reward"].dtype == "float64" and df["num_choices"].tolist() == [1, 1, 1]
    assert df["last_content"].iloc[1] == "answer 1.0" and df["finish_reason"].iloc[0] == "stop"
    assert df["metric/correct"].tolist() == [0.0, 1.0, 1.0]
    assert df["meta/task"].iloc[0] == "math"


def completion() -> ChatCompletion:
    return ChatCompletion.model_validate(
        {
            "id": "c1",
            "created": 1767225600,
            "model": "base",
            "choices": [
                {
                    "index": i,
                    "message": {"role": "assistant", "content": f"hi {i}"},
                    "finish_reason": "length",
                    "logprobs": {
                        "content": [{"token": "hi", "logprob": -0.5}, {"token": " x", "logprob": -1.5}]
                    },
                }
                for i in range(2)
            ],
            "usage": {"prompt_tokens": 5, "completion_tokens": 4, "total_tokens": 9},
        }
    )


def test_completions_frame_one_row_per_choice() -> None:
    df = frames.completions_frame([completion()], latency_s=[0.25])
    assert df["choice"].tolist() == [0, 1] and df["finish_reason"].tolist() == ["length", "length"]
    assert df["total_tokens"].dtype == "Int64" and df["total_tokens"].iloc[0] == 9
    assert df["latency_s"].tolist() == [0.25, 0.25] and df["mean_logprob"].iloc[0] == -1.0
    assert df["created"].iloc[0] == pd.Timestamp("2026-01-01", tz="UTC")


def test_logprobs_frame() -> None:
    df = frames.logprobs_frame(completion(), choice=1)
    assert df["token"].tolist() == ["hi", " x"] and df["prob"].iloc[0] == pytest.approx(0.6065, abs=1e-4)


def call(id_: str, parent: str | None, start: str, end: str | None, **kw: object) -> dict[str, object]:
    return {
        "id": id_,
        "project_id": "p",
        "trace_id": "t",
        "parent_id": parent,
        "op_name": f"weave:///e/p/op/{id_}:abc",
        "started_at": start,
        "ended_at": end,
        "inputs": {},
        "attributes": {},
        **kw,
    }


def test_calls_frame_flattens_summary() -> None:
    usage = {"m1": {"prompt_tokens": 3, "completion_tokens": 2, "total_tokens": 5}, "m2": {"input_tokens": 1}}
    costs = {"m1": {"prompt_tokens_total_cost": 0.001, "completion_tokens_total_cost": 0.002}}
    rows = [
        call(
            "root",
            None,
            "2026-01-01T00:00:00Z",
            "2026-01-01T00:00:02Z",
            summary={
                "usage": usage,
                "weave": {"status": "success", "latency_ms": 2000, "trace_name": "root", "costs": costs},
            },
        ),
        call("child", "root", "2026-01-01T00:00:01Z", "2026-01-01T00:00:01.5Z", exception="ValueError"),
        call("open", "root", "2026-01-01T00:00:01Z", None),
    ]
    df = frames.calls_frame(rows)
    assert df["status"].tolist() == ["success", "error", "running"]
    assert df["latency_ms"].tolist()[:2] == [2000.0, 500.0] and pd.isna(df["latency_ms"].iloc[2])
    assert df["prompt_tokens"].iloc[0] == 4 and df["total_tokens"].dtype == "Int64"
    assert df["cost_usd"].iloc[0] == pytest.approx(0.003) and pd.isna(df["cost_usd"].iloc[1])
    assert df["name"].tolist()[:2] == ["root", "weave:///e/p/op/child:abc"]
    assert is_utc(df["ended_at"])


# ----------------------------------------------------------------------------- straight from the server


def test_fetch_checkpoints(server) -> None:
    client = server.client()
    models = [new_model(client, "frames") for _ in range(2)]
    client.models.log(models[0].id, split="val", trajectory_groups=[group([0.0, 1.0]), group([1.0])])
    df = frames.fetch_checkpoints(client, *(m.id for m in models))
    assert set(df["model_id"]) == {m.id for m in models}
    assert df["step"].dtype == "Int64" and is_utc(df["created_at"])
    assert any(c.startswith("val/") for c in df.columns)


def test_with_values_first_orders_by_coverage_and_drops_empty_columns() -> None:
    df = pd.DataFrame(
        {
            "step": [0, 1, 2],
            "rare": [None, None, 1.0],
            "empty": [None, None, None],
            "full": [1.0, 2.0, 3.0],
            "half": [1.0, None, 2.0],
        }
    )
    assert list(frames.with_values_first(df, ["step", "missing"]).columns) == ["step", "full", "half", "rare"]
