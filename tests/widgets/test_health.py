"""RL health rules and the health figure on synthetic frames: each rule fires on its pattern and stays
quiet on a healthy run; the figure draws every panel and the warnings."""

from __future__ import annotations

from typing import Any

import pandas as pd
import pytest

from toolkit import plots
from toolkit.frames import checkpoints_frame, events_frame
from toolkit.health import health_warnings, job_health, model_health
from toolkit.types.training import Checkpoint, TrainingJobEvent

STEPS = 6


def healthy(**changes: list[float]) -> pd.DataFrame:
    """Six RL steps of a run that learns: reward rising, entropy easing, few flat groups, no clipping."""
    columns: dict[str, Any] = {
        "step": list(range(1, STEPS + 1)),
        "reward": [0.2, 0.3, 0.4, 0.5, 0.6, 0.7],
        "reward_std": [0.3] * STEPS,
        "loss": [0.5, 0.4, 0.45, 0.3, 0.35, 0.3],
        "entropy": [2.0, 1.9, 1.85, 1.8, 1.7, 1.65],
        "frac_reward_zero_std": [0.25, 0.25, 0.0, 0.25, 0.0, 0.25],
        "completions/clipped_ratio": [0.1, 0.0, 0.1, 0.0, 0.1, 0.0],
        "clip_ratio/region_mean": [0.0] * STEPS,
        "grad_norm": [1.0, 1.2, 0.9, 1.1, 1.0, 1.3],
        "learning_rate": [1e-4] * STEPS,
    }
    frame = pd.DataFrame({**columns, **changes})
    frame["rl_step"] = frame["step"]
    return frame


def rules(frame: pd.DataFrame) -> list[str]:
    return [w.rule for w in health_warnings(frame)]


def test_a_healthy_run_raises_no_warning() -> None:
    assert health_warnings(healthy()) == []


@pytest.mark.parametrize(
    ("rule", "changes"),
    [
        ("entropy_collapse", {"entropy": [2.0, 1.5, 1.0, 0.5, 0.2, 0.05]}),
        ("zero_std_groups", {"frac_reward_zero_std": [0.25, 0.5, 0.5, 0.75, 0.75, 0.875]}),
        ("lengths_pinned", {"completions/clipped_ratio": [0.1, 0.3, 0.5, 0.8, 0.9, 1.0]}),
        ("reward_flat", {"reward": [0.5, 0.5, 0.505, 0.5, 0.495, 0.5]}),
        ("clip_high", {"clip_ratio/region_mean": [0.0, 0.05, 0.1, 0.2, 0.3, 0.4]}),
        ("grad_spike", {"grad_norm": [1.0, 1.2, 0.9, 1.1, 30.0, 1.0]}),
    ],
)
def test_each_rule_fires_on_its_pattern(rule: str, changes: dict[str, list[float]]) -> None:
    found = health_warnings(healthy(**changes))
    assert [w.rule for w in found] == [rule]
    assert found[0].message and found[0].metric in {*changes, "reward"}


def test_reward_flat_reads_rl_steps_not_gradient_steps() -> None:
    """Within one job the reward is the same on every gradient step: that is not a flat reward."""
    frame = healthy(reward=[0.5] * STEPS)
    assert rules(frame) == ["reward_flat"]
    frame["rl_step"] = 1
    assert rules(frame) == []


def test_zero_std_falls_back_to_trainable_groups() -> None:
    frame = healthy().drop(columns=["frac_reward_zero_std"])
    frame["num_groups_submitted"], frame["num_groups_trainable"] = 4.0, 1.0
    assert rules(frame) == ["zero_std_groups"]


def test_job_and_model_frames_use_gradient_step_names() -> None:
    events = events_frame(
        [
            TrainingJobEvent(id="s", type="training_started", data={"num_sequences": 2}),
            TrainingJobEvent(id="1", type="gradient_step", data={"loss": 0.5, "entropy": 2.0}),
            TrainingJobEvent(id="2", type="gradient_step", data={"loss": 0.4, "entropy": 1.9}),
        ]
    )
    job = job_health(events, rl_step=3)
    assert list(job["step"]) == [1, 2] and set(job["rl_step"]) == {3} and job.attrs["x"] == "gradient step"
    checkpoints = checkpoints_frame(
        [
            Checkpoint(id="c0", step=0, metrics={}),
            Checkpoint(id="w", step=1, metrics={"sft/final_loss": 0.3}, trained=True),  # an SFT warm start
            Checkpoint(
                id="c2",
                step=2,
                metrics={"loss/entropy": 2.0, "train/reward": 0.25, "loss/train": 0.5},
                trained=True,
            ),
        ]
    )
    model = model_health(checkpoints)
    assert list(model["step"]) == [2] and model.attrs["x"] == "RL step"  # the RL step alone
    assert (model["entropy"].iloc[0], model["reward"].iloc[0], model["loss"].iloc[0]) == (2.0, 0.25, 0.5)


def test_run_health_draws_the_panels_and_the_warnings() -> None:
    fig = plots.run_health(healthy(entropy=[2.0, 1.5, 1.0, 0.5, 0.2, 0.05]))
    titles = {a.text for a in fig.layout.annotations}
    assert {"reward", "zero-std groups", "entropy", "grad norm", "learning rate", "KL / clip"} <= titles
    assert "⚠ entropy collapse" in titles and fig.layout.title.text == "RL health: 1 warning(s)"
    assert any(tuple(axis.range or ()) == (0.0, 2e-4) for axis in fig.select_yaxes())  # constant lr from 0
    band = [t for t in fig.data if t.fill == "toself"]
    assert len(band) == 1 and max(band[0].y) == pytest.approx(0.7 + 0.3)  # reward mean ± reward_std
    quiet = plots.run_health(healthy())
    assert quiet.layout.title.text == "RL health" and not any(
        "⚠" in (a.text or "") for a in quiet.layout.annotations
    )
    assert plots.run_health(pd.DataFrame({"step": []})).layout.annotations[0].text == "no RL step metrics yet"
