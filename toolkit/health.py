"""RL health: a run's per-step metrics as one frame (TRL names, docs/widgets.md "RL health metrics")
and the warnings that known failures raise on it (:func:`health_warnings`, pure and unit-tested).

A job's frame has one row per gradient step (``step``), all of one RL step (``rl_step``); a model's
has one row per checkpoint, its metrics renamed back from the names checkpoints file them under.
Rules that need a trend across RL steps (reward flat while the loss moves) read the frame averaged
per ``rl_step``. Thresholds are this toolkit's choices; docs/widgets.md says which are unconfirmed.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np
import pandas as pd

from .frames import checkpoints_frame, events_frame
from .types.training import CHECKPOINT_METRIC_NAMES

if TYPE_CHECKING:
    from .client import Client

FROM_CHECKPOINT = {
    **{name: key for key, name in CHECKPOINT_METRIC_NAMES.items()},
    "train/reward": "reward",
    "train/reward_std_dev": "reward_std_dev",
    "train/exception_rate": "exception_rate",
    "data/step_num_groups_submitted": "num_groups_submitted",
    "data/step_num_groups_trainable": "num_groups_trainable",
}
ENTROPY_COLLAPSE_FRACTION = 0.3  # latest entropy below 30% of the first
ZERO_STD_MOST = 0.5  # more than half the trajectories in zero-std groups
CLIPPED_PINNED = 0.5  # half or more of the completions cut by max_tokens
REWARD_FLAT_RANGE = 0.02  # reward moves less than 2% of its scale (at least 1) ...
LOSS_MOVES_RANGE = 0.1  # ... while the loss moves more than 10% of its largest magnitude
CLIP_REGION_HIGH = 0.2  # clip_ratio/region_mean above this is far off-policy
GRAD_SPIKE_FACTOR = 10.0  # a grad norm ten times the median of the steps before it
MIN_TREND_POINTS = 3


@dataclass(frozen=True)
class HealthWarning:
    """A known failure seen in the run: its ``rule``, the ``metric`` it reads, the ``step`` (x of the
    frame) where it shows, and a sentence saying what it means."""

    rule: str
    metric: str
    step: float
    message: str


def job_health(events: pd.DataFrame, rl_step: int = 1) -> pd.DataFrame:
    """The gradient steps of a job's events frame (:func:`toolkit.frames.events_frame`)."""
    steps = events[events["type"] == "gradient_step"] if "type" in events else events
    out = steps.drop(columns=[c for c in ("id", "type", "created_at") if c in steps]).reset_index(drop=True)
    out["rl_step"] = rl_step
    out.attrs["x"] = "gradient step"
    return out


def model_health(checkpoints: pd.DataFrame) -> pd.DataFrame:
    """The checkpoints of RL jobs (those with a metric other than an SFT job's ``sft/...``; from
    :func:`toolkit.frames.checkpoints_frame`), one row per RL step, with the gradient-step names
    (``loss/train`` -> ``loss``, ``train/reward`` -> ``reward``)."""
    not_metrics = ("model_id", "id", "step", "trained", "created_at")
    metric_columns = [c for c in checkpoints.columns if c not in not_metrics and not c.startswith("sft/")]
    rows = checkpoints[checkpoints[metric_columns].notna().any(axis=1)] if metric_columns else checkpoints[:0]
    out = rows.rename(columns=FROM_CHECKPOINT).drop(columns=["id", "created_at"], errors="ignore")
    out = out.sort_values("step").reset_index(drop=True)
    out["rl_step"] = out["step"]
    out.attrs["x"] = "RL step"
    return out


def fetch_health(client: Client, *, job_id: str | None = None, model_id: str | None = None) -> pd.DataFrame:
    """:func:`job_health` of a job, or :func:`model_health` of a model, read through ``client``."""
    if job_id is not None:
        job = client.training_jobs.retrieve(job_id)
        events = events_frame(client.training_jobs.events.list(job_id, limit=100))
        return job_health(events, (job.base_step or 0) + 1)
    if model_id is None:
        raise ValueError("give a job_id or a model_id")
    return model_health(checkpoints_frame(client.models.checkpoints.list(model_id, limit=100)))


def per_rl_step(frame: pd.DataFrame) -> pd.DataFrame:
    """The numeric columns averaged per ``rl_step`` (one row per RL step, in order)."""
    numeric = frame.select_dtypes("number")
    if "rl_step" not in numeric or numeric.empty:
        return numeric
    return numeric.groupby("rl_step", sort=True).mean().reset_index()


def _series(frame: pd.DataFrame, column: str) -> tuple[np.ndarray, np.ndarray]:
    """(x, values) of a column's rows that hold a number."""
    if column not in frame:
        return np.array([]), np.array([])
    x = frame["step"] if "step" in frame else pd.Series(range(len(frame)), index=frame.index)
    keep = frame[column].notna() & x.notna()
    return x[keep].to_numpy(dtype=float), frame.loc[keep, column].to_numpy(dtype=float)


