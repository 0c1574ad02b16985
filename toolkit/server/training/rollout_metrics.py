"""Per-RL-step statistics of the trajectories a job trains on, named as TRL's ``GRPOTrainer`` logs them
(docs/widgets.md, "RL health metrics"): reward spread, per-component rewards, the share of
zero-variance groups, completion lengths (all, and of those that ended by themselves) and the share
cut by ``max_tokens``.

Every statistic goes through :mod:`.stats` (no overflow); one without a finite value is left out.
"""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Sequence

from ...types.training import Choice, Trajectory, TrajectoryGroup
from . import stats


def completion_length(trajectory: Trajectory) -> int | None:
    """The tokens the model generated in the trajectory (every choice, all turns), from their
    ``token_ids`` or logprobs; None when no choice says how many tokens it has."""
    counts = [n for c in trajectory.choices() if (n := _choice_tokens(c)) is not None]
    return sum(counts) if counts else None


def _choice_tokens(choice: Choice) -> int | None:
    if choice.token_ids is not None:
        return len(choice.token_ids)
    if choice.logprobs is not None and choice.logprobs.content is not None:
        return len(choice.logprobs.content)
    return None


def truncated(trajectory: Trajectory) -> bool | None:
    """Whether the trajectory's last completion stopped at ``max_tokens`` (finish_reason "length");
    None for a trajectory without a choice."""
    choices = trajectory.choices()
    return choices[-1].finish_reason == "length" if choices else None


def _number(value: object) -> float | None:
    if isinstance(value, bool | int | float) and math.isfinite(value):
        return float(value)
    return None


def rollout_metrics(groups: Sequence[TrajectoryGroup]) -> dict[str, float]:
    """``reward_std`` (population std over the whole batch), ``reward_min``/``reward_max``,
    ``rewards/<metric>/mean`` and ``/std`` of each numeric trajectory metric, ``frac_reward_zero_std``
    (the share of trajectories whose group's rewards all agree), ``completions/mean_length``,
    ``min_length``, ``max_length``, the same three of the completions that ended by themselves
    (``completions/mean_terminated_length``, ...: not cut by ``max_tokens``; left out when every one
    was cut, where TRL logs 0) and ``completions/clipped_ratio``."""
    trajectories = [t for g in groups for t in g.trajectories]
    rewards = [t.reward for t in trajectories]
    out: dict[str, float | None] = {}
    if rewards:
        out |= {"reward_std": stats.pstdev(rewards), "reward_min": min(rewards), "reward_max": max(rewards)}
        flat = sum(len(g.trajectories) for g in groups if _zero_std([t.reward for t in g.trajectories]))
        out["frac_reward_zero_std"] = flat / len(rewards)
    components: dict[str, list[float]] = defaultdict(list)
    for t in trajectories:
        for key, value in t.metrics.items():
            if (number := _number(value)) is not None:
                components[key].append(number)
    for key in sorted(components):
        out[f"rewards/{key}/mean"] = stats.mean(components[key])
        out[f"rewards/{key}/std"] = stats.pstdev(components[key])
    measured = [(n, truncated(t)) for t in trajectories if (n := completion_length(t)) is not None]
    out |= _lengths("", [n for n, _ in measured])
    out |= _lengths("terminated_", [n for n, cut in measured if not cut])
    cut = [c for t in trajectories if (c := truncated(t)) is not None]
    if cut:
        out["completions/clipped_ratio"] = sum(cut) / len(cut)
    return {k: float(v) for k, v in out.items() if v is not None and math.isfinite(v)}


def _lengths(kind: str, lengths: Sequence[int]) -> dict[str, float | None]:
    """``completions/mean_<kind>length``, ``min_`` and ``max_`` of ``lengths`` (nothing without one)."""
    if not lengths:
        return {}
    return {
        f"completions/mean_{kind}length": sum(lengths) / len(lengths),
        f"completions/min_{kind}length": float(min(lengths)),
        f"completions/max_{kind}length": float(max(lengths)),
    }


def _zero_std(rewards: Sequence[float]) -> bool:
    return bool(rewards) and max(rewards) == min(rewards)
