"""Rollouts: turn chat completions into trajectories, gather them into groups, and run agents.

- :mod:`.trajectories`: :func:`trajectory` (a prompt and a completion's choice, ready for RL) and the
  checks of what RL needs (:func:`missing_rl_data`, :func:`rl_untrainable`).
- :mod:`.gathering`: :func:`gather` / :func:`gather_async`, groups of rollouts with bounded
  concurrency, a progress bar and exceptions recorded per group (:class:`GatherError` when all
  failed, one :class:`GatherWarning` when some did).
- :mod:`.tools` and :mod:`.agent`: tools as plain Python functions, an :class:`Environment`, and the
  multi-turn :class:`Agent` / :class:`AsyncAgent` loop whose trajectories train every assistant turn.
"""

from .agent import Agent, AsyncAgent, Environment, RolloutTimeout, policy_version
from .gathering import GatherError, GatherWarning, exception_record, gather, gather_async
from .tools import FunctionTool, ToolArgumentsError, tool, tool_content
from .trajectories import (
    MissingTokensWarning,
    choice_from_completion,
    missing_rl_data,
    rl_untrainable,
    trajectory,
)

__all__ = [
    "Agent",
    "AsyncAgent",
    "Environment",
    "FunctionTool",
    "GatherError",
    "GatherWarning",
    "MissingTokensWarning",
    "RolloutTimeout",
    "ToolArgumentsError",
    "choice_from_completion",
    "exception_record",
    "gather",
    "gather_async",
    "missing_rl_data",
    "policy_version",
    "rl_untrainable",
    "tool",
    "tool_content",
    "trajectory",
]
