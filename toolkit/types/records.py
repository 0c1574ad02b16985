"""Wire models of checkpoint records (an extension, docs/interfaces.md "Checkpoint records") and the
digests they name, computed the same way on both sides of the wire.

Digests are hex SHA-256:

- ``data_digest`` of an RL job: of the canonical JSON (:func:`canonical_json`) of its trajectory
  groups as the server validated them (:func:`groups_digest`); of an SFT job: of its training file's
  bytes.
- ``checkpoint_digest`` and ``base_digest``: of a folder's files (:func:`files_digest`), the lines
  ``"<sha256 of the file>  <name>\\n"`` in name order, which is what ``sha256sum * | sha256sum``
  prints in that folder.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterable, Mapping
from datetime import datetime
from typing import Any, Literal

from pydantic import BaseModel, Field

from .common import WireModel
from .training import TrajectoryGroup

# metrics measured on the wall clock: no replay gives them again, so none compares them
WALL_CLOCK_PREFIXES = ("timing_s/", "throughput/")


def replayable(metrics: Mapping[str, float]) -> dict[str, float]:
    """The metrics a bit-for-bit replay gives again (those not measured on the wall clock)."""
    return {k: v for k, v in metrics.items() if not k.startswith(WALL_CLOCK_PREFIXES)}


def canonical_json(value: Any) -> bytes:
    """Keys sorted, no spaces, UTF-8: the same value always gives the same bytes."""
    return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False).encode()


def sha256_hex(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def groups_digest(groups: Iterable[TrajectoryGroup | Mapping[str, Any]]) -> str:
    """The data digest of an RL job's trajectory groups (each as the server dumps it: unset fields
    left out)."""
    dumped = [
        (g if isinstance(g, BaseModel) else TrajectoryGroup.model_validate(g)).model_dump(
            mode="json", exclude_unset=True
        )
        for g in groups
    ]
    return sha256_hex(canonical_json(dumped))


def files_digest(files: Iterable[tuple[str, str]]) -> str:
    """The digest of a folder from ``(name, sha256 hex)`` of each of its files."""
    return sha256_hex("".join(f"{sha}  {name}\n" for name, sha in sorted(files)).encode())


class CheckpointRecord(WireModel):
    """What produced one checkpoint (``GET .../checkpoints/{step}/record``).

    Step 0 is the base model itself (no job, no files). Checkpoints written before records existed
    carry what the store still knew (parent step, job, metrics); their other fields are None.
    ``request`` is the job's request as sent, without the RL job's ``trajectory_groups`` (named by
    ``data_digest``; an exported experiment embeds them). ``deterministic`` says in one sentence on
    what this checkpoint can be replayed bit for bit.
    """

    model_id: str
    step: int
    parent_step: int | None = None
    job_id: str | None = None
    job_kind: Literal["rl", "sft"] | None = None
    request: dict[str, Any] | None = None
    data_digest: str | None = None
    base_model: str
    base_digest: str | None = None
    base_revision: str | None = None  # the hub commit the base came from (None: a folder, a built-in)
    checkpoint_digest: str | None = None
    seed: int | None = None
    versions: dict[str, str] = Field(default_factory=dict)
    device: str | None = None
    dtype: str | None = None
    torch_threads: int | None = None
    cpu_capability: str | None = None  # torch.backends.cpu.get_cpu_capability(): AVX512, AVX2, ...
    deterministic: str | None = None
    metrics: dict[str, float] = Field(default_factory=dict)
    created_at: datetime | None = None


class CheckpointRecordList(WireModel):
    """``GET /v1/preview/models/{model_id}/records``: every checkpoint's record, by step."""

    object: Literal["list"] = "list"
    data: list[CheckpointRecord]
