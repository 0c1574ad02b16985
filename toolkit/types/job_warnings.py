"""What a training job warns about in its ``warning`` events (``{"code", "message"}``), and the
stale-groups check the server (at run time) and the client (at ``create``) share, so both say the same.

Stale groups: each trajectory records the checkpoint step that sampled it
(``initial_policy_version`` / ``final_policy_version``, as ART names them; the toolkit's agents fill
them from a ``name:step<N>`` model name). A group whose newest recorded step is older than the
model's latest checkpoint was sampled from an older policy: training on it again, typically by
re-running a notebook's training cell on the same groups, trains the model twice on the same data.

Twin jobs: a job created while one of the same model with the same request is still queued or
running is refused (409) with :data:`DUPLICATE_JOB`, which the client reads back with
:data:`DUPLICATE_JOB_NAMES` to name the job in Python terms.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping, Sequence
from typing import Any, Literal

WarningCode = Literal["nothing_trained", "stale_groups"]
NOTHING_TRAINED: WarningCode = "nothing_trained"
STALE_GROUPS: WarningCode = "stale_groups"
DUPLICATE_JOB = (
    "training job {job_id} ({status}) of model {model_id} has this same request: another would train"
    " the model on it again. Follow or cancel that job, or pass allow_duplicate=true to start a second one"
)
DUPLICATE_JOB_NAMES = re.compile(r"^training job (?P<job_id>\S+) \((?P<status>queued|running)\) of model ")


def _get(item: Any, name: str) -> Any:
    return item.get(name) if isinstance(item, Mapping) else getattr(item, name, None)


def sampled_at(trajectory: Any) -> int | None:
    """The step that sampled a trajectory (a wire model or its JSON): its final policy version, else
    its initial one."""
    final = _get(trajectory, "final_policy_version")
    version = final if final is not None else _get(trajectory, "initial_policy_version")
    return version if isinstance(version, int) and not isinstance(version, bool) else None


def group_versions(groups: Iterable[Any]) -> list[int | None]:
    """Per group (wire models or JSON), the newest step that sampled one of its trajectories (None:
    not recorded)."""
    versions: list[int | None] = []
    for group in groups:
        known = [v for t in _get(group, "trajectories") or () if (v := sampled_at(t)) is not None]
        versions.append(max(known) if known else None)
    return versions


def _steps(steps: Sequence[int]) -> str:
    low, high = min(steps), max(steps)
    return f"step {low}" if low == high else f"steps {low}-{high}"


def stale_groups(versions: Sequence[int | None], latest_step: int) -> str | None:
    """One line when groups were sampled from a step older than ``latest_step``; None otherwise."""
    stale = [v for v in versions if v is not None and v < latest_step]
    if not stale:
        return None
    return (
        f"{len(stale)} of {len(versions)} trajectory group(s) were sampled from {_steps(stale)}, older"
        f" than the model's latest checkpoint (step {latest_step}): training on them again trains the"
        " model twice on the same groups (a re-run training cell?); gather new groups from the latest step."
    )
