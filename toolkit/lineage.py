"""The checkpoint tree of one or more models, as a frame: one row per node, each with its parent.

Each model's checkpoints hang off its base model (one root per base, shared by the models on it, so
two runs on one base branch there); checkpoint N's parent is the step its job started from. That
step comes from the checkpoint records (``client.models.records``, where the client and deployment
have them: ``parent_step``, the job's request, digests, seed), else from the jobs (``base_step`` of
the job whose ``result_step`` is N, its config from its ``training_started`` event), else the step
before. A parent step that no longer exists (deleted) is a node of kind ``deleted``.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import TYPE_CHECKING, Any

import pandas as pd

from .client import APIStatusError, UnsupportedOperation
from .frames import flatten

if TYPE_CHECKING:
    from .client import Client
    from .types.training import Checkpoint, Model, TrainingJob

COLUMNS = [
    "node",
    "label",
    "parent",
    "kind",
    "model_id",
    "model",
    "step",
    "job_id",
    "job_kind",
    "trained",
    "seed",
    "digest",
    "config",
    "metrics",
    "source",
]
NOT_CONFIG = {"model_id", "trajectory_groups"}  # request keys that are data, not config


def node_name(model_id: str, step: int) -> str:
    return f"{model_id}:step{step}"


def base_node(base_model: str) -> str:
    return f"base {base_model}"


def _get(record: Any, name: str) -> Any:
    return record.get(name) if isinstance(record, Mapping) else getattr(record, name, None)


def checkpoint_records(client: Client, model_id: str) -> list[Any] | None:
    """The model's checkpoint records (``client.models.records``), or None where the client or the
    deployment has none."""
    read = getattr(client.models, "records", None)
    if read is None:
        return None
    try:
        return list(read(model_id))
    except (APIStatusError, UnsupportedOperation):
        return None


def _job_config(client: Client, job_id: str) -> dict[str, Any]:
    """The resolved config a job trained with (its ``training_started`` event), flattened."""
    for event in client.training_jobs.events.list(job_id, limit=5):
        if event.type == "training_started":
            return flatten(event.data.get("config") or {})
    return {}


def _rows(client: Client, model: Model, checkpoints: list[Checkpoint], jobs: list[TrainingJob]) -> list[dict]:
    records = {int(_get(r, "step")): r for r in checkpoint_records(client, model.id) or []}
    by_result = {j.result_step: j for j in jobs if j.result_step is not None}
    steps = sorted(c.step for c in checkpoints)
    rows = []
    for n, checkpoint in enumerate(sorted(checkpoints, key=lambda c: c.step)):
        step, record, job = (
            checkpoint.step,
            records.get(checkpoint.step),
            by_result.get(checkpoint.step),
        )
        row: dict[str, Any] = {
            "node": node_name(model.id, step),
            "label": f"{model.name}:step{step}",
            "kind": "checkpoint",
            "model_id": model.id,
            "model": model.name,
            "step": step,
            "trained": checkpoint.trained,
            "metrics": dict(checkpoint.metrics),
            "job_id": None,
            "job_kind": None,
            "seed": None,
            "digest": None,
            "config": {},
        }
        if record is not None:
            request = _get(record, "request") or {}
            parent = _get(record, "parent_step")
            row |= {
                "job_id": _get(record, "job_id"),
                "job_kind": _get(record, "job_kind"),
                "seed": _get(record, "seed"),
                "digest": _get(record, "checkpoint_digest"),
                "config": flatten({k: v for k, v in request.items() if k not in NOT_CONFIG}),
                "source": "records",
            }
        elif job is not None:
            parent = job.base_step
            config = _job_config(client, job.id)
            row |= {
                "job_id": job.id,
                "job_kind": job.kind,
                "config": config,
                "seed": config.get("seed"),
                "source": "jobs",
            }
        else:
            parent = steps[n - 1] if n else None
            row["source"] = "checkpoints"
        row["parent"] = base_node(model.base_model) if parent is None else node_name(model.id, int(parent))
        rows.append(row)
    return rows


def _deleted(model: Model, rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """A node for each parent step a model no longer has (deleted), hung off its base."""
    known = {r["node"] for r in rows}
    missing = dict.fromkeys(r["parent"] for r in rows if r["parent"] not in known and r["step"] != 0)
    return [
        {
            "node": node,
            "label": f"{model.name}:step{node.rsplit(':step', 1)[1]} (deleted)",
            "parent": base_node(model.base_model),
            "kind": "deleted",
            "model_id": model.id,
            "model": model.name,
            "step": int(node.rsplit(":step", 1)[1]),
            "metrics": {},
            "config": {},
        }
        for node in missing
    ]


def lineage_frame(client: Client, model_ids: Iterable[str]) -> pd.DataFrame:
    """The tree of ``model_ids``' checkpoints, one row per node (:data:`COLUMNS`): ``node`` (``<model
    id>:step<N>``, or ``base <base model>``) and its ``label`` (``<model name>:step<N>``), ``parent``
    (None for a base), ``kind`` (``base``, ``checkpoint``, ``deleted``), the job that made it
    (``job_id``, ``job_kind``, flattened ``config``, ``seed``), its ``metrics``, ``trained``,
    ``digest`` (from records) and ``source`` (where its parent came from: ``records``, ``jobs`` or
    ``checkpoints``, the step before). ``step`` and ``seed`` are whole numbers (``Int64``, ``<NA>``
    where there is none)."""
    rows: list[dict[str, Any]] = []
    for model_id in dict.fromkeys(model_ids):
        model = client.models.retrieve(model_id)
        checkpoints = list(client.models.checkpoints.list(model_id, limit=100))
        try:
            jobs = list(client.training_jobs.list(model_id=model_id))
        except UnsupportedOperation:  # a deployment that lists no jobs: parents from the steps
            jobs = []
        base = base_node(model.base_model)
        if base not in {r["node"] for r in rows}:
            rows.append(
                {
                    "node": base,
                    "label": base,
                    "parent": None,
                    "kind": "base",
                    "model": model.base_model,
                    "metrics": {},
                    "config": {},
                }
            )
        mine = _rows(client, model, checkpoints, jobs)
        rows += mine + _deleted(model, mine)
    frame = pd.DataFrame(rows, columns=COLUMNS)
    for column in ("step", "seed"):  # whole numbers, exact (a float column would show 6.87e+18)
        frame[column] = pd.array([row.get(column) for row in rows], dtype="Int64")
    frame["parent"] = frame["parent"].astype(object).where(frame["parent"].notna(), None)
    return frame