def _zero_std_fraction(frame: pd.DataFrame) -> pd.DataFrame:
    if "frac_reward_zero_std" in frame or not {"num_groups_submitted", "num_groups_trainable"} <= set(frame):
        return frame
    frame = frame.copy()  # a server that does not emit it: share of groups without a learning signal
    frame["frac_reward_zero_std"] = 1 - frame["num_groups_trainable"] / frame["num_groups_submitted"]
    return frame


def _entropy_collapse(frame: pd.DataFrame) -> list[HealthWarning]:
    x, entropy = _series(frame, "entropy")
    if len(entropy) < MIN_TREND_POINTS or entropy[0] <= 0:
        return []
    if entropy[-1] >= ENTROPY_COLLAPSE_FRACTION * entropy[0]:
        return []
    text = (
        f"Entropy collapse: entropy fell from {entropy[0]:.3g} to {entropy[-1]:.3g} (below"
        f" {ENTROPY_COLLAPSE_FRACTION:.0%} of its start); the policy stops exploring. Lower the learning"
        " rate, or raise epsilon_high (Clip-Higher, DAPO)."
    )
    return [HealthWarning("entropy_collapse", "entropy", float(x[-1]), text)]


def _zero_std_groups(frame: pd.DataFrame) -> list[HealthWarning]:
    x, frac = _series(_zero_std_fraction(frame), "frac_reward_zero_std")
    if not len(frac) or frac[-1] <= ZERO_STD_MOST:
        return []
    text = (
        f"No learning signal: {frac[-1]:.0%} of the trajectories are in groups whose rewards all agree"
        " (zero advantage). Make the task harder or easier, sample more per group, or drop such groups."
    )
    return [HealthWarning("zero_std_groups", "frac_reward_zero_std", float(x[-1]), text)]


def _lengths_pinned(frame: pd.DataFrame) -> list[HealthWarning]:
    x, clipped = _series(frame, "completions/clipped_ratio")
    if not len(clipped) or clipped[-1] < CLIPPED_PINNED:
        return []
    text = (
        f"Lengths pinned at the limit: {clipped[-1]:.0%} of the completions were cut by max_tokens; their"
        " rewards are noise. Raise max_tokens, or penalise or drop truncated completions."
    )
    return [HealthWarning("lengths_pinned", "completions/clipped_ratio", float(x[-1]), text)]


def _reward_flat(frame: pd.DataFrame) -> list[HealthWarning]:
    steps = per_rl_step(frame)
    if not {"reward", "loss"} <= set(steps) or len(steps) < MIN_TREND_POINTS + 1:
        return []
    reward, loss = steps["reward"].dropna().to_numpy(), steps["loss"].dropna().to_numpy()
    if len(reward) < MIN_TREND_POINTS + 1 or len(loss) < MIN_TREND_POINTS + 1:
        return []
    reward_range = float(reward.max() - reward.min())
    loss_range, loss_scale = float(loss.max() - loss.min()), float(np.abs(loss).max())
    flat = reward_range <= REWARD_FLAT_RANGE * max(1.0, float(np.abs(reward).max()))
    if not (flat and loss_scale > 0 and loss_range > LOSS_MOVES_RANGE * loss_scale):
        return []
    text = (
        f"Reward flat while the loss moves: over {len(reward)} RL steps the reward stayed within"
        f" {reward_range:.3g} while the loss changed by {loss_range:.3g}. The updates are not reaching"
        " the reward: check the reward function and the learning rate."
    )
    last = float(frame["step"].max()) if "step" in frame else float(len(frame))
    return [HealthWarning("reward_flat", "reward", last, text)]


def _clip_high(frame: pd.DataFrame) -> list[HealthWarning]:
    x, region = _series(frame, "clip_ratio/region_mean")
    if not len(region) or region[-1] <= CLIP_REGION_HIGH:
        return []
    text = (
        f"Clip fraction high: {region[-1]:.0%} of the tokens are clipped; the updates are far off-policy."
        " Lower the learning rate or the number of passes over the same samples."
    )
    return [HealthWarning("clip_high", "clip_ratio/region_mean", float(x[-1]), text)]


def _grad_spikes(frame: pd.DataFrame) -> list[HealthWarning]:
    x, norms = _series(frame, "grad_norm")
    out = []
    for i in range(MIN_TREND_POINTS, len(norms)):
        median = float(np.median(norms[:i]))
        if median > 0 and norms[i] > GRAD_SPIKE_FACTOR * median:
            text = (
                f"Grad-norm spike: {norms[i]:.3g}, over {GRAD_SPIKE_FACTOR:g}x the median before it"
                f" ({median:.3g})."
            )
            out.append(HealthWarning("grad_spike", "grad_norm", float(x[i]), text))
    return out


RULES: Sequence[Callable[[pd.DataFrame], list[HealthWarning]]] = (
    _entropy_collapse,
    _zero_std_groups,
    _lengths_pinned,
    _reward_flat,
    _clip_high,
    _grad_spikes,
)


def health_warnings(frame: pd.DataFrame) -> list[HealthWarning]:
    """The warnings of every rule that fires on the frame (:func:`job_health`, :func:`model_health`,
    or any frame with a ``step`` column and metric columns named as they are)."""
    ordered = frame.sort_values("step") if "step" in frame else frame
    return [warning for rule in RULES for warning in rule(ordered)]
