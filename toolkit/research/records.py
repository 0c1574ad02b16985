"""Trajectory groups from whatever a researcher holds: groups, stored records, or a model's log.

Stored records are what ``client.models.trajectories(...)`` returns: one per trajectory, with
``id``, ``group_id``, ``split``, ``step``, ``reward`` and ``trajectory`` (as a mapping or as
attributes). Records of one group (same ``step`` and ``group_id``) become one
:class:`TrajectoryGroup`, in the order they came.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any, Unpack

from ..client import Client
from ..client.training_ops import TrajectoryFilters
from ..types.training import Trajectory, TrajectoryGroup
from ..types.trajectories import StoredTrajectory

PAGE = 1000  # the largest page the trajectory listing serves
GroupSource = Iterable[TrajectoryGroup | Mapping[str, Any] | Any]


def field(record: Any, name: str, default: Any = None) -> Any:
    """``record[name]`` of a mapping, ``record.name`` of an object."""
    if isinstance(record, Mapping):
        return record.get(name, default)
    return getattr(record, name, default)


def _is_record(item: Any) -> bool:
    return field(item, "trajectory") is not None and field(item, "trajectories") is None


def as_groups(items: GroupSource) -> list[TrajectoryGroup]:
    """Groups as they are (objects or their JSON), or stored records folded into their groups."""
    groups: list[TrajectoryGroup] = []
    by_key: dict[tuple[Any, Any], TrajectoryGroup] = {}
    for item in items:
        if not _is_record(item):
            groups.append(TrajectoryGroup.model_validate(item))
            continue
        key = (field(item, "step"), field(item, "group_id"))
        group = by_key.get(key)
        if group is None:
            group = by_key[key] = TrajectoryGroup(trajectories=[])
            groups.append(group)
        group.trajectories.append(Trajectory.model_validate(field(item, "trajectory")))
    return groups


def stored_records(
    client: Client, model_id: str, **filters: Unpack[TrajectoryFilters]
) -> list[StoredTrajectory]:
    """Every stored trajectory of a model that matches ``filters`` (those of
    ``client.models.trajectories``), walking its cursor pages."""
    return list(client.models.trajectories(model_id, limit=PAGE, **filters))


def stored_groups(
    client: Client, model_id: str, **filters: Unpack[TrajectoryFilters]
) -> list[TrajectoryGroup]:
    """A model's stored trajectories as groups (copies: changing them changes nothing stored)."""
    return as_groups(stored_records(client, model_id, **filters))
