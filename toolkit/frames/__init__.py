"""pandas frames of jobs, job events, checkpoints, trajectories, chat completions and trace calls.

Each ``*_frame`` function takes typed objects (or their plain dicts) and returns a DataFrame with
typed columns and UTC timestamps; metrics become float columns of their own. Each ``fetch_*``
function reads the same straight from a :class:`~toolkit.Client`, walking every page.

Training resources in :mod:`._training`, stored trajectories in :mod:`._trajectories`, chat
completions and trace calls in :mod:`._calls`; the dtypes and :func:`frame` they share in
:mod:`._common`.
"""

from ._calls import (
    CALL_COLUMNS,
    COMPLETION_COLUMNS,
    call_summary,
    calls_frame,
    completions_frame,
    logprobs_frame,
)
from ._common import BOOL, FLOAT, INT, STR, TIME, flatten, frame, with_values_first
from ._training import (
    CHECKPOINT_COLUMNS,
    EVENT_COLUMNS,
    JOB_COLUMNS,
    TRAJECTORY_COLUMNS,
    checkpoints_frame,
    events_frame,
    fetch_checkpoints,
    fetch_events,
    fetch_jobs,
    groups_frame,
    jobs_frame,
)
from ._trajectories import STORED_COLUMNS, TURN_COLUMNS, TrajectorySource, trajectories, turns

__all__ = [
    "BOOL",
    "CALL_COLUMNS",
    "CHECKPOINT_COLUMNS",
    "COMPLETION_COLUMNS",
    "EVENT_COLUMNS",
    "FLOAT",
    "INT",
    "JOB_COLUMNS",
    "STORED_COLUMNS",
    "STR",
    "TIME",
    "TRAJECTORY_COLUMNS",
    "TURN_COLUMNS",
    "TrajectorySource",
    "call_summary",
    "calls_frame",
    "checkpoints_frame",
    "completions_frame",
    "events_frame",
    "fetch_checkpoints",
    "fetch_events",
    "fetch_jobs",
    "flatten",
    "frame",
    "groups_frame",
    "jobs_frame",
    "logprobs_frame",
    "trajectories",
    "turns",
    "with_values_first",
]
